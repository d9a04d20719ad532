// globalSetup of every project (vitest.config.ts): brings the command line's bundle and the C
// reference badge's builds up to date once, before the test files that use them start in
// parallel, each of which would otherwise find them stale and build the same file at the same
// time (scripts/cli/build-cli.js; make in test/firmware, test/hil and the rig scripts).
import { execFileSync } from "node:child_process";
import { upToDateCliBundle } from "../scripts/cli/build-cli.js";

const REFERENCE_BADGE_BUILDS = ["build/reference-badge", "build/reference-badge-test", "build/reference-badge-asan", "build/test"];

export default async function setup() {
  await upToDateCliBundle();
  execFileSync("make", ["--no-print-directory", "-C", "firmware/reference-badge", ...REFERENCE_BADGE_BUILDS], { stdio: ["ignore", "ignore", "inherit"] });
}
