// Model coverage of the badge statechart: generated paths run on real actors as the graph
// predicted, and take every transition of the machine. The figure is measured, so leaving
// paths out must show in it.
import { getStateNodes } from "@xstate/graph";
import { describe, expect, it } from "vitest";
import { badgeMachine } from "../../badge-sim/model/badge-machine.ts";
import { formatCoverage, generatePaths, listTransitions, runPaths } from "../../badge-sim/model/model-coverage.ts";
import { run } from "../server/cli-process.ts";

const UPDATE_FAILED_TIMER = "updateFailed --after 3000 ms--> restarting";

describe("the transitions of the badge machine", () => {
  const transitions = listTransitions();

  it("are listed once each, every guarded branch on its own", () => {
    const ids = transitions.map((transition) => transition.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids).toEqual(
      expect.arrayContaining([
        "badge --battery.changed--> (stays)",
        "booting --boot done [wasInstallInterrupted]--> awake",
        "awake --menu.checkForUpdate [isOnExternalPower]--> online.checking",
        "awake --menu.checkForUpdate [else]--> awake.plugInPrompt",
        "awake --after 30000 ms--> asleep",
        "awake.opportunity --always [and(isOnExternalPower, isContactDue)]--> online.syncing",
        "online.downloading --download.failed [isDownloadUnauthorized]--> updateFailed",
        UPDATE_FAILED_TIMER,
      ]),
    );
  });

  it("touch every state node of the machine", () => {
    const touched = new Set(transitions.flatMap((transition) => [transition.source, ...transition.targets]));
    const nodes = [badgeMachine.id, ...getStateNodes(badgeMachine.root).map((node) => node.path.join("."))];
    expect(nodes.filter((node) => !touched.has(node))).toEqual([]);
  });
});

describe("the generated paths", () => {
  const paths = generatePaths();

  it("run as the graph predicted and take every transition", () => {
    const report = runPaths(paths);
    console.log(formatCoverage(report));
    expect(report.failures).toEqual([]);
    expect(report.missed).toEqual([]);
    expect(report.share).toBe(1);
  });

  it("without the ones through the failure screen's timer, miss that transition", () => {
    const report = runPaths(paths.filter((path) => !path.steps.some((step) => step.event.type === "xstate.after.3000.badge.updateFailed")));
    expect(report.share).toBeLessThan(1);
    expect(report.missed).toEqual([UPDATE_FAILED_TIMER]);
    expect(formatCoverage(report)).toContain(`missed: ${UPDATE_FAILED_TIMER}`);
  });

  it("that end somewhere else than predicted are reported", () => {
    const [path] = paths;
    const wrong = { ...path!, steps: path!.steps.map((step, i, steps) => (i === steps.length - 1 ? { ...step, state: steps[0]!.state } : step)) };
    expect(runPaths([wrong]).failures).toEqual([expect.stringMatching(/^path 1 \(.*\): expected booting .*, the actor is in /)]);
  });
});

describe("badgebench sim coverage", () => {
  // each run walks every path (about 3 s of CPU): room for a machine that gives it a fraction of a core
  it("prints the figure and exits 0 at 100 %; --json gives one object", { timeout: 150_000 }, async () => {
    const text = await run(["sim", "coverage"], { timeoutMs: 60_000 });
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toMatch(/^model coverage: (\d+) of \1 transitions \(100\.0 %\) over \d+ paths\n$/);
    const json = await run(["sim", "coverage", "--json"], { timeoutMs: 60_000 });
    expect(JSON.parse(json.stdout)).toMatchObject({ share: 1, missed: [], failures: [] });
  });
});
