// Benchmarks the server on PostgreSQL beside SQLite, the same load in one run (issue 14, Speed):
//   1. three set-ups, all prepared and started first: 1 instance on SQLite (`--sync full`), 1
//      instance on PostgreSQL and 2 instances on the same PostgreSQL database; then each load on
//      the three in turn, in this order (benchSetups):
//      - POST /api/badge/ota/check (autocannon, every badge token in turn, each answer an offer),
//      - POST /v1/attendance creates (autocannon, every request a new (session, student) pair),
//      - POST /api/badge/sync with 30 taps per request (every tap a new record), as bench-sync.ts;
//      with two instances the load is split in halves, one per instance, run at the same time,
//      and the rates are added. Beside each rate: the servers' CPU per request (all their
//      threads, from /proc), the CPU cores the servers and PostgreSQL's processes (the backends of
//      the set-up's database and the server's background processes) used, and how
//      busy the whole machine was, which says what limits the second instance; on PostgreSQL how
//      many of the database's connections were busy (sampled every 20 ms), which the pool size is
//      set from. Issue 27's floors, PostgreSQL 1 instance / SQLite in this run: check >= 0.6,
//      create >= 0.5, sync taps >= 0.8, server CPU per check <= 1.5 (printed ok or MISSED).
//   2. keyset pagination over `--records` (1,000,000) records on PostgreSQL, as
//      bench-attendance.ts measures it on SQLite: last page / first page (target <= 1.2), with
//      PostgreSQL's EXPLAIN ANALYZE of the list query for both pages.
// PostgreSQL must answer at `--postgres` (postgres://postgres@127.0.0.1:5432); every run creates
// its own databases (badgebench_bench_<random>_...) and drops them at the end, on failure and
// on Ctrl-C too. The servers are the built bundle (dist/serve.js, `npm run build` first).
// Usage: npx tsx scripts/bench/bench-postgres.ts [--records 1000000] [--connections 20] [--duration 10]
//          [--warmup 2] [--postgres URL] [--json]
import type { ChildProcess } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { BADGE_PATHS } from "../../firmware/index.ts";
import { createApiKey } from "../../server/services/api-keys.ts";
import { openStore } from "../../server/store/database.ts";
import { busyConnections, processesOf, withAdminDatabase } from "../../server/store/postgres-admin.ts";
import { createDatabase, DEFAULT_BENCH_POSTGRES, dropDatabases, dropDatabasesOnExit } from "./bench-databases.ts";
import { benchReads, closeReadsAgent, type PaginationResult, type RollResult } from "./bench-attendance-reads.ts";
import { badgeStatusLines, prepareBadgeBench, type BadgeBench } from "./bench-badge-setup.ts";
import { commandLine, describeMachine, loadAverage, machine, type Machine, load, log, procCpuSeconds, round, spawnBadgebench, stopServer, withTempDir, type AutocannonRequest, type LoadResult, type LoadSettings } from "./bench-common.ts";
import { planRequests, runPhase, type Phase } from "./bench-sync.ts";
import { benchArgs, loadOptions, loadSettingsOf, positiveInt, writeReport } from "./bench-cli.ts";

const TARGET_PAGE_RATIO = 1.2;
/** Issue 27's floors: PostgreSQL with 1 instance against SQLite with 1, same run (rates at least, CPU at most). */
const FLOORS = { check: 0.6, create: 0.5, sync: 0.8, check_cpu: 1.5 } as const;
const { check: CHECK_PATH, sync: SYNC_PATH } = BADGE_PATHS;
// The badge school: SYNC_ROOMS rooms whose cards the syncs tap (one badge each), and CREATE_ROOMS
// whose (session, student) pairs the creates use, so neither runs into the other's records:
// 240,000 pairs (SESSIONS_PER_ROOM sessions a room), 12 s of creates at 20,000/s. With one
// session a room (60,000 pairs) SQLite's creates on a quiet 2-core machine ran out of pairs
// before the end of the phase, and the run was invalid.
const SYNC_ROOMS = 10;
const CREATE_ROOMS = 20;
const STUDENTS_PER_ROOM = 3000;
const SESSIONS_PER_ROOM = 4;
const TAPS_PER_SYNC = 30;
const SYNC_CONCURRENCY = 20;
const SYNC_WARMUP_REQUESTS = 30;

interface Setup {
  label: string;
  database: "sqlite" | "postgres";
  instances: number;
}

const SETUPS: Setup[] = [
  { label: "SQLite, 1 instance", database: "sqlite", instances: 1 },
  { label: "PostgreSQL, 1 instance", database: "postgres", instances: 1 },
  { label: "PostgreSQL, 2 instances", database: "postgres", instances: 2 },
];

// ---------------------------------------------------------------------------------------------
// Machine-wide CPU: how busy the two cores were, and how much of it was PostgreSQL.

/** Busy and total jiffies of all CPUs, from the first line of /proc/stat. */
function machineJiffies(): { busy: number; total: number } {
  const fields = fs.readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
  const total = fields.reduce((a, b) => a + b, 0);
  const idle = fields[3]! + fields[4]!; // idle + iowait
  return { busy: total - idle, total };
}

/** CPU seconds used so far by each of the PostgreSQL processes `pids` (those gone meanwhile count 0). */
function cpuSecondsOf(pids: readonly number[]): Map<number, number> {
  return new Map(pids.map((pid) => [pid, procCpuSeconds(pid) ?? 0]));
}

/** How many of the database's connections were busy (in a statement or a transaction), sampled every 20 ms: what the pool size is set from. */
interface ConnectionsBusy {
  max: number;
  mean: number;
}

const SAMPLE_EVERY_MS = 20;

/**
 * `work` with the busy connections of the database at `url` sampled meanwhile (none on SQLite);
 * `work` is given what lists the PostgreSQL processes working for that database.
 */
async function samplingConnections<T>(url: string | undefined, work: (postgresProcesses?: () => Promise<number[]>) => Promise<T>): Promise<{ result: T; busy: ConnectionsBusy | null }> {
  if (url === undefined) return { result: await work(), busy: null };
  const name = new URL(url).pathname.slice(1);
  return withAdminDatabase(url, async (admin) => {
    const samples: number[] = [];
    let done = false;
    const sampling = (async () => {
      while (!done) {
        samples.push(await busyConnections(admin, name));
        await new Promise((resolve) => setTimeout(resolve, SAMPLE_EVERY_MS));
      }
    })();
    try {
      return { result: await work(() => processesOf(admin, name)), busy: samples.length === 0 ? null : { max: Math.max(...samples), mean: round(samples.reduce((a, b) => a + b, 0) / samples.length, 1) } };
    } finally {
      done = true;
      await sampling;
    }
  });
}

interface CpuUse {
  /** CPU cores the badgebench servers used, on average over the phase */
  servers_cores: number;
  /** CPU cores PostgreSQL's processes working for the set-up's database used (its connections' backends, the server's background processes; 0 on SQLite) */
  postgres_cores: number;
  /** the share of all the machine's CPU time that was busy (everything: load client, other jobs) */
  machine_busy: number;
}

async function measuringCpu<T>(servers: ChildProcess[], work: () => Promise<T>, postgresProcesses?: () => Promise<number[]>): Promise<{ result: T; cpu: CpuUse }> {
  const serverCpu = () => servers.reduce((sum, s) => sum + (procCpuSeconds(s.pid!) ?? 0), 0);
  const postgresBefore = cpuSecondsOf((await postgresProcesses?.()) ?? []);
  const started = performance.now();
  const before = { servers: serverCpu(), machine: machineJiffies() };
  const result = await work();
  const seconds = (performance.now() - started) / 1000;
  const machine = machineJiffies();
  // A backend opened during the phase had used nothing before it.
  let postgres = 0;
  for (const [pid, cpu] of cpuSecondsOf((await postgresProcesses?.()) ?? [])) postgres += cpu - (postgresBefore.get(pid) ?? 0);
  return {
    result,
    cpu: {
      servers_cores: round((serverCpu() - before.servers) / seconds),
      postgres_cores: round(postgres / seconds),
      machine_busy: round((machine.busy - before.machine.busy) / (machine.total - before.machine.total)),
    },
  };
}

// ---------------------------------------------------------------------------------------------
// One set-up: its servers, and the three loads split over them.

interface Server {
  child: ChildProcess;
  url: string;
}

interface RateResult {
  /** per second, added over the instances */
  rate: number;
  p50_ms: number;
  p99_ms: number;
  failures: number;
  /** the servers' CPU time per request, microseconds (all instances together) */
  server_cpu_us: number | null;
  cpu: CpuUse;
  /** the database's busy connections, all instances together (PostgreSQL only) */
  connections_busy: ConnectionsBusy | null;
}

/** autocannon on every server at once, each with its share of the connections; rates added. */
async function loadSpread(servers: Server[], settings: LoadSettings, requestFor: (k: number) => AutocannonRequest, databaseUrl: string | undefined): Promise<RateResult> {
  const share = { ...settings, connections: Math.max(1, Math.round(settings.connections / servers.length)) };
  const {
    result: { result: runs, cpu },
    busy,
  } = await samplingConnections(databaseUrl, (postgresProcesses) =>
    measuringCpu(
      servers.map((s) => s.child),
      () => Promise.all(servers.map((s, k) => load(s.url, share, [requestFor(k)], s.child.pid))),
      postgresProcesses,
    ),
  );
  const total = runs.reduce((n, r) => n + r.total, 0);
  const cpuUs = runs.every((r) => r.server_cpu_us !== undefined) ? runs.reduce((sum, r) => sum + r.server_cpu_us! * r.total, 0) / total : null;
  return {
    rate: round(runs.reduce((sum, r: LoadResult) => sum + r.rps, 0), 1),
    p50_ms: Math.max(...runs.map((r) => r.p50_ms)),
    p99_ms: Math.max(...runs.map((r) => r.p99_ms)),
    failures: runs.reduce((n, r) => n + r.non2xx + r.errors + r.timeouts, 0),
    server_cpu_us: cpuUs === null ? null : round(cpuUs, 1),
    cpu,
    connections_busy: busy,
  };
}

/**
 * Checks from server k's share of the badges (every n-th one): a badge sends one request at a
 * time, to one instance, so two instances never write the same badge's devices row at once.
 */
function checkRequest(bench: BadgeBench, k: number, n: number): AutocannonRequest {
  const devices = bench.devices.filter((_, i) => i % n === k);
  let next = 0;
  return {
    method: "POST",
    path: CHECK_PATH,
    headers: { "content-type": "text/plain" },
    body: badgeStatusLines(),
    setupRequest: (req) => ({ ...req, headers: { ...req.headers, authorization: `Bearer ${devices[next++ % devices.length]!.token}` } }),
  };
}

/** Creates over the create rooms' (session, student) pairs, each pair once; `exhausted` says the pool ran out. */
function createRequest(bench: BadgeBench, token: string, label: string) {
  const rooms = bench.rooms.slice(SYNC_ROOMS);
  const pool = rooms.length * SESSIONS_PER_ROOM * STUDENTS_PER_ROOM;
  const state = { next: 0, exhausted: false };
  const request: AutocannonRequest = {
    method: "POST",
    path: "/v1/attendance",
    headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
    setupRequest: (req) => {
      const i = state.next++;
      if (i >= pool) state.exhausted = true;
      const room = rooms[i % rooms.length]!;
      const inRoom = Math.floor(i / rooms.length);
      const student = Math.floor(inRoom / SESSIONS_PER_ROOM) % STUDENTS_PER_ROOM;
      return {
        ...req,
        headers: { ...req.headers, "idempotency-key": `bench-${label}-${i}` },
        body: JSON.stringify({ session_id: room.sessionIds[inRoom % SESSIONS_PER_ROOM], external_id: room.externalIds[student], status: "present" }),
      };
    },
  };
  return { request, state, pool };
}

/** The sync rooms' cards, 30 taps a request; with several servers, request k goes to server k mod n. */
async function syncSpread(servers: Server[], bench: BadgeBench, databaseUrl: string | undefined): Promise<RateResult> {
  const requests = planRequests(bench.rooms.slice(0, SYNC_ROOMS), bench.devices, TAPS_PER_SYNC);
  const perServer = Math.max(1, Math.round(SYNC_CONCURRENCY / servers.length));
  const agents = servers.map(() => new http.Agent({ keepAlive: true, maxSockets: perServer }));
  const split = (list: typeof requests) => servers.map((_, k) => list.filter((__, i) => i % servers.length === k));
  try {
    const phases = (list: typeof requests) =>
      Promise.all(split(list).map((part, k) => runPhase(agents[k]!, new URL(SYNC_PATH, servers[k]!.url), part, perServer)));
    const warm = await phases(requests.slice(0, SYNC_WARMUP_REQUESTS));
    const {
      result: { result: runs, cpu },
      busy,
    } = await samplingConnections(databaseUrl, (postgresProcesses) =>
      measuringCpu(
        servers.map((s) => s.child),
        () => phases(requests.slice(SYNC_WARMUP_REQUESTS)),
        postgresProcesses,
      ),
    );
    const problems = [...warm, ...runs].reduce((n, p: Phase) => n + Object.values(p.problems).reduce((a, b) => a + b, 0), 0);
    const taps = runs.reduce((n, p) => n + p.taps, 0);
    const accepted = runs.reduce((n, p) => n + p.accepted, 0);
    const seconds = Math.max(...runs.map((p) => p.seconds));
    const latencies = runs.flatMap((p) => p.latencies).sort((a, b) => a - b);
    const count = runs.reduce((n, p) => n + p.requests, 0);
    return {
      rate: round(accepted / seconds, 0),
      p50_ms: round(latencies[Math.floor(latencies.length / 2)]!, 1),
      p99_ms: round(latencies[Math.ceil(latencies.length * 0.99) - 1]!, 1),
      failures: problems + (taps - accepted),
      // per sync request (30 taps), as bench-sync.ts reports it
      server_cpu_us: round((cpu.servers_cores * seconds * 1_000_000) / count, 1),
      cpu,
      connections_busy: busy,
    };
  } finally {
    for (const agent of agents) agent.destroy();
  }
}

interface SetupResult extends Setup {
  check: RateResult;
  create: RateResult & { pool: number };
  sync: RateResult;
  setup_seconds: number;
}

/** A set-up ready to be loaded: its school, its servers running, the API key of the creates. */
interface Running {
  setup: Setup;
  url: string | undefined;
  bench: BadgeBench;
  key: string;
  servers: Server[];
  setupSeconds: number;
}

async function startSetup(setup: Setup, dir: string, url: string | undefined): Promise<Running> {
  const started = performance.now();
  log(`${setup.label}: preparing ${SYNC_ROOMS + CREATE_ROOMS} rooms x ${STUDENTS_PER_ROOM} students, ${SYNC_ROOMS + CREATE_ROOMS} badges, a release`);
  const dataDir = path.join(dir, "data");
  const bench = await prepareBadgeBench(dataDir, path.join(dir, "scratch"), {
    rooms: SYNC_ROOMS + CREATE_ROOMS,
    studentsPerRoom: STUDENTS_PER_ROOM,
    sessionsPerRoom: SESSIONS_PER_ROOM,
    devicesPerRoom: 1,
    databaseUrl: url,
  });
  const store = await openStore({ dataDir, sync: "normal", databaseUrl: url });
  const key = await createApiKey(store.db, { mode: "test", scopes: ["attendance:write"], name: "bench creates" });
  await store.close();
  const setupSeconds = (performance.now() - started) / 1000;
  const servers: Server[] = [];
  try {
    for (let i = 0; i < setup.instances; i++) servers.push(await spawnBadgebench(dataDir, "full", { databaseUrl: url }));
  } catch (error) {
    for (const server of servers) await stopServer(server.child);
    throw error;
  }
  return { setup, url, bench, key: key.secret, servers, setupSeconds };
}

/**
 * Each load on every set-up in turn (checks on the three, then creates on the three, then syncs):
 * the set-ups a ratio compares are measured within a minute of each other, not minutes apart, so
 * the other work of a shared machine moves them alike. Run set-up after set-up, a load average
 * going from 8 to 15 during the run made SQLite's phases and PostgreSQL's incomparable.
 */
async function benchSetups(running: Running[], settings: LoadSettings): Promise<SetupResult[]> {
  const checks: RateResult[] = [];
  for (const { setup, bench, servers, url } of running) {
    log(`${setup.label}: ${CHECK_PATH}`);
    checks.push(await loadSpread(servers, settings, (k) => checkRequest(bench, k, servers.length), url));
    log(`  ${checks.at(-1)!.rate} req/s`);
  }
  const creates: (RateResult & { pool: number })[] = [];
  for (const { setup, bench, servers, url, key } of running) {
    log(`${setup.label}: POST /v1/attendance`);
    const requests = createRequest(bench, key, setup.label.replace(/\W+/g, "-"));
    const create = await loadSpread(servers, settings, () => requests.request, url);
    if (requests.state.exhausted) create.failures++; // a pair used twice answers 409: not a create
    creates.push({ ...create, pool: requests.pool });
    log(`  ${create.rate} creates/s`);
  }
  const syncs: RateResult[] = [];
  for (const { setup, bench, servers, url } of running) {
    log(`${setup.label}: ${SYNC_PATH}`);
    syncs.push(await syncSpread(servers, bench, url));
    log(`  ${syncs.at(-1)!.rate} taps/s`);
  }
  return running.map(({ setup, setupSeconds }, i) => ({ ...setup, check: checks[i]!, create: creates[i]!, sync: syncs[i]!, setup_seconds: round(setupSeconds, 1) }));
}

// ---------------------------------------------------------------------------------------------
// Report

interface Report {
  figure: "postgres";
  machine: Machine;
  connections: number;
  duration_s: number;
  warmup_s: number;
  setups: SetupResult[];
  /** 2 instances / 1 instance on PostgreSQL */
  growth: { check: number; create: number; sync: number };
  /** PostgreSQL 1 instance / SQLite 1 instance (server CPU per check: PostgreSQL / SQLite), against issue 27's floors */
  floors: Record<keyof typeof FLOORS, { ratio: number; floor: number; pass: boolean }>;
  pagination: PaginationResult & { records: number; seed_seconds: number; target_ratio: number; pass: boolean };
  roll: RollResult;
  valid: boolean;
  total_seconds: number;
  command: string;
}

function table(r: Report): string[] {
  const lines: string[] = [];
  lines.push(`badgebench PostgreSQL benchmark: ${describeMachine(r.machine)}`);
  lines.push(`autocannon ${r.connections} connections (split over the instances), ${r.duration_s} s after ${r.warmup_s} s warm-up; sync ${TAPS_PER_SYNC} taps a request, ${SYNC_CONCURRENCY} in flight`);
  lines.push("");
  const cell = (x: RateResult, unit: string) =>
    `${x.rate.toFixed(0).padStart(6)} ${unit.padEnd(7)} p50 ${String(x.p50_ms).padStart(5)} ms  server CPU ${String(x.server_cpu_us).padStart(6)} us/req  cores: servers ${x.cpu.servers_cores.toFixed(2)}, postgres ${x.cpu.postgres_cores.toFixed(2)}, machine busy ${(x.cpu.machine_busy * 100).toFixed(0)}%${x.connections_busy ? `  connections busy: max ${x.connections_busy.max}, mean ${x.connections_busy.mean}` : ""}${x.failures ? `  INVALID (${x.failures} failed)` : ""}`;
  for (const s of r.setups) {
    lines.push(`${s.label} (setup ${s.setup_seconds} s)`);
    lines.push(`  check  ${cell(s.check, "req/s")}`);
    lines.push(`  create ${cell(s.create, "/s")}`);
    lines.push(`  sync   ${cell(s.sync, "taps/s")}`);
  }
  lines.push(`PostgreSQL, 2 instances / 1 instance: check ${r.growth.check}, create ${r.growth.create}, sync ${r.growth.sync}`);
  const floor = (name: keyof typeof FLOORS, what: string) => {
    const f = r.floors[name];
    return `${what} ${f.ratio} (${name === "check_cpu" ? "at most" : "at least"} ${f.floor}) ${f.pass ? "ok" : "MISSED"}`;
  };
  lines.push(`PostgreSQL 1 instance / SQLite: ${floor("check", "check")}, ${floor("create", "create")}, ${floor("sync", "sync taps")}; ${floor("check_cpu", "server CPU per check")}`);
  lines.push("");
  const p = r.pagination;
  lines.push(`keyset pagination on PostgreSQL, ${p.records} records (seeded in ${p.seed_seconds} s): GET /v1/attendance?${p.filter}`);
  lines.push(`  ${p.rows_matched} rows, ${p.pages} pages walked in ${p.walk_seconds} s; median of ${p.repeats}: first page ${p.first_page_ms} ms, last page ${p.last_page_ms} ms`);
  lines.push(`  last/first ${p.ratio} (target <= ${p.target_ratio}) ${p.pass ? "ok" : "MISSED"}`);
  lines.push(`  plan, first page: ${p.query_plan.first_page.join(" | ")}`);
  lines.push(`  plan, last page:  ${p.query_plan.last_page.join(" | ")}`);
  lines.push(`  roll of a ${r.roll.students}-student session: median ${r.roll.median_ms} ms, p99 ${r.roll.p99_ms} ms`);
  lines.push("", `total ${r.total_seconds} s`);
  return lines;
}

async function main(): Promise<void> {
  const values = benchArgs({
    records: { type: "string", default: "1000000" },
    ...loadOptions({ connections: 20, duration: 10, warmup: 2 }),
    postgres: { type: "string", default: DEFAULT_BENCH_POSTGRES },
  });
  const records = positiveInt("records", values.records);
  const settings = loadSettingsOf(values);
  const postgres = values.postgres;
  const prefix = `badgebench_bench_${crypto.randomBytes(4).toString("hex")}`;
  dropDatabasesOnExit(postgres);

  const started = performance.now();
  const loadBefore = loadAverage();
  try {
    const report = await withTempDir("badgebench-bench-pg-", async (tmp) => {
      const running: Running[] = [];
      let setups: SetupResult[];
      try {
        for (const [i, setup] of SETUPS.entries()) {
          const url = setup.database === "postgres" ? await createDatabase(postgres, `${prefix}_${i}`) : undefined;
          running.push(await startSetup(setup, path.join(tmp, `setup-${i}`), url));
        }
        setups = await benchSetups(running, settings);
      } finally {
        for (const { servers } of running) for (const server of servers) await stopServer(server.child);
      }
      log(`pagination: ${records} records on PostgreSQL`);
      const reads = await benchReads(path.join(tmp, "reads"), records, await createDatabase(postgres, `${prefix}_pages`));
      const [sqlite, one, two] = setups as [SetupResult, SetupResult, SetupResult];
      const atLeast = (ratio: number, floor: number) => ({ ratio: round(ratio), floor, pass: ratio >= floor });
      const cpuRatio = one.check.server_cpu_us !== null && sqlite.check.server_cpu_us ? one.check.server_cpu_us / sqlite.check.server_cpu_us : Number.NaN;
      const result: Report = {
        figure: "postgres",
        machine: machine(loadBefore),
        connections: settings.connections,
        duration_s: settings.durationS,
        warmup_s: settings.warmupS,
        setups,
        growth: {
          check: round(two.check.rate / one.check.rate),
          create: round(two.create.rate / one.create.rate),
          sync: round(two.sync.rate / one.sync.rate),
        },
        floors: {
          check: atLeast(one.check.rate / sqlite.check.rate, FLOORS.check),
          create: atLeast(one.create.rate / sqlite.create.rate, FLOORS.create),
          sync: atLeast(one.sync.rate / sqlite.sync.rate, FLOORS.sync),
          check_cpu: { ratio: round(cpuRatio), floor: FLOORS.check_cpu, pass: cpuRatio <= FLOORS.check_cpu },
        },
        pagination: {
          ...reads.pagination,
          records: reads.written,
          seed_seconds: round(reads.seedSeconds, 1),
          target_ratio: TARGET_PAGE_RATIO,
          pass: reads.pagination.ratio <= TARGET_PAGE_RATIO,
        },
        roll: reads.roll,
        valid: setups.every((s) => s.check.failures + s.create.failures + s.sync.failures === 0),
        total_seconds: round((performance.now() - started) / 1000, 1),
        command: commandLine("bench-postgres.ts"),
      };
      return result;
    });
    writeReport(report, values.json, table);
  } finally {
    closeReadsAgent();
    await dropDatabases(postgres);
  }
}

await main();
