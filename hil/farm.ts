// A board farm's scheduler (issue 25): scenarios spread over several badges, each badge playing
// one at a time. A badge is set up (flashed, its supply set) only when the next scenario does not
// start where it stands: an idle badge takes a scenario from its own bench first, else one from
// the bench with the most scenarios left, so each bench's scenarios stay on as few badges as
// keep them all busy. Within a bench, scenarios that end on the version they started from come
// first, and one that leaves the badge elsewhere (an update, or a failed update: its download
// checkpoint in NVS would make the next scenario resume, issue 23) last, as it needs a setup
// after it; among those, the one that waits longest on the wall clock first.
// A failed scenario is played again up to `retries` times (a new setup first: it may have left the
// badge anywhere); one that passes on a retry keeps its failed tries (`reruns`): it is flaky.
import type { Scenario } from "../badge-sim/runners/scenario.ts";
import type { ScenarioResult } from "../badge-sim/runners/scenario-runner.ts";

/** Where a scenario starts: version, battery and supply. Scenarios with the same bench need no setup between them. */
export type BenchKey = string;

export interface FarmResult extends ScenarioResult {
  /** the badge it was played on */
  badge: string;
  /** earlier tries that failed or erred, oldest first; a passed result with reruns is flaky */
  reruns: ScenarioResult[];
}

export interface FarmOptions<B extends { name: string }> {
  badges: B[];
  benchOf: (scenario: Scenario) => BenchKey;
  /** plays one try; `setUp` is true when the badge must first be brought to the scenario's bench */
  play: (badge: B, scenario: Scenario, setUp: boolean) => Promise<ScenarioResult>;
  retries: number;
  onStart?: (badge: B, scenario: Scenario, attempt: number) => void;
  onResult?: (result: FarmResult) => void;
}

/** Whether the badge is left off its bench: on another version, or with a failed update's download checkpoint in NVS. */
export const leavesBench = (scenario: Scenario) =>
  (scenario.expect.runningVersion !== undefined && scenario.expect.runningVersion !== scenario.badge.version) || scenario.expect.report?.startsWith("err|") === true;

/** The seconds a scenario waits on a real badge's wall clock (its `wait` steps): what makes one scenario long. */
const waitedSeconds = (scenario: Scenario) => scenario.steps.reduce((sum, step) => sum + (step.do === "wait" ? step.seconds : 0), 0);

/** Plays every scenario on the farm; the results in the scenarios' order. */
export async function playOnFarm<B extends { name: string }>(scenarios: Scenario[], options: FarmOptions<B>): Promise<FarmResult[]> {
  // the longest first (as a scheduler of jobs on machines does: the farm then ends when its work
  // does, not one long scenario after the rest), and within that the ones that keep the bench
  const waiting = [...scenarios.entries()].sort(([, a], [, b]) => Number(leavesBench(a)) - Number(leavesBench(b)) || waitedSeconds(b) - waitedSeconds(a));
  const results: FarmResult[] = new Array(scenarios.length);

  const take = (bench: BenchKey | null): [number, Scenario] | undefined => {
    let at = bench === null ? -1 : waiting.findIndex(([, scenario]) => options.benchOf(scenario) === bench);
    if (at === -1) {
      const left = new Map<BenchKey, number>();
      for (const [, scenario] of waiting) left.set(options.benchOf(scenario), (left.get(options.benchOf(scenario)) ?? 0) + 1);
      const busiest = [...left.entries()].sort((a, b) => b[1] - a[1])[0]?.[0];
      at = waiting.findIndex(([, scenario]) => options.benchOf(scenario) === busiest);
    }
    return at === -1 ? undefined : waiting.splice(at, 1)[0];
  };

  const work = async (badge: B) => {
    // unknown at first: the first scenario sets the badge up
    let bench: BenchKey | null = null;
    for (let next = take(bench); next; next = take(bench)) {
      const [index, scenario] = next;
      const reruns: ScenarioResult[] = [];
      let result: ScenarioResult;
      for (let attempt = 0; ; attempt++) {
        options.onStart?.(badge, scenario, attempt);
        result = await options.play(badge, scenario, bench !== options.benchOf(scenario));
        const passed = result.outcome === "passed" || result.outcome === "skipped";
        // a skipped scenario did not touch the badge; a failed one may have left it anywhere
        bench = result.outcome === "skipped" ? bench : passed && !leavesBench(scenario) ? options.benchOf(scenario) : null;
        if (passed || attempt >= options.retries) break;
        reruns.push(result);
      }
      const farmResult: FarmResult = { ...result, badge: badge.name, reruns };
      results[index] = farmResult;
      options.onResult?.(farmResult);
    }
  };
  await Promise.all(options.badges.map(work));
  return results;
}

