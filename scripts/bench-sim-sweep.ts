// Benchmarks the fault sweep (issue 4 item 8): `--cases` (300) generated cases, fault kind x
// byte offset x battery volts x charging / external power (scripts/sweep-cases.ts, fast-check
// `fc.sample` with `--seed`, fixed by default so a run is repeatable), played one after another
// by badge-sim/fault-sweep.ts against an in-process server (scripts/sim-server.ts), each on a
// fresh device and a fresh virtual badge. Target: the whole sweep in under 15 s on this 2-core
// machine. Every case's invariants are checked; any violation makes the run invalid (exit 1).
//
// The image is DEFAULT_SWEEP_IMAGE_BYTES, the badge's stall timeout DEFAULT_SWEEP_STALL_TIMEOUT_MS
// wall ms (a stall case costs that much real time). A crash-on-boot case publishes its own
// crashing release as a canary for its device (1.6.0, 1.6.1, ...); that publish is inside the
// measured time, as is creating each device. The server start and the fleet release are not.
// Usage: npx tsx scripts/bench-sim-sweep.ts [--cases 300] [--seed 4242] [--json] [--html FILE]
// (--html: each case's wall time by fault, per-fault outcomes and any violations, drawn)
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import fc from "fast-check";
import {
  DEFAULT_SWEEP_IMAGE_BYTES,
  DEFAULT_SWEEP_STALL_TIMEOUT_MS,
  describeCase,
  runSweepCase,
  SWEEP_FAULT_KINDS,
  type SweepFaultKind,
  type SweepRelease,
} from "../badge-sim/fault-sweep.ts";
import { sweepReportHtml, type SweepCaseFigure } from "../badge-sim/figures-html.ts";
import { commandLine, log, median, percentile, positiveInt, round } from "./bench-common.ts";
import { startSimServer } from "./sim-server.ts";
import { sweepCase } from "./sweep-cases.ts";

/** for the standard 300 cases */
const TARGET_SECONDS = 15;
const TARGET_CASES = 300;
const DEFAULT_SEED = 4242;
const FLEET_VERSION = "1.5.0";

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      cases: { type: "string", default: "300" },
      seed: { type: "string", default: String(DEFAULT_SEED) },
      json: { type: "boolean", default: false },
      html: { type: "string" },
    },
  });
  const count = positiveInt("cases", values.cases);
  const seed = Number(values.seed);
  if (!Number.isInteger(seed)) throw new Error(`--seed must be a whole number, got ${values.seed}`);
  const size = DEFAULT_SWEEP_IMAGE_BYTES;
  const stallTimeoutMs = DEFAULT_SWEEP_STALL_TIMEOUT_MS;
  const cases = fc.sample(sweepCase(size), { numRuns: count, seed });

  const sim = await startSimServer();
  try {
    const fleet = await sim.publish({ version: FLEET_VERSION, size });
    const fleetRelease: SweepRelease = { version: fleet.version, size: fleet.size, md5: fleet.md5, crashOnBoot: false };
    const perKind = Object.fromEntries(SWEEP_FAULT_KINDS.map((kind) => [kind, 0])) as Record<SweepFaultKind, number>;
    const failures: Array<{ case: string; violations: string[] }> = [];
    const caseWallMs: number[] = [];
    const figures: SweepCaseFigure[] = [];
    let simulatedMs = 0;
    let crashReleases = 0;
    log(`${count} cases, seed ${seed}, ${size}-byte image, stall timeout ${stallTimeoutMs} ms`);
    const started = performance.now();
    for (const [i, c] of cases.entries()) {
      const caseStart = performance.now();
      const device = await sim.addDevice(`sweep-${i + 1}`);
      let release = fleetRelease;
      if (c.fault.kind === "crash-on-boot") {
        const entry = await sim.publish({ version: `1.6.${crashReleases++}`, size, crashOnBoot: true, canary: device.id });
        release = { version: entry.version, size: entry.size, md5: entry.md5, crashOnBoot: true };
      }
      const result = await runSweepCase(c, { serverUrl: sim.url, token: device.token, deviceId: device.id, apiKey: sim.apiKey, release, stallTimeoutMs });
      caseWallMs.push(performance.now() - caseStart);
      figures.push({ result, wallMs: caseWallMs.at(-1)! });
      simulatedMs += result.observed.simulatedMs;
      perKind[c.fault.kind] += 1;
      if (result.violations.length > 0) {
        failures.push({ case: describeCase(c), violations: result.violations });
        log(`case ${i + 1} (${describeCase(c)}): ${result.violations.join("; ")}`);
      }
      if ((i + 1) % 50 === 0) log(`${i + 1} cases, ${((performance.now() - started) / 1000).toFixed(1)} s`);
    }
    const seconds = (performance.now() - started) / 1000;
    const report = {
      figure: "sim_fault_sweep",
      cases: count,
      seed,
      image_bytes: size,
      stall_timeout_ms: stallTimeoutMs,
      machine: { cpus: os.cpus().length, node: process.version },
      wall_s: round(seconds, 2),
      cases_per_s: round(count / seconds, 1),
      case_ms: { median: round(median(caseWallMs), 1), p90: round(percentile(caseWallMs, 90), 1), max: round(Math.max(...caseWallMs), 1) },
      simulated_s: round(simulatedMs / 1000, 1),
      per_kind: perKind,
      violations: failures.reduce((n, f) => n + f.violations.length, 0),
      failing_cases: failures,
      target_s: count === TARGET_CASES ? TARGET_SECONDS : null,
      pass: failures.length === 0 && (count !== TARGET_CASES || seconds < TARGET_SECONDS),
      command: commandLine("bench-sim-sweep.ts"),
    };
    if (values.html) {
      const setup = `${count} cases, seed ${seed}, ${size / 1024} KiB image, ${stallTimeoutMs} ms stall timeout, in-process server`;
      fs.mkdirSync(path.dirname(path.resolve(values.html)), { recursive: true });
      fs.writeFileSync(values.html, sweepReportHtml({ cases: figures, setup, wallS: seconds, generatedAt: new Date() }));
    }
    if (values.json) process.stdout.write(`${JSON.stringify(report)}\n`);
    else {
      const kinds = Object.entries(perKind).map(([kind, n]) => `${kind} ${n}`).join(", ");
      console.log(`fault sweep: ${count} cases (seed ${seed}) in ${report.wall_s} s, ${report.cases_per_s} cases/s; ${report.violations} invariant violations`);
      console.log(`  per kind: ${kinds}`);
      console.log(`  per case: median ${report.case_ms.median} ms, p90 ${report.case_ms.p90} ms, max ${report.case_ms.max} ms; ${report.simulated_s} s of badge time`);
      console.log(
        `| fault sweep: ${count} generated cases (seed ${seed}; ${kinds}), ${size / 1024} KiB image, ${stallTimeoutMs} ms stall timeout, ` +
          `one after another, a fresh device each, in-process server | **${report.wall_s} s** (${report.cases_per_s} cases/s, median case ${report.case_ms.median} ms), ` +
          `${report.violations} invariant violations | under ${TARGET_SECONDS} s for ${TARGET_CASES} cases, 0 violations | \`${report.command}\` |`,
      );
    }
    if (failures.length > 0) process.exitCode = 1;
  } finally {
    await sim.close();
  }
}

await main();
