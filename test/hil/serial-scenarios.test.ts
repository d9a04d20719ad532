// The shipped scenarios through the serial path (issue 5): each scenario file plays, unchanged,
// on the simulated badge served on a serial line and driven through SerialConsole and the
// serial target, the same driver a real badge gets. In this process over
// @serialport/binding-mock, and the happy path (and a power fault) over a socat pty pair too.
// A real badge on BADGE_PORT runs the same set; without one that test is shown as skipped.
import fs from "node:fs";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { loadScenario } from "../../badge-sim/runners/scenario.ts";
import { runScenario, type ScenarioResult } from "../../badge-sim/runners/scenario-runner.ts";
import { ModelOracle } from "../../hil/model-oracle.ts";
import { simSerialTarget } from "../../hil/sim-serial-badge.ts";
import { prepareInProcess } from "../../scripts/cli/sim-run.ts";
import { runHilRun } from "../../scripts/cli/hil-run.ts";

const ROOT = path.join(import.meta.dirname, "../..");
const SHIPPED = path.join(ROOT, "fixtures/scenarios");
const shipped = fs
  .readdirSync(SHIPPED)
  .filter((f) => f.endsWith(".json"))
  .sort()
  .map((file) => loadScenario(path.join(SHIPPED, file)));
const transcripts = mkdtempSync(path.join(tmpdir(), "badgebench-serial-scenarios-"));
afterAll(() => rmSync(transcripts, { recursive: true, force: true }));

const outcomeOf = (result: ScenarioResult) => ({ outcome: result.outcome, message: result.message, failed: result.checks.filter((c) => !c.passed) });
const PASSED = { outcome: "passed", message: null, failed: [] };

describe("the shipped scenarios on the simulated badge over a serial line (binding-mock), the model as oracle", () => {
  it.each(shipped.map((s) => [s.name, s] as const))("%s", async (_, scenario) => {
    const target = simSerialTarget({ transport: "mock", transcriptDir: transcripts, oracle: () => new ModelOracle() });
    const result = await runScenario(scenario, prepareInProcess, { target });
    expect(outcomeOf(result)).toEqual(PASSED);
    // every expectation, and the oracle's verdict on every console event
    expect(result.checks.map((c) => c.field).sort()).toEqual([...Object.keys(scenario.expect).map((key) => `expect.${key}`), "model"].sort());
    // It really went over the console: the commands the runner gave are in the log as input.
    expect(result.observations.some((o) => o.kind === "input" && o.detail.startsWith("rest"))).toBe(true);
  });
});

describe("the model as oracle", () => {
  it("fails the scenario on the first deviation, with expected vs observed and the transcript", async () => {
    const happy = shipped.find((s) => s.file.endsWith("happy-path.json"))!;
    let seen = 0;
    const oracle = () => ({
      observe: (event: { kind: string }) =>
        event.kind === "state" && ++seen === 3 ? { previous: "online.checking", observed: "state online.downloading", allowed: ["online.offered"], message: "not allowed" } : null,
    });
    const result = await runScenario(happy, prepareInProcess, { target: simSerialTarget({ transcriptDir: transcripts, oracle }) });
    expect(result.outcome).toBe("failed");
    const model = result.checks.find((c) => c.field === "model")!;
    expect(model).toMatchObject({ passed: false, expected: "from online.checking: online.offered" });
    expect(model.observed).toMatch(/^state online\.downloading: not allowed \(transcript: .*happy-path\.txt\)$/);
    expect(fs.existsSync(String(model.observed).match(/transcript: (.*)\)$/)![1]!)).toBe(true);
  });
});

describe("the simulated badge over a socat pty pair", () => {
  for (const file of ["happy-path.json", "brownout-50-percent.json"]) {
    it(file, async () => {
      const scenario = shipped.find((s) => s.file.endsWith(file))!;
      const result = await runScenario(scenario, prepareInProcess, { target: simSerialTarget({ transport: "pty" }) });
      expect(outcomeOf(result)).toEqual(PASSED);
    });
  }
});

describe("a real badge", () => {
  it.skipIf(!process.env.BADGE_PORT)("runs the shipped scenarios on a real badge on BADGE_PORT (needs BADGE_PORT, BADGE_RIG)", async () => {
    const rig = process.env.BADGE_RIG;
    if (!rig) throw new Error("BADGE_RIG must name the rig file (fixtures/rigs/*.json) of the badge on BADGE_PORT");
    const code = await runHilRun({ files: [SHIPPED], rig, port: process.env.BADGE_PORT, json: false, interactive: false });
    expect(code).toBe(0);
  }, 3_600_000);
});
