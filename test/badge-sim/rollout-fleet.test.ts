// A staged rollout on a simulated fleet of 200 badges (issue 24; scripts/harness/rollout-fleet.ts
// plays it, scripts/bench/bench-rollout.ts measures 2,000): a release that crashes on boot on 10 %
// of the badges halts inside its first stage, and no badge outside that stage ever downloads it;
// a good release reaches every badge through every stage.
import { describe, expect, it } from "vitest";
import { simulateRollout, type RolloutSimulationOptions } from "../../scripts/harness/rollout-fleet.ts";

const STAGES = [5, 25, 50, 100];
const options: RolloutSimulationOptions = {
  badges: 200,
  faultyShare: 0.1,
  stages: STAGES,
  settings: { min_stage_seconds: 600, min_ok_share: 0.9, halt_failures: 5, halt_failure_share: 0.05, report_timeout_seconds: 900 },
  // Each round's boots spread over 2 s: the last stage's 100 downloads do not all start at once.
  spreadMs: 2_000,
};

describe("a staged rollout on 200 simulated badges", () => {
  it("halts a release that crashes on boot on 10 % of the badges inside its first stage; no badge outside it downloads the release", async () => {
    const sim = await simulateRollout(options);
    expect(sim.simulatorCrashes).toBe(0);
    const firstStage = sim.badges.filter((badge) => badge.place < STAGES[0]!);
    // The first stage holds badges (else the test proves nothing) and, as every stage, its share of faulty ones.
    expect(firstStage.length).toBeGreaterThan(0);
    const crashedInStage = firstStage.filter((badge) => badge.faulty);
    expect(crashedInStage.length).toBeGreaterThan(0);

    expect(sim.rollout).toMatchObject({ status: "halted", stage: { index: 0, percent: STAGES[0] } });
    expect(sim.rounds.map((round) => round.status)).toEqual(["halted"]);
    expect(sim.rollout.halt.failures.map((failure: any) => failure.device_id).sort()).toEqual(crashedInStage.map((badge) => badge.id).sort());
    expect(sim.rollout.halt.failures.every((failure: any) => failure.reason === "no report 900 s after its download began")).toBe(true);
    expect(sim.harmed).toBe(crashedInStage.length);

    const downloadedOutside = sim.badges.filter((badge) => badge.place >= STAGES[0]! && sim.downloaded.has(badge.id));
    // The canary downloaded it before the rollout began; no other badge outside the stage did.
    expect(downloadedOutside.map((badge) => badge.id)).toEqual([sim.badges.findLast((badge) => !badge.faulty)!.id]);
    expect(sim.rollout.counts.stages.slice(1).reduce((sum: number, stage: any) => sum + stage.downloaded, 0)).toBe(1);
  }, 240_000);

  it("takes a good release to every badge, stage by stage", async () => {
    const sim = await simulateRollout({ ...options, faultyShare: 0 });
    expect(sim.simulatorCrashes).toBe(0);
    expect(sim.rollout.status).toBe("completed");
    expect(sim.rounds.map((round) => round.percent)).toEqual(STAGES);
    expect(sim.rollout.history.map((entry: any) => `${entry.action} ${entry.stage}`)).toEqual(["created 5", "advance 25", "advance 50", "advance 100", "completed 100"]);
    // Each round updates the badges of the stage's band (the canary updated before the rollout).
    const inBand = (i: number) => sim.badges.filter((badge) => badge.place >= (STAGES[i - 1] ?? 0) && badge.place < STAGES[i]!).length;
    const canaryBand = STAGES.findIndex((percent) => sim.badges.at(-1)!.place < percent);
    expect(sim.rounds.map((round) => round.updated)).toEqual(STAGES.map((_, i) => inBand(i) - (i === canaryBand ? 1 : 0)));
    expect(sim.rollout.counts).toMatchObject({ badges: 200, ok: 200, failed: 0 });
    expect(sim.harmed).toBe(0);
  }, 240_000);
});
