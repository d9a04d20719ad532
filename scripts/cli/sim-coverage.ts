// `badgebench sim coverage`: how much of the badge statechart the generated model paths exercise
// (see badge-sim/model/model-coverage.ts). Runs standalone too: `npx tsx scripts/cli/sim-coverage.ts [--json]`.
import { pathToFileURL } from "node:url";
import { formatCoverage, measureModelCoverage } from "../../badge-sim/model/model-coverage.ts";

/** Prints the coverage; the exit code is 1 when a transition was missed or a path went astray. */
export async function runSimCoverage(options: { json: boolean }): Promise<number> {
  const report = measureModelCoverage();
  console.log(options.json ? JSON.stringify(report) : formatCoverage(report));
  return report.share < 1 || report.failures.length > 0 ? 1 : 0;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = await runSimCoverage({ json: process.argv.includes("--json") });
}
