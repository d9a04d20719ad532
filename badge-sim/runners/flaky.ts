// A scenario that passed only on a retry is flaky, not passed: reports say so (JUnit's Surefire
// flakyFailure, the HTML report, the summary line).
import type { ScenarioResult } from "./scenario-runner.ts";

export const isFlaky = (result: ScenarioResult): boolean => result.outcome === "passed" && (result.reruns?.length ?? 0) > 0;
