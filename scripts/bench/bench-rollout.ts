// Benchmarks a staged rollout on the simulated fleet (issue 24; scripts/harness/rollout-fleet.ts):
// `--badges` (2,000) virtual badges at 1.4.0 against a server in this process, rounds in which
// every badge still booting asks for the update, the rollout clock moved past the stage time and
// the report timeout between rounds.
//
// 1. staged, bad: a release that crashes on boot on `--faulty-percent` (10) of the badges, stages
//    5, 25, 50, 100: wall time until the rollout halted, badges harmed (crashed) before it, and
//    badges outside the first stage that downloaded it (must be none but the canary);
// 2. baseline, same run: the same bad release to the whole fleet at once with no halt (stages
//    [100], failure limits out of reach: what `release promote` does): badges harmed; the figure
//    is the ratio of 1's harm to this;
// 3. staged, good: the same stages with no fault: wall time until it completed, and its rounds.
// Usage: npx tsx scripts/bench/bench-rollout.ts [--badges 2000] [--faulty-percent 10] [--image-size 65536] [--spread-ms 90000] [--json]
import { commandLine, cpusAndNode, loadAverage, log, round, type CpusAndNode } from "./bench-common.ts";
import { benchArgs, BenchUsageError, numberOptions, positiveInt, writeReport } from "./bench-cli.ts";
import { simulateRollout, type RolloutSimulation, type RolloutSimulationOptions } from "../harness/rollout-fleet.ts";

const STAGES = [5, 25, 50, 100];
// A round's badges boot over 90 s by default, so a stage's downloads do not all start at once: on
// a loaded 2-core machine, over 5 s or 30 s some of the last stage's 1,000 stalled or were cut
// (39 at 30 s, load 10), each badge reported ota=err, which counts as a failure, and the good
// release halted in its last stage. 25 failing badges (1.25 % of 2,000) is the absolute limit;
// the bad release's share of the first stage (10 %) halts it by the 5 % share.
const SETTINGS = { min_stage_seconds: 600, min_ok_share: 0.9, halt_failures: 25, halt_failure_share: 0.05, report_timeout_seconds: 900 };

interface Run {
  status: string;
  wall_s: number;
  rounds: number;
  /** the stage open when the rollout stopped */
  stopped_at_percent: number;
  harmed: number;
  downloaded: number;
  downloaded_outside_first_stage_besides_canary: number;
  /** the badges' outcomes over all rounds, with the reasons, as the fleet runner counted them */
  outcomes: Record<string, number>;
}

interface Report {
  machine: CpusAndNode & { load_before: number[]; load_after: number[] };
  badges: number;
  faulty_percent: number;
  staged_bad: Run;
  all_at_once_bad: Run;
  staged_good: Run;
  /** badges harmed by the staged rollout for each one harmed by the release sent to all at once */
  harm_ratio: number;
  valid: boolean;
  command: string;
}

function runOf(sim: RolloutSimulation): Run {
  const canary = sim.badges.findLast((badge) => !badge.faulty)!.id;
  const outside = sim.badges.filter((badge) => badge.place >= STAGES[0]! && badge.id !== canary && sim.downloaded.has(badge.id));
  return {
    status: sim.rollout.status,
    wall_s: round(sim.wallMs / 1000, 1),
    rounds: sim.rounds.length,
    stopped_at_percent: sim.rollout.stage.percent,
    harmed: sim.harmed,
    downloaded: sim.downloaded.size,
    downloaded_outside_first_stage_besides_canary: outside.length,
    outcomes: outcomesOf(sim),
  };
}

function outcomesOf(sim: RolloutSimulation): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const row of sim.rounds.flatMap((round) => round.outcomes)) {
    const name = row.reason ? `${row.outcome} (${row.reason})` : row.outcome;
    counts[name] = (counts[name] ?? 0) + row.count;
  }
  return counts;
}

async function main() {
  const values = benchArgs(numberOptions({ badges: 2000, "faulty-percent": 10, "image-size": 64 * 1024, "spread-ms": 90000 }));
  const badges = positiveInt("badges", values.badges);
  const faultyPercent = positiveInt("faulty-percent", values["faulty-percent"]);
  if (faultyPercent > 100) throw new BenchUsageError(`--faulty-percent must be at most 100, got ${faultyPercent}`);
  const base: RolloutSimulationOptions = {
    badges,
    faultyShare: faultyPercent / 100,
    stages: STAGES,
    settings: SETTINGS,
    imageBytes: positiveInt("image-size", values["image-size"]),
    spreadMs: positiveInt("spread-ms", values["spread-ms"]),
  };
  const loadBefore = loadAverage();
  log(`staged rollout of a release crashing on ${faultyPercent} % of ${badges} badges`);
  const stagedBad = runOf(await simulateRollout(base));
  log(`the same release to all ${badges} at once`);
  const allAtOnce = runOf(await simulateRollout({ ...base, stages: [100], settings: { ...SETTINGS, halt_failures: 1_000_000, halt_failure_share: 1 } }));
  log("staged rollout of a good release");
  const stagedGood = runOf(await simulateRollout({ ...base, faultyShare: 0 }));
  const report: Report = {
    machine: { ...cpusAndNode(), load_before: loadBefore, load_after: loadAverage() },
    badges,
    faulty_percent: faultyPercent,
    staged_bad: stagedBad,
    all_at_once_bad: allAtOnce,
    staged_good: stagedGood,
    harm_ratio: round(stagedBad.harmed / Math.max(1, allAtOnce.harmed), 3),
    valid:
      stagedBad.status === "halted" &&
      stagedBad.stopped_at_percent === STAGES[0] &&
      stagedBad.downloaded_outside_first_stage_besides_canary === 0 &&
      stagedBad.harmed < allAtOnce.harmed &&
      stagedGood.status === "completed",
    command: commandLine("bench-rollout.ts"),
  };
  writeReport(report, values.json, table);
}

function table(r: Report): string[] {
  const row = (name: string, run: Run) =>
    `${name.padEnd(22)} ${run.status.padEnd(10)} ${String(run.stopped_at_percent).padStart(5)} % ${String(run.rounds).padStart(6)} ${String(run.wall_s).padStart(8)} ${String(run.harmed).padStart(7)} ${String(run.downloaded).padStart(10)} ${String(run.downloaded_outside_first_stage_besides_canary).padStart(8)}`;
  return [
    `staged rollouts on ${r.badges} simulated badges, a release crashing on boot on ${r.faulty_percent} % of them (${r.machine.cpus} CPUs, node ${r.machine.node}, load ${r.machine.load_before.join(" ")} -> ${r.machine.load_after.join(" ")})`,
    `${"run".padEnd(22)} ${"status".padEnd(10)} ${"stage".padStart(7)} ${"rounds".padStart(6)} ${"wall s".padStart(8)} ${"harmed".padStart(7)} ${"downloads".padStart(10)} ${"outside".padStart(8)}`,
    row("staged, bad release", r.staged_bad),
    row("all at once, bad", r.all_at_once_bad),
    row("staged, good release", r.staged_good),
    ...(["staged_bad", "all_at_once_bad", "staged_good"] as const).map((name) => `${name} outcomes: ${Object.entries(r[name].outcomes).map(([outcome, n]) => `${outcome} ${n}`).join(", ")}`),
    `badges harmed, staged / all at once: ${r.harm_ratio}${r.valid ? "" : "  (INVALID: the staged rollout did not hold the release to its first stage, or the good one did not complete)"}`,
  ];
}

await main();
