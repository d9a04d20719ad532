// How long `npx badgebench` takes to answer: the command spawned `--runs` (20) times for
// `--help` and for `keys list` on a demo data directory (the demo school and one API key), one
// after another; the median and the slowest wall time from spawn to exit, target under 500 ms,
// and the median CPU time the command used (user + system), which a busy machine moves far less.
// The bundle is brought up to date first, so no run includes a build.
// Usage: npx tsx scripts/bench/bench-cli-start.ts [--runs 20] [--json]
import { spawn } from "node:child_process";
import { performance } from "node:perf_hooks";
import { upToDateCliBundle } from "../cli/build-cli.js";
import { CLI, commandLine, describeMachine, loadAverage, log, machine, median, procChildrenCpuSeconds, ROOT, round, withTempDir } from "./bench-common.ts";
import { benchArgs, positiveInt, writeReport } from "./bench-cli.ts";
import { openStore } from "../../server/store/database.ts";

const TARGET_MS = 500;

/** Runs the command once: its wall time from spawn to exit and its CPU time, ms. Rejects on a non-zero exit. */
function timeOnce(args: string[]): Promise<{ wallMs: number; cpuMs: number }> {
  const cpuBefore = procChildrenCpuSeconds(process.pid)!;
  const started = performance.now();
  const child = spawn(process.execPath, [CLI, ...args], { cwd: ROOT, stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code) => {
      const wallMs = performance.now() - started;
      if (code === 0) resolve({ wallMs, cpuMs: (procChildrenCpuSeconds(process.pid)! - cpuBefore) * 1000 });
      else reject(new Error(`badgebench ${args.join(" ")} exited ${code}: ${stderr}`));
    });
  });
}

async function main(): Promise<void> {
  const values = benchArgs({ runs: { type: "string", default: "20" } });
  const runs = positiveInt("runs", values.runs);
  await upToDateCliBundle();
  await withTempDir("badgebench-bench-cli-", async (data) => {
    // Only serve creates a store; the admin commands below use the one it made.
    await (await openStore({ dataDir: data })).close();
    await timeOnce(["import", "fixtures/demo-school.json", "--data", data]);
    await timeOnce(["keys", "create", "--mode", "test", "--scope", "attendance:read", "--name", "bench", "--data", data]);
    const commands = { help: ["--help"], keys_list: ["keys", "list", "--data", data] };
    const loadBefore = loadAverage();
    const figures: Record<string, { median_ms: number; slowest_ms: number; median_cpu_ms: number }> = {};
    for (const [name, args] of Object.entries(commands)) {
      log(`${runs} x badgebench ${args.join(" ")}`);
      const samples = [];
      for (let i = 0; i < runs; i++) samples.push(await timeOnce(args));
      const wall = samples.map((s) => s.wallMs);
      figures[name] = { median_ms: round(median(wall), 0), slowest_ms: round(Math.max(...wall), 0), median_cpu_ms: round(median(samples.map((s) => s.cpuMs)), 0) };
    }
    const report = { object: "bench_cli_start", command: commandLine("bench-cli-start.ts"), runs, target_ms: TARGET_MS, figures, machine: machine(loadBefore) };
    writeReport(report, values.json, (r) => [
      ...Object.entries(r.figures).map(
        ([name, f]) => `${name.padEnd(10)} median ${f.median_ms} ms, slowest ${f.slowest_ms} ms, CPU ${f.median_cpu_ms} ms${f.median_ms < TARGET_MS ? "" : `  (over the ${TARGET_MS} ms target)`}`,
      ),
      describeMachine(r.machine),
    ]);
  });
}

await main();
