// Fuzzes the HTTP interface from outside for longer than `npm test` does: the same targets and
// properties as test/server/fuzz-http.test.ts (never a 5xx, the endpoint's answer format, a
// refused request changes no row), with as many runs and whichever seed you ask for. Prints,
// per target, how the answers were spread over status codes and error codes (to see that the
// requests reach the parsers rather than stopping at authentication), then exits 1 with the
// shrunk counterexample at the first violation.
// Usage: npx tsx test/server/fuzz-http-run.ts [--runs 2000] [--seed N] [--target SUBSTRING] [--json]
import { parseArgs } from "node:util";
import { fuzzTarget, type RawAnswer } from "./fuzz-http.ts";
import { startFuzzFixture } from "./fuzz-targets.ts";
import { BenchUsageError, positiveInt } from "../../scripts/bench/bench-cli.ts";

const log = (message: string) => process.stderr.write(`[fuzz] ${message}\n`);

function answerKind(answer: RawAnswer): string {
  const text = answer.body.toString("utf8");
  const code = /"code":"([a-z_]+)"/.exec(text)?.[1] ?? /^X ([a-z_]+)/m.exec(text)?.[1];
  return code ? `${answer.status} ${code}` : String(answer.status);
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      runs: { type: "string", default: "2000" },
      seed: { type: "string", default: String(Date.now() % 2 ** 31) },
      target: { type: "string" },
      json: { type: "boolean", default: false },
    },
  });
  const runs = positiveInt("runs", values.runs);
  const seed = Number(values.seed);
  if (!Number.isSafeInteger(seed)) throw new BenchUsageError(`--seed must be an integer (got ${values.seed})`);
  const fixture = await startFuzzFixture();
  const report: Record<string, Record<string, number>> = {};
  let failure: unknown;
  try {
    for (const target of fixture.targets.filter((t) => !values.target || t.name.includes(values.target))) {
      const tally: Record<string, number> = {};
      report[target.name] = tally;
      if (!values.json) log(`${target.name}: ${runs} runs, seed ${seed}`);
      try {
        await fuzzTarget(fixture, target, { seed, numRuns: runs }, (answer) => {
          const kind = answerKind(answer);
          tally[kind] = (tally[kind] ?? 0) + 1;
        });
      } catch (error) {
        failure = error;
        break;
      }
      if (!values.json) {
        const spread = Object.entries(tally).sort((a, b) => b[1] - a[1]);
        log(`  ${spread.map(([kind, n]) => `${kind}: ${n}`).join(", ")}`);
      }
    }
  } finally {
    await fixture.close();
  }
  if (values.json) console.log(JSON.stringify({ seed, runs, ok: failure === undefined, answers: report, failure: failure instanceof Error ? `${failure.message}\n${String(failure.cause ?? "")}` : null }));
  if (failure !== undefined) {
    if (!values.json) console.error(failure instanceof Error ? `${failure.message}\n${String(failure.cause ?? "")}` : failure);
    process.exitCode = 1;
  }
}

await main();
