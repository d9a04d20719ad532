// Benchmarks the rig as a board farm (issue 25): the shipped scenarios played by one
// `hil run --parallel` on a farm of 1, 2 and 4 reference badges in C (scripts/cli/reference-badge-farm.ts:
// socat ptys, MQTT relays starting and killing the badge processes, a fault proxy each, one
// server), `--runs` times each, in turns (1, 2, 4, 1, 2, 4, ...) so the machine's load falls on
// each size alike. The figure is hil run's wall time per farm size (median), and its ratio to
// the one-badge farm of the same run: a farm of N badges can at best take 1/N, and never less
// than its longest scenario (the pending report waits 60 s of wall time, as a real badge sleeps).
// Each scenario's wall time is summed too ("badge time"): the work the badges did, which stays
// the same whatever the farm's size when the machine's cores are not the limit, and grows when
// they are (badges, relays, proxies and the rig all share them).
// Usage: npx tsx scripts/bench/bench-rig-farm.ts [--runs 1] [--sizes 1,2,4] [--json]
import path from "node:path";
import { runReferenceFarm } from "../cli/reference-badge-farm.ts";
import { commandLine, describeMachine, loadAverage, log, machine, median, round, ROOT, type Machine } from "./bench-common.ts";
import { benchArgs, BenchUsageError, positiveInt, writeReport } from "./bench-cli.ts";

interface SizeFigure {
  badges: number;
  wall_s: number[];
  median_wall_s: number;
  /** the sum of the scenarios' wall times (the badges' work), median */
  median_badge_s: number;
  /** median wall over the one-badge farm's median wall */
  ratio_to_one: number;
  /** the longest scenario's wall time (median): no farm ends before it */
  median_longest_s: number;
  /** the best this farm can do, as a ratio to one badge: the longest scenario, or the summed time over the badges */
  floor_ratio: number;
  played: number;
  skipped: number;
}

interface Report {
  figure: "rig_farm";
  scenarios: number;
  runs: number;
  sizes: SizeFigure[];
  machine: Machine;
  command: string;
  valid: boolean;
}

async function main(): Promise<void> {
  const values = benchArgs({ runs: { type: "string", default: "1" }, sizes: { type: "string", default: "1,2,4" } });
  const runs = positiveInt("runs", values.runs);
  const sizes = values.sizes.split(",").map((size) => positiveInt("sizes", size));
  if (!sizes.includes(1)) throw new BenchUsageError("--sizes must hold 1: the other sizes are given as ratios to the one-badge farm");
  const loadBefore = loadAverage();
  const samples = new Map<number, Array<{ wall: number; badge: number; longest: number; played: number; skipped: number }>>(sizes.map((size) => [size, []]));
  let scenarios = 0;
  let valid = true;
  for (let run = 0; run < runs; run++) {
    for (const badges of sizes) {
      log(`run ${run + 1}/${runs}: ${badges} badge(s)`);
      const farm = await runReferenceFarm({ files: [path.join(ROOT, "fixtures/scenarios")], badges });
      const results = farm.report.results;
      scenarios = results.length;
      // a failed scenario would make the time mean something else
      if (farm.code !== 0) valid = false;
      samples.get(badges)!.push({
        wall: farm.wallMs / 1000,
        badge: results.reduce((sum, result) => sum + result.wall_ms, 0) / 1000,
        longest: Math.max(...results.map((result) => result.wall_ms)) / 1000,
        played: results.filter((result) => result.outcome !== "skipped").length,
        skipped: results.filter((result) => result.outcome === "skipped").length,
      });
    }
  }
  const oneWall = median(samples.get(1)!.map((sample) => sample.wall));
  const report: Report = {
    figure: "rig_farm",
    scenarios,
    runs,
    sizes: sizes.map((badges) => {
      const taken = samples.get(badges)!;
      const wall = median(taken.map((sample) => sample.wall));
      const longest = median(taken.map((sample) => sample.longest));
      const summed = median(taken.map((sample) => sample.badge));
      return {
        badges,
        wall_s: taken.map((sample) => round(sample.wall, 1)),
        median_wall_s: round(wall, 1),
        median_badge_s: round(summed, 1),
        ratio_to_one: round(wall / oneWall, 2),
        median_longest_s: round(longest, 1),
        floor_ratio: round(Math.max(longest, summed / badges) / oneWall, 2),
        played: taken[0]!.played,
        skipped: taken[0]!.skipped,
      };
    }),
    machine: machine(loadBefore),
    command: commandLine("bench-rig-farm.ts"),
    valid,
  };
  writeReport(report, values.json, (r) => [
    `${r.scenarios} shipped scenarios, hil run --parallel on a farm of reference badges; ${r.runs} run(s) per size; ${describeMachine(r.machine)}`,
    ...r.sizes.map(
      (size) =>
        `  ${size.badges} badge(s): ${size.median_wall_s} s wall (${size.ratio_to_one} of one badge; at best ${size.floor_ratio}: the longest scenario ${size.median_longest_s} s, or the summed ${size.median_badge_s} s over ${size.badges}); ${size.played} played, ${size.skipped} skipped`,
    ),
    ...(r.valid ? [] : ["  INVALID: a scenario failed or erred in some run"]),
  ]);
}

await main();
