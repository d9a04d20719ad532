// The scenario file format: every shipped file loads, and a bad file is refused with a message
// that names the file, the field and what was expected.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { loadScenario, reportMatches, ScenarioError } from "../../badge-sim/runners/scenario.ts";
import { ROOT } from "../server/cli-process.ts";
import { remoteMismatch } from "../../scripts/cli/sim-run.ts";

const SHIPPED = path.join(ROOT, "fixtures/scenarios");
const shipped = fs.readdirSync(SHIPPED).filter((f) => f.endsWith(".json"));

describe("the shipped scenarios", () => {
  it.each(shipped)("%s loads", (file) => {
    const scenario = loadScenario(path.join(SHIPPED, file));
    expect(scenario.steps.length).toBeGreaterThan(0);
  });

  it("cover every case the issue names", () => {
    const names = shipped.map((file) => loadScenario(path.join(SHIPPED, file)).name).join("\n");
    for (const needed of [/happy path/, /already current/, /refusal/, /low battery, not charging/, /low battery, charging/, /no external power/, /brownout at 10 %/, /brownout at 50 %/, /brownout at 99 %/, /during the partition switch/, /connection dropped/, /corrupt/, /stalled/, /revoked token/, /crashes on boot/, /dev build newer/, /pending report/]) {
      expect(names).toMatch(needed);
    }
    expect(names.match(/connection dropped/g)?.length).toBeGreaterThanOrEqual(3);
    // signed releases (issue 24)
    for (const needed of [/tampered image, MD5 recomputed/, /key the badge does not hold/, /signature line that is not base64/, /key rotation/]) expect(names).toMatch(needed);
  });

  it("that sign their release are skipped on a --server run, which cannot be told to sign with the fixture keys", () => {
    const signed = loadScenario(path.join(SHIPPED, "signature-key-rotation.json"));
    expect(remoteMismatch({ fleet: "1.5.0", versions: ["1.4.0", "1.5.0"], fleetSize: 262144 }, signed)).toBe("cannot be told to sign its release with a key of fixtures/signing-keys");
    const unsigned = loadScenario(path.join(SHIPPED, "happy-path.json"));
    expect(remoteMismatch({ fleet: "1.5.0", versions: ["1.4.0", "1.5.0"], fleetSize: 262144 }, unsigned)).toBeNull();
  });
});

describe("a bad scenario file", () => {
  const write = (json: unknown) => {
    const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "scenario-")), "bad.json");
    fs.writeFileSync(file, typeof json === "string" ? json : JSON.stringify(json));
    return file;
  };
  const good = () => JSON.parse(fs.readFileSync(path.join(SHIPPED, "happy-path.json"), "utf8"));

  it.each([
    ["a version of two numbers", (s: any) => (s.badge.version = "1.4"), /badge\.version: expected three dotted numbers/],
    ["an unknown step", (s: any) => s.steps.push({ do: "menu.explode" }), /steps\[2\]/],
    ["a wait without seconds", (s: any) => s.steps.push({ do: "wait" }), /steps\[2\]\.seconds/],
    ["a brownout at 120 %", (s: any) => (s.faults = { power: [{ kind: "brownout", atPercent: 120 }] }), /faults\.power\[0\]/],
    ["a network fault with a negative offset", (s: any) => (s.faults = { network: [{ kind: "drop", atByte: -1 }] }), /faults\.network\[0\]\.atByte/],
    ["an unknown field", (s: any) => (s.badge.colour = "red"), /badge.*colour/],
    ["an image larger than the slot", (s: any) => (s.server.release.size = 0x1e0001), /server\.release\.size/],
    ["nothing to observe", (s: any) => (s.expect = {}), /expect: expected at least one observation/],
    ["a report that is not ok| or err|", (s: any) => (s.expect.report = "fine"), /expect\.report: expected ok\|<version>/],
    ["a trusted key that is not a fixture key", (s: any) => (s.badge.trustedKeys = ["mine"]), /badge\.trustedKeys\[0\]: expected a key of fixtures\/signing-keys: old, new/],
    ["three trusted keys", (s: any) => (s.badge.trustedKeys = ["old", "new", "old"]), /badge\.trustedKeys/],
    ["a release signed with an unknown key", (s: any) => (s.server.release.signedWith = "stolen"), /server\.release\.signedWith/],
  ])("%s names the field", (_name, spoil, message) => {
    const scenario = good();
    spoil(scenario);
    const file = write(scenario);
    expect(() => loadScenario(file)).toThrow(ScenarioError);
    expect(() => loadScenario(file)).toThrow(message);
    expect(() => loadScenario(file)).toThrow(/bad\.json: not a valid scenario/);
  });

  it("that is not JSON, or missing, says so; a JSON mistake with its line and column", () => {
    expect(() => loadScenario(write("{nope"))).toThrow(/bad\.json:1:2: not JSON/);
    expect(() => loadScenario(write('{\n  "name": "x",\n  "steps": [1,]\n}'))).toThrow(/bad\.json:3:15: not JSON: Unexpected token ']'$/);
    expect(() => loadScenario("/nonexistent/x.json")).toThrow(/x\.json: cannot read: ENOENT/);
  });
});

describe("report patterns", () => {
  it.each([
    ["ok|1.5.0", "ok|1.5.0", true],
    ["ok|1.5.0", "ok|1.5.1", false],
    ["err|1.5.0|*", "err|1.5.0|download cut at 50%", true],
    ["err|1.5.0|*MD5*", "err|1.5.0|MD5 mismatch after 262144 bytes", true],
    ["err|1.5.0|*MD5*", "err|1.5.0|stalled", false],
    ["ok|1.5.0", "ok|1x5x0", false],
  ])("%s against %s is %s", (pattern, report, match) => {
    expect(reportMatches(pattern, report)).toBe(match);
  });
});
