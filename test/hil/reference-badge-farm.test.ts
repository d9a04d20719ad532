// The rig as a board farm (issue 25): four reference badges in C on four socat ptys, each with its
// MQTT relays and fault proxy, one farm rig file, one `hil run --parallel` that locks each badge,
// spreads the shipped scenarios over them (a badge set up only when the next scenario starts
// elsewhere) and writes one JUnit report (validated against fixtures/junit/junit.xsd) and one
// HTML report naming the badge of each case. The farm's setup fails once, on purpose, for the
// first 1.6.0-dev flash (--flaky-setup): with --retries 1 that scenario passes on its second try
// and must be reported flaky, in JUnit (Surefire's flakyFailure) and in HTML.
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { runReferenceFarm } from "../../scripts/cli/reference-badge-farm.ts";
import { junitProblems } from "../badge-sim/junit-schema.ts";
import { ROOT } from "../server/cli-process.ts";

const SCENARIOS = path.join(ROOT, "fixtures/scenarios");

describe("hil run --parallel on a farm of four reference badges", () => {
  it("plays the shipped scenarios over the four badges, one JUnit and one HTML report naming each case's badge, the flaky one flaky", { timeout: 600_000 }, async () => {
    const work = fs.mkdtempSync(path.join(os.tmpdir(), "farm-test-"));
    const junit = path.join(work, "reports/farm.xml");
    const html = path.join(work, "reports/farm.html");
    const run = await runReferenceFarm({ files: [SCENARIOS], badges: 4, retries: 1, flakySetup: "1.6.0-dev", junit, html, workDir: work });
    const results = run.report.results;
    expect(run.code, run.stderr).toBe(0);
    expect(results.length).toBe(fs.readdirSync(SCENARIOS).filter((name) => name.endsWith(".json")).length);

    // nothing failed; a skip only where the farm's one server offers another release than the scenario
    // needs, or where the scenario's badge trusts release keys: the farm's firmware trusts none
    const notPassed = results.filter((result) => result.outcome !== "passed");
    const skippedFor = (result: (typeof results)[number]) =>
      result.outcome !== "skipped" ? null : /^the server at \S+ (offers|has published) /.test(result.message ?? "") ? "release" : /^the scenario's badge trusts the release keys .* and \S+ says the firmware for badge badge-[1-4] trusts none/.test(result.message ?? "") ? "keys" : null;
    expect(notPassed.every((result) => skippedFor(result) !== null), JSON.stringify(notPassed, null, 2)).toBe(true);
    expect(notPassed.filter((result) => skippedFor(result) === "keys").map((result) => result.name).sort()).toEqual([
      "key rotation: a release signed with the new key",
      "release signed by a key the badge does not hold",
      "signature line that is not base64",
      "tampered image, MD5 recomputed",
    ]);
    // the farm's one server offers one unsigned 1.5.0: exactly the scenarios that need another release or none
    expect(notPassed.map((result) => result.name).sort()).toEqual([
      "image that crashes on boot",
      "key rotation: a release signed with the new key",
      "no external power",
      "refusal: nothing published",
      "release signed by a key the badge does not hold",
      "signature line that is not base64",
      "tampered image, MD5 recomputed",
    ]);
    // every badge played, and each result names its badge
    const played = results.filter((result) => result.outcome === "passed");
    expect(new Set(played.map((result) => result.badge))).toEqual(new Set(["badge-1", "badge-2", "badge-3", "badge-4"]));

    // exactly the scenario made flaky on purpose is flaky
    expect(results.filter((result) => result.flaky).map((result) => result.name)).toEqual(["dev build newer than the release"]);

    const xml = fs.readFileSync(junit, "utf8");
    expect(junitProblems(junit)).toBeNull();
    const testcase = (name: string) => xml.slice(xml.indexOf(`<testcase name="${name}"`), xml.indexOf("</testcase>", xml.indexOf(`<testcase name="${name}"`)));
    const flaky = testcase("dev build newer than the release");
    expect(flaky).toMatch(/<property name="badge" value="badge-[1-4]"\/>/);
    expect(flaky).toMatch(/<flakyError message="the setup command of badge-[1-4] in farm\.json \(sh\) exited 1[^"]*failed \(on purpose, once/);
    expect(flaky).not.toMatch(/<failure|<error /);
    expect(xml.match(/<flakyFailure|<flakyError/g)).toHaveLength(1);
    // each played case names its badge and its attachments, as Jenkins' JUnit Attachments plugin reads them
    for (const result of played) {
      const body = testcase(result.name);
      expect(body).toContain(`<property name="badge" value="${result.badge}"/>`);
      const attached = [...body.matchAll(/\[\[ATTACHMENT\|([^\]]+)\]\]/g)].map((match) => match[1]!);
      expect(attached.map((file) => path.basename(file)).sort(), result.name).toEqual(["image.sha256", "timeline.txt", "transcript.txt"]);
      for (const file of attached) expect(fs.existsSync(file), file).toBe(true);
      const transcript = fs.readFileSync(attached.find((file) => file.endsWith("transcript.txt"))!, "utf8");
      expect(transcript).toMatch(/^\+\d+\.\d{3} < .*@bb boot /m);
      expect(fs.readFileSync(attached.find((file) => file.endsWith("image.sha256"))!, "utf8")).toMatch(/^[0-9a-f]{64}\n$/);
    }

    const page = fs.readFileSync(html, "utf8");
    const section = page.slice(page.indexOf("dev build newer than the release</h2>") - 300, page.indexOf("dev build newer than the release</h2>") + 2000);
    expect(section).toContain("FLAKY");
    expect(section).toMatch(/on badge <strong>badge-[1-4]<\/strong>/);
    expect(section).toContain("Flaky: passed on try 2");
    expect(page).toMatch(/\(1 flaky: passed on a retry\)/);

    // the run released every badge's lock: each can be taken at once
    const locks = fs.readdirSync(path.join(work, "locks"));
    expect(locks).toHaveLength(4);
    for (const lock of locks) expect(spawnSync("flock", ["-n", path.join(work, "locks", lock), "true"]).status, lock).toBe(0);
    fs.rmSync(work, { recursive: true, force: true });
  });
});
