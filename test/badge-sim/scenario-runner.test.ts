// The scenario runner: every shipped scenario passes on a virtual badge against a real server
// set up as the scenario says; a wrong expectation fails with expected vs observed; and
// `badgebench sim run` exits 1 on a failure, prints plain lines off a terminal and an updating
// line on one, and writes a JUnit report that validates against fixtures/junit/junit.xsd. Against
// a running server: sim-cli-server.test.ts.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { loadScenario, parseScenario, type Scenario } from "../../badge-sim/runners/scenario.ts";
import { runScenario } from "../../badge-sim/runners/scenario-runner.ts";
import { prepareInProcess } from "../../scripts/cli/sim-run.ts";
import { baseEnv, ROOT, run, tempDirs } from "../server/cli-process.ts";
import { junitProblems } from "./junit-schema.ts";

const SHIPPED = path.join(ROOT, "fixtures/scenarios");
const shipped = fs
  .readdirSync(SHIPPED)
  .filter((f) => f.endsWith(".json"))
  .map((file) => loadScenario(path.join(SHIPPED, file)));
const tempDir = tempDirs("sim-run");

/** A shipped scenario with changes, as a new file. */
function variant(file: string, change: (json: any) => void): string {
  const json = JSON.parse(fs.readFileSync(path.join(SHIPPED, file), "utf8"));
  change(json);
  const out = path.join(tempDir("variant"), file);
  fs.writeFileSync(out, JSON.stringify(json));
  return out;
}

describe("the shipped scenarios on the virtual badge", () => {
  it.each(shipped.map((s) => [s.name, s] as const))("%s", async (_, scenario) => {
    const result = await runScenario(scenario, prepareInProcess);
    expect({ outcome: result.outcome, message: result.message, failed: result.checks.filter((c) => !c.passed) }).toEqual({ outcome: "passed", message: null, failed: [] });
    expect(result.checks.length).toBe(Object.keys(scenario.expect).length);
  });
});

describe("a scenario whose expectations do not hold", () => {
  const happy = shipped.find((s) => s.file.endsWith("happy-path.json"))!;
  const withExpect = (expect: object): Scenario => {
    const { file: _file, ...json } = structuredClone(happy);
    return parseScenario({ ...json, expect }, "edited.json");
  };

  it("fails, and each check says what was expected and what was observed", async () => {
    const result = await runScenario(
      withExpect({ runningVersion: "1.4.0", report: "err|1.5.0|*", fleetState: "failed", states: ["online.downloading", "updateFailed"], screen: ["Updated to 1.5.0"] }),
      prepareInProcess,
    );
    expect(result.outcome).toBe("failed");
    const byField = Object.fromEntries(result.checks.map((c) => [c.field, c]));
    expect(byField["expect.runningVersion"]).toMatchObject({ expected: "1.4.0", observed: "1.5.0", passed: false });
    expect(byField["expect.report"]).toMatchObject({ expected: "err|1.5.0|*", observed: "ok|1.5.0", passed: false });
    expect(byField["expect.fleetState"]).toMatchObject({ expected: "failed", observed: "current", passed: false });
    expect(byField["expect.states"]!.passed).toBe(false);
    expect(byField["expect.states"]!.observed).toContain("online.switching");
    expect(byField["expect.screen"]!.passed).toBe(true);
  });

  it("states must come in the order given; screens may share a screen", async () => {
    const result = await runScenario(
      withExpect({ states: ["online.switching", "online.downloading"], screen: ["Badge 1.5.0 - ready", "Updated to 1.5.0"] }),
      prepareInProcess,
    );
    expect(result.checks.map((c) => [c.field, c.passed])).toEqual([
      ["expect.states", false],
      ["expect.screen", true],
    ]);
  });

  it("a server that cannot be set up is an error, not a pass", async () => {
    const result = await runScenario(happy, async () => {
      throw new Error("disk full");
    });
    expect(result).toMatchObject({ outcome: "error", message: "could not set up the server: disk full" });
  });
});

describe("badgebench sim run", () => {
  it("runs the shipped set: exit 0, one JSON object, and a JUnit report that validates", async () => {
    const junit = path.join(tempDir("junit"), "reports", "scenarios.xml");
    // every shipped scenario in one process: seconds on an idle machine, more on a busy one
    const result = await run(["sim", "run", "fixtures/scenarios", "--json", "--junit", junit], { timeoutMs: 90_000 });
    expect(result.code, result.stderr).toBe(0);
    const body = JSON.parse(result.stdout);
    expect(body).toMatchObject({ object: "sim_run", scenarios: shipped.length, passed: shipped.length, failed: 0, errors: 0, skipped: 0 });
    expect(junitProblems(junit)).toBeNull();
    const xml = fs.readFileSync(junit, "utf8");
    expect(xml.match(/<testcase /g)).toHaveLength(shipped.length);
    expect(xml).toContain(`tests="${shipped.length}" failures="0" errors="0" skipped="0"`);
  });

  it("exits 1 on a failing scenario and shows expected vs observed in plain lines; the JUnit report has the failure and still validates", async () => {
    const failing = variant("happy-path.json", (json) => (json.expect.runningVersion = "9.9.9"));
    const unreadable = path.join(tempDir("bad"), "broken.json");
    fs.writeFileSync(unreadable, `{"name": "x", "badge": {}}`);
    const junit = path.join(tempDir("junit"), "failing.xml");
    const result = await run(["sim", "run", failing, path.join(SHIPPED, "already-current.json"), unreadable, "--junit", junit]);
    expect(result.code).toBe(1);
    expect(result.stdout).not.toContain("\r");
    expect(result.stdout).toContain(`FAIL happy path [${path.relative(ROOT, failing)}]`);
    expect(result.stdout).toMatch(/expect\.runningVersion\n\s+expected: "9\.9\.9"\n\s+observed: "1\.5\.0"/);
    expect(result.stdout).toContain("PASS already current");
    expect(result.stdout).toContain(`ERROR ${unreadable}`);
    expect(result.stdout).toContain("badge.version: ");
    expect(result.stdout).toMatch(/3 scenarios: 1 passed, 1 failed, 1 error, 0 skipped/);

    expect(junitProblems(junit)).toBeNull();
    const xml = fs.readFileSync(junit, "utf8");
    expect(xml).toContain(`failures="1" errors="1"`);
    expect(xml).toMatch(/<failure message="expect\.runningVersion: expected &quot;9\.9\.9&quot;, observed &quot;1\.5\.0&quot;" type="expectation">/);
    expect(xml).toMatch(/<system-out>[^<]*state\s+online\.switching/);
  });

  it("shows one updating progress line on a terminal", () => {
    const command = `node scripts/cli/badgebench.js sim run fixtures/scenarios/happy-path.json fixtures/scenarios/already-current.json`;
    // `script` gives the command a pseudo-terminal, as a person at a terminal would have.
    const output = execFileSync("script", ["-qec", command, "/dev/null"], { cwd: ROOT, env: baseEnv({ CI: "" }), encoding: "utf8" });
    expect(output).toContain("\r\x1b[2K[1/2] happy path ...");
    expect(output).toContain("\r\x1b[2K[2/2] already current ...");
    expect(output).toMatch(/2 scenarios: 2 passed/);
  });
});
