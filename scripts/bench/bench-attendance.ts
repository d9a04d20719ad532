// Benchmarks the attendance API and prints three figures:
//   1. keyset pagination: latency of the first and the last page of a filtered list with
//      N records stored (target: last/first <= 1.5, i.e. a deep page costs what a shallow one does);
//   2. the roll of a 300-student session (target: median < 5 ms);
//   3. record creation throughput as a ratio to a bare Express hello-world measured in the same
//      run (target >= 0.3), with `--sync full` and, on a second line, `--sync normal`; beside
//      each rate, the server's CPU time per request (all its threads, from /proc).
// Everything runs on 127.0.0.1 in a fresh temporary data directory that is deleted at the end.
// Usage: npx tsx scripts/bench/bench-attendance.ts [--records N] [--cpu-prof DIR] [--json]
// (`--cpu-prof DIR`: the create servers write their CPU profiles there when they stop.)
import path from "node:path";
import { performance } from "node:perf_hooks";
import type { SyncMode } from "../../server/store/database.ts";
import { benchReads, CLASS_SIZE, closeReadsAgent, prepareDataDir, type PaginationResult, type RollResult } from "./bench-attendance-reads.ts";
import { benchArgs, CPU_PROF_OPTION, cpuProfDirOf, positiveInt, writeReport } from "./bench-cli.ts";
import { benchHello, commandLine, load, log, round, spawnBadgebench, stopServer, withTempDir, type AutocannonRequest, type LoadResult, type LoadSettings, cpusAndNode, type CpusAndNode } from "./bench-common.ts";

const TARGETS = { lastFirstRatio: 1.5, rollMedianMs: 5, createRatio: 0.3 };

const LOAD: LoadSettings = { connections: 10, durationS: 10, warmupS: 2 };

// The pool of distinct (session, student) pairs the creates walk through: enough for far more
// creates than a 2-core machine can do in warm-up plus run, so no request ever hits a 409.
const CREATE_COURSES = 4;
const CREATE_SESSIONS_PER_COURSE = 150; // 4 x 150 x 300 = 180,000 pairs

async function benchCreates(dataDir: string, sync: SyncMode, cpuProfDir: string | undefined): Promise<LoadResult & { pool: number }> {
  const prepared = await prepareDataDir(dataDir, { courses: CREATE_COURSES, sessionsPerCourse: CREATE_SESSIONS_PER_COURSE }, "attendance:write");
  await prepared.store.close(); // the server process gets the database to itself
  const pool = prepared.sessions.length * CLASS_SIZE;
  let next = 0;
  let exhausted = false;
  const nextPair = () => {
    const i = next++;
    if (i >= pool) exhausted = true;
    const session = prepared.sessions[Math.floor(i / CLASS_SIZE) % prepared.sessions.length]!;
    const student = prepared.classes.get(session.course_code)![i % CLASS_SIZE]!;
    return { i, session, student };
  };
  const create: AutocannonRequest = {
    method: "POST",
    path: "/v1/attendance",
    headers: { "content-type": "application/json", authorization: `Bearer ${prepared.token}` },
    // Called for every request: a new pair and a new Idempotency-Key each time, so each one is a real create.
    setupRequest: (req) => {
      const { i, session, student } = nextPair();
      return {
        ...req,
        headers: { ...req.headers, "idempotency-key": `bench-${sync}-${i}` },
        body: JSON.stringify({ session_id: session.id, external_id: student.external_id, status: "present" }),
      };
    },
  };
  const { child, url } = await spawnBadgebench(dataDir, sync, { cpuProfDir });
  try {
    const result = await load(url, LOAD, [create], child.pid);
    if (exhausted) throw new Error(`the pool of ${pool} (session, student) pairs ran out; raise CREATE_SESSIONS_PER_COURSE`);
    return { ...result, pool };
  } finally {
    await stopServer(child);
  }
}

// ---------------------------------------------------------------------------------------------
// Report

interface Report {
  records: number;
  machine: CpusAndNode;
  seed_seconds: number;
  pagination: PaginationResult & { target_ratio: number; pass: boolean };
  roll: RollResult & { target_median_ms: number; pass: boolean };
  create: {
    connections: number;
    duration_s: number;
    warmup_s: number;
    hello: LoadResult;
    runs: (LoadResult & { sync: SyncMode; pool: number; ratio: number; valid: boolean; pass: boolean })[];
    target_ratio: number;
  };
  total_seconds: number;
  command: string;
}

function table(r: Report): string[] {
  const lines: string[] = [];
  const mark = (pass: boolean) => (pass ? "ok" : "MISSED");
  lines.push(`badgebench attendance benchmark: ${r.records} records, ${r.machine.cpus} CPUs, node ${r.machine.node}`);
  lines.push(`(seeding ${r.seed_seconds.toFixed(1)} s, total ${r.total_seconds.toFixed(1)} s)`);
  lines.push("");
  const p = r.pagination;
  lines.push(`1. keyset pagination  GET /v1/attendance?${p.filter}`);
  lines.push(`   rows matched ${p.rows_matched}, pages walked ${p.pages} (${p.walk_seconds} s), median of ${p.repeats}`);
  lines.push(`   first page ${p.first_page_ms} ms | last page ${p.last_page_ms} ms | last/first ${p.ratio} (target <= ${p.target_ratio}) ${mark(p.pass)}`);
  lines.push(`   plan, first page: ${p.query_plan.first_page.join(" ; ")}`);
  lines.push(`   plan, last page:  ${p.query_plan.last_page.join(" ; ")}`);
  lines.push("");
  const roll = r.roll;
  lines.push(`2. roll               GET /v1/sessions/{id}/roll (${roll.students} students, ${roll.with_records} with records), ${roll.requests} requests`);
  lines.push(`   median ${roll.median_ms} ms (target < ${roll.target_median_ms}) ${mark(roll.pass)} | p99 ${roll.p99_ms} ms`);
  lines.push("");
  const c = r.create;
  lines.push(`3. create throughput  ${c.connections} connections, ${c.duration_s} s after ${c.warmup_s} s warm-up`);
  lines.push(`   hello-world express      ${c.hello.rps.toFixed(1).padStart(9)} req/s  p50 ${c.hello.p50_ms} ms  server CPU ${c.hello.server_cpu_us} us/req`);
  for (const run of c.runs) {
    const validity = run.valid ? "" : `  INVALID (${run.non2xx} non-2xx, ${run.errors} errors)`;
    lines.push(
      `   POST /v1/attendance ${`sync=${run.sync}`.padEnd(12)}${run.rps.toFixed(1).padStart(9)} req/s  p50 ${run.p50_ms} ms  ratio ${run.ratio} (target >= ${c.target_ratio}) ${mark(run.pass)}  non-2xx ${run.non2xx}  server CPU ${run.server_cpu_us} us/req${validity}`,
    );
  }
  return lines;
}

async function main(): Promise<void> {
  const values = benchArgs({ records: { type: "string", default: "1000000" }, ...CPU_PROF_OPTION });
  const cpuProfDir = cpuProfDirOf(values);
  const records = positiveInt("records", values.records);

  const started = performance.now();
  const report = await withTempDir("badgebench-bench-", async (tmp) => {
    const reads = await benchReads(path.join(tmp, "reads"), records);
    log("measuring hello-world express");
    const hello = await benchHello(LOAD);
    const runs = [];
    for (const sync of ["full", "normal"] as const) {
      log(`measuring creates with --sync ${sync}`);
      const run = await benchCreates(path.join(tmp, `creates-${sync}`), sync, cpuProfDir);
      const valid = run.non2xx === 0 && run.errors === 0;
      const ratio = round(run.rps / hello.rps, 3);
      runs.push({ sync, ...run, ratio, valid, pass: valid && ratio >= TARGETS.createRatio });
    }
    const result: Report = {
      records: reads.written,
      machine: cpusAndNode(),
      seed_seconds: round(reads.seedSeconds, 1),
      pagination: { ...reads.pagination, target_ratio: TARGETS.lastFirstRatio, pass: reads.pagination.ratio <= TARGETS.lastFirstRatio },
      roll: { ...reads.roll, target_median_ms: TARGETS.rollMedianMs, pass: reads.roll.median_ms < TARGETS.rollMedianMs },
      create: { connections: LOAD.connections, duration_s: LOAD.durationS, warmup_s: LOAD.warmupS, hello, runs, target_ratio: TARGETS.createRatio },
      total_seconds: round((performance.now() - started) / 1000, 1),
      command: commandLine("bench-attendance.ts"),
    };
    return result;
  }).finally(closeReadsAgent);
  writeReport(report, values.json, table, cpuProfDir);
}

await main();
