// Benchmarks the attendance API and prints three figures:
//   1. keyset pagination: latency of the first and the last page of a filtered list with
//      N records stored (target: last/first <= 1.5, i.e. a deep page costs what a shallow one does);
//   2. the roll of a 300-student session (target: median < 5 ms);
//   3. record creation throughput as a ratio to a bare Express hello-world measured in the same
//      run (target >= 0.3), with `--sync full` and, on a second line, `--sync normal`; beside
//      each rate, the server's CPU time per request (all its threads, from /proc).
// Everything runs on 127.0.0.1 in a fresh temporary data directory that is deleted at the end.
// Usage: npx tsx scripts/bench-attendance.ts [--records N] [--cpu-prof DIR] [--json]
// (`--cpu-prof DIR`: the create servers write their CPU profiles there when they stop.)
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import SQLite from "better-sqlite3";
import { Kysely, PostgresDialect, sql, SqliteDialect, type CompiledQuery } from "kysely";
import pg from "pg";
import { pino } from "pino";
import { newId } from "../server/ids.ts";
import { startServer } from "../server/main.ts";
import { createApiKey } from "../server/services/api-keys.ts";
import { importSchool, type SchoolFile } from "../server/services/school-import.ts";
import * as attendanceStore from "../server/store/attendance-store.ts";
import { openStore, sqliteFileOf, type Store, type SyncMode } from "../server/store/database.ts";
import type { Database, RecordsTable } from "../server/store/schema.ts";
import {
  benchHello,
  load,
  log,
  percentile,
  round,
  spawnBadgebench,
  stopServer,
  withTempDir,
  type AutocannonRequest,
  type LoadResult,
  type LoadSettings,
} from "./bench-common.ts";

const TARGETS = { lastFirstRatio: 1.5, rollMedianMs: 5, createRatio: 0.3 };

// Every course in the benchmark schools has exactly this many students: the roll figure is
// specified for a 300-student session, and pagination rows come in blocks of one class.
const CLASS_SIZE = 300;
const PAGE_LIMIT = 200;
const PAGE_REPEATS = 20;
const ROLL_REQUESTS = 200;
const LOAD: LoadSettings = { connections: 10, durationS: 10, warmupS: 2 };

// ---------------------------------------------------------------------------------------------
// Small helpers

const DAY_MS = 86_400_000;
const addDays = (date: string, days: number) => new Date(Date.parse(`${date}T00:00:00Z`) + days * DAY_MS).toISOString().slice(0, 10);

// ---------------------------------------------------------------------------------------------
// The benchmark school: `courses` courses of exactly CLASS_SIZE students, each meeting
// `periodsPerDay` times a day, every day from FIRST_DAY, until it has `sessionsPerCourse`
// sessions. Course k enrolls students [k*150, k*150 + 300), so classes overlap the way real
// ones do and no course is a copy of another.

const FIRST_DAY = "2025-01-06";
const PERIODS_PER_DAY = 6;
const PERIOD_MINUTES = 90;
const SESSION_MINUTES = 60;

interface SchoolPlan {
  courses: number;
  sessionsPerCourse: number;
}

const courseCode = (k: number) => `BENCH-${k}`;
const externalId = (i: number) => `B${String(100000 + i)}`;

function buildSchool(plan: SchoolPlan): SchoolFile {
  const stride = CLASS_SIZE / 2;
  const studentCount = (plan.courses + 1) * stride;
  const students = Array.from({ length: studentCount }, (_, i) => ({ external_id: externalId(i), name: `Student ${i}` }));
  const courses = Array.from({ length: plan.courses }, (_, k) => ({ code: courseCode(k), name: `Bench course ${k}` }));
  const rooms = courses.map((_, k) => ({ code: `BR${k}`, name: `Bench room ${k}` }));
  const enrollments = courses.map((c, k) => ({
    course_code: c.code,
    external_ids: students.slice(k * stride, k * stride + CLASS_SIZE).map((s) => s.external_id),
  }));
  const sessions = courses.flatMap((c, k) =>
    Array.from({ length: plan.sessionsPerCourse }, (_, j) => {
      const day = addDays(FIRST_DAY, Math.floor(j / PERIODS_PER_DAY));
      const start = Date.parse(`${day}T08:00:00Z`) + (j % PERIODS_PER_DAY) * PERIOD_MINUTES * 60_000;
      return {
        course_code: c.code,
        room: rooms[k]!.code,
        starts_at: new Date(start).toISOString(),
        ends_at: new Date(start + SESSION_MINUTES * 60_000).toISOString(),
      };
    }),
  );
  return { school: { name: "Badgebench benchmark school" }, rooms, students, courses, enrollments, sessions };
}

interface SessionRef {
  id: string;
  course_code: string;
  starts_at: string;
}

/** The imported sessions in start order, and each course's enrolled students (id and external id). */
async function loadSchool(store: Store) {
  const sessions: SessionRef[] = await store.db
    .selectFrom("sessions")
    .select(["id", "course_code", "starts_at"])
    .where("livemode", "=", 0)
    .orderBy("starts_at")
    .orderBy("course_code")
    .execute();
  const rows = await store.db
    .selectFrom("enrollments")
    .innerJoin("students", "students.id", "enrollments.student_id")
    .select(["enrollments.course_code", "students.id", "students.external_id"])
    .where("enrollments.livemode", "=", 0)
    .orderBy("students.external_id")
    .execute();
  const classes = new Map<string, { id: string; external_id: string }[]>();
  for (const row of rows) {
    const list = classes.get(row.course_code) ?? [];
    list.push({ id: row.id, external_id: row.external_id });
    classes.set(row.course_code, list);
  }
  return { sessions, classes };
}

/** A fresh data directory (or empty PostgreSQL database) holding the school of `plan` and one test-mode key with `scope`. */
async function prepareDataDir(dataDir: string, plan: SchoolPlan, scope: string, databaseUrl?: string) {
  // `normal` sync: this is setup, not the thing being measured.
  const store = await openStore({ dataDir, sync: "normal", databaseUrl });
  await importSchool(store.db, buildSchool(plan), { mode: "test", source: "bench school" });
  const key = await createApiKey(store.db, { mode: "test", scopes: [scope], name: `bench ${scope}` });
  const school = await loadSchool(store);
  return { store, token: key.secret, ...school };
}

// ---------------------------------------------------------------------------------------------
// Seeding N records straight into the table (the API would take hours for a million).

const STATUSES = ["present", "late", "absent", "excused"] as const;
const ROWS_PER_INSERT = 500;
const INSERTS_PER_TRANSACTION = 40;

function statusFor(n: number): string {
  const r = n % 100; // a fixed mix, so every run stores the same shape of data
  return r < 85 ? STATUSES[0] : r < 93 ? STATUSES[1] : r < 98 ? STATUSES[2] : STATUSES[3];
}

/**
 * Yields `total` records, session by session in start order, one per enrolled student, each
 * stamped a few seconds after the previous tap in that session. In `halfSession` only every
 * other student has a record, so the roll benchmark shows both kinds of entry.
 */
function* generateRecords(
  total: number,
  sessions: SessionRef[],
  classes: Map<string, { id: string }[]>,
  halfSession: string,
): Generator<RecordsTable> {
  let n = 0;
  for (const session of sessions) {
    const start = Date.parse(session.starts_at);
    const students = classes.get(session.course_code)!;
    for (let i = 0; i < students.length; i++) {
      if (n >= total) return;
      if (session.id === halfSession && i % 2 === 1) continue;
      // Same offsets in every course's session at the same time: ties on recorded_at across
      // courses are wanted, they exercise the id tie-break of the keyset.
      const at = start + i * 7_000 + ((i * 37) % 1000);
      const iso = new Date(at).toISOString();
      yield {
        id: newId("att", at),
        livemode: 0,
        session_id: session.id,
        student_id: students[i]!.id,
        course_code: session.course_code,
        status: statusFor(n),
        recorded_at: iso,
        method: "api",
        device_id: null,
        reason: null,
        created_at: iso,
        updated_at: iso,
      };
      n++;
    }
  }
  if (n < total) throw new Error(`school too small: only ${n} of ${total} records fit`);
}

async function seedRecords(store: Store, records: Iterable<RecordsTable>): Promise<number> {
  const perTransaction = ROWS_PER_INSERT * INSERTS_PER_TRANSACTION;
  let batch: RecordsTable[] = [];
  let written = 0;
  const flush = async () => {
    // Big transactions: one commit (and one WAL sync) per 20,000 rows instead of per row.
    await store.db.transaction().execute(async (trx) => {
      for (let i = 0; i < batch.length; i += ROWS_PER_INSERT) {
        await trx.insertInto("records").values(batch.slice(i, i + ROWS_PER_INSERT)).execute();
      }
    });
    written += batch.length;
    batch = [];
    if (written % 200_000 === 0) log(`  ${written} records`);
  };
  for (const record of records) {
    batch.push(record);
    if (batch.length === perTransaction) await flush();
  }
  if (batch.length > 0) await flush();
  return written;
}

// ---------------------------------------------------------------------------------------------
// HTTP client for the latency figures: plain node:http over one keep-alive socket, so the time
// measured is the server's plus a loopback round trip, with no connection setup.

const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });

/** Closes the keep-alive connection benchReads's requests use (so the process can end). */
export const closeReadsAgent = () => agent.destroy();

interface Timed<T> {
  status: number;
  ms: number;
  body: T;
}

function getJson<T>(url: string, token: string): Promise<Timed<T>> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const req = http.get(url, { agent, headers: { authorization: `Bearer ${token}` } }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("end", () => {
        const ms = performance.now() - started; // stop the clock before parsing: client-side cost
        try {
          resolve({ status: res.statusCode ?? 0, ms, body: JSON.parse(Buffer.concat(chunks).toString()) as T });
        } catch (error) {
          reject(error);
        }
      });
      res.on("error", reject);
    });
    req.on("error", reject);
  });
}

async function getOk<T>(url: string, token: string): Promise<Timed<T>> {
  const result = await getJson<T>(url, token);
  if (result.status !== 200) throw new Error(`GET ${url} returned ${result.status}: ${JSON.stringify(result.body)}`);
  return result;
}

// ---------------------------------------------------------------------------------------------
// 1. Keyset pagination and 2. roll, against one in-process server over N seeded records.

interface ListPage {
  has_more: boolean;
  next_cursor: string | null;
  data: unknown[];
}

interface RollPage {
  roll: { record_id: string | null }[];
}

export interface PaginationResult {
  filter: string;
  first_page_ms: number;
  last_page_ms: number;
  ratio: number;
  pages: number;
  rows_matched: number;
  page_limit: number;
  repeats: number;
  walk_seconds: number;
  query_plan: { first_page: string[]; last_page: string[] };
}

export interface RollResult {
  session_id: string;
  students: number;
  with_records: number;
  requests: number;
  median_ms: number;
  p99_ms: number;
}

async function walkPages(listUrl: string, token: string) {
  let cursor: string | undefined;
  let lastCursor: string | undefined;
  let pages = 0;
  let rows = 0;
  for (;;) {
    const url = cursor === undefined ? listUrl : `${listUrl}&cursor=${encodeURIComponent(cursor)}`;
    const page = await getOk<ListPage>(url, token);
    pages++;
    rows += page.body.data.length;
    if (pages % 250 === 0) log(`  page ${pages} (${page.ms.toFixed(1)} ms)`);
    if (!page.body.has_more) break;
    lastCursor = cursor = page.body.next_cursor!;
  }
  return { pages, rows, lastCursor };
}

/** Median latency of the first and the last page, requested alternately so both see the same cache state. */
async function timeFirstAndLast(listUrl: string, lastUrl: string, token: string) {
  for (let i = 0; i < 3; i++) {
    await getOk(listUrl, token);
    await getOk(lastUrl, token);
  }
  const first: number[] = [];
  const last: number[] = [];
  for (let i = 0; i < PAGE_REPEATS; i++) {
    first.push((await getOk(listUrl, token)).ms);
    last.push((await getOk(lastUrl, token)).ms);
  }
  return { first: percentile(first, 50), last: percentile(last, 50) };
}

type ListFilter = { course_code: string; since: string; until: string };

/**
 * The plan of the server's own list query (captured through a logging Kysely on a second
 * connection), for the first page and for the last page's keyset position: SQLite's EXPLAIN
 * QUERY PLAN on `dbFile`, or PostgreSQL's EXPLAIN (ANALYZE) on `databaseUrl`.
 */
async function explainListQuery(target: { dbFile: string } | { databaseUrl: string }, filter: ListFilter, lastCursor?: string) {
  let captured: CompiledQuery | undefined;
  // The list reads `records` first, then the page's students; the plan that matters is the first.
  const log = (event: { query: CompiledQuery }) => {
    if (/from "records"/.test(event.query.sql)) captured = event.query;
  };
  let explain: (query: CompiledQuery) => Promise<string[]>;
  let db: Kysely<Database>;
  if ("dbFile" in target) {
    const sqlite = new SQLite(target.dbFile, { readonly: true });
    db = new Kysely<Database>({ dialect: new SqliteDialect({ database: sqlite }), log });
    explain = async (query) =>
      (sqlite.prepare(`EXPLAIN QUERY PLAN ${query.sql}`).all(...(query.parameters as unknown[])) as { detail: string }[]).map((r) => r.detail);
  } else {
    const pool = new pg.Pool({ connectionString: target.databaseUrl, max: 1 });
    db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }), log });
    explain = async (query) =>
      (await pool.query<{ "QUERY PLAN": string }>(`EXPLAIN (ANALYZE, BUFFERS) ${query.sql}`, query.parameters as unknown[])).rows.map((r) => r["QUERY PLAN"]);
  }
  const plan = async (after?: [string, string]) => {
    await attendanceStore.listRecords(db, { livemode: 0, ...filter, after, limit: PAGE_LIMIT + 1 });
    return explain(captured!);
  };
  // The cursor's first part is base64url JSON holding the keyset position; reading it needs no secret.
  const after = lastCursor ? (JSON.parse(Buffer.from(lastCursor.split(".")[0]!, "base64url").toString()) as { after: [string, string] }).after : undefined;
  try {
    return { first_page: await plan(), last_page: await plan(after) };
  } finally {
    await db.destroy();
  }
}

/**
 * Pagination and roll over `records` seeded records, against one in-process server on SQLite
 * in `dataDir` or, with `databaseUrl`, on that (empty) PostgreSQL database.
 */
export async function benchReads(dataDir: string, records: number, databaseUrl?: string) {
  // Enough sessions that every record is a distinct (session, student) pair; the half-filled
  // roll session leaves CLASS_SIZE/2 pairs unused, hence the margin.
  const courses = 3;
  const sessionsPerCourse = Math.ceil((records + CLASS_SIZE) / (courses * CLASS_SIZE));
  const seedStarted = performance.now();
  const { store, token, sessions, classes } = await prepareDataDir(dataDir, { courses, sessionsPerCourse }, "attendance:read", databaseUrl);
  // The roll session: a BENCH-1 session in the middle of the seeded range.
  const rollSession = sessions.filter((s) => s.course_code === courseCode(1))[Math.floor(sessionsPerCourse / 3)]!;
  log(`seeding ${records} records (${courses} courses x ${sessionsPerCourse} sessions x ${CLASS_SIZE} students)`);
  const written = await seedRecords(store, generateRecords(records, sessions, classes, rollSession.id));
  // PostgreSQL plans from table statistics, which autovacuum gathers within a minute or so of a
  // bulk load; without them it guesses a handful of rows in the range and sorts all 333,000
  // matches for the first page (a bitmap scan, 320 ms instead of 3). Measure with them, as a
  // server running for a minute has them.
  if (store.kind !== "sqlite") await sql`analyze records`.execute(store.db);
  const lastSeeded = await store.db.selectFrom("records").select((eb) => eb.fn.max("recorded_at").as("at")).executeTakeFirstOrThrow();
  await store.close();
  const seedSeconds = (performance.now() - seedStarted) / 1000;
  log(`seeded ${written} records in ${seedSeconds.toFixed(1)} s`);

  const server = await startServer({ dataDir, databaseUrl, port: 0, host: "127.0.0.1", sync: "normal", logger: pino({ level: "warn" }, pino.destination(2)) });
  try {
    // The filter: one course over the whole seeded date range, about a third of all rows.
    const from = FIRST_DAY;
    const to = String(lastSeeded.at).slice(0, 10);
    const filter = `course_code=${courseCode(0)}&from=${from}&to=${to}&limit=${PAGE_LIMIT}`;
    const listUrl = `${server.url}/v1/attendance?${filter}`;
    log(`walking GET /v1/attendance?${filter}`);
    const walkStarted = performance.now();
    const walk = await walkPages(listUrl, token);
    const walkSeconds = (performance.now() - walkStarted) / 1000;
    log(`walked ${walk.pages} pages, ${walk.rows} rows in ${walkSeconds.toFixed(1)} s`);
    const lastUrl = walk.lastCursor === undefined ? listUrl : `${listUrl}&cursor=${encodeURIComponent(walk.lastCursor)}`;
    const times = await timeFirstAndLast(listUrl, lastUrl, token);
    const queryPlan = await explainListQuery(
      databaseUrl === undefined ? { dbFile: sqliteFileOf(server.store) } : { databaseUrl },
      { course_code: courseCode(0), since: `${from}T00:00:00.000Z`, until: `${addDays(to, 1)}T00:00:00.000Z` },
      walk.lastCursor,
    );
    const pagination: PaginationResult = {
      filter,
      first_page_ms: round(times.first),
      last_page_ms: round(times.last),
      ratio: round(times.last / times.first),
      pages: walk.pages,
      rows_matched: walk.rows,
      page_limit: PAGE_LIMIT,
      repeats: PAGE_REPEATS,
      walk_seconds: round(walkSeconds, 1),
      query_plan: queryPlan,
    };

    log(`timing the roll of session ${rollSession.id}`);
    const roll = await benchRoll(`${server.url}/v1/sessions/${rollSession.id}/roll`, token, rollSession.id);
    return { seedSeconds, written, pagination, roll };
  } finally {
    await server.close();
  }
}

async function benchRoll(url: string, token: string, sessionId: string): Promise<RollResult> {
  const check = await getOk<RollPage>(url, token);
  const withRecords = check.body.roll.filter((e) => e.record_id !== null).length;
  if (check.body.roll.length !== CLASS_SIZE) throw new Error(`roll has ${check.body.roll.length} students, expected ${CLASS_SIZE}`);
  for (let i = 0; i < 20; i++) await getOk(url, token); // warm-up: JIT and SQLite page cache
  const samples: number[] = [];
  for (let i = 0; i < ROLL_REQUESTS; i++) samples.push((await getOk(url, token)).ms);
  return {
    session_id: sessionId,
    students: check.body.roll.length,
    with_records: withRecords,
    requests: ROLL_REQUESTS,
    median_ms: round(percentile(samples, 50), 3),
    p99_ms: round(percentile(samples, 99), 3),
  };
}

// ---------------------------------------------------------------------------------------------
// 3. Create throughput: each server in its own child process, loaded by autocannon from here.

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
  machine: { cpus: number; node: string };
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
}

function printTable(r: Report): void {
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
  process.stdout.write(`${lines.join("\n")}\n`);
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { records: { type: "string", default: "1000000" }, "cpu-prof": { type: "string" }, json: { type: "boolean", default: false } },
  });
  const cpuProfDir = values["cpu-prof"] === undefined ? undefined : path.resolve(values["cpu-prof"]);
  const records = Number(values.records);
  if (!Number.isInteger(records) || records < 1) throw new Error(`--records must be a positive whole number, got ${values.records}`);

  const started = performance.now();
  await withTempDir("badgebench-bench-", async (tmp) => {
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
    const report: Report = {
      records: reads.written,
      machine: { cpus: os.cpus().length, node: process.version },
      seed_seconds: round(reads.seedSeconds, 1),
      pagination: { ...reads.pagination, target_ratio: TARGETS.lastFirstRatio, pass: reads.pagination.ratio <= TARGETS.lastFirstRatio },
      roll: { ...reads.roll, target_median_ms: TARGETS.rollMedianMs, pass: reads.roll.median_ms < TARGETS.rollMedianMs },
      create: { connections: LOAD.connections, duration_s: LOAD.durationS, warmup_s: LOAD.warmupS, hello, runs, target_ratio: TARGETS.createRatio },
      total_seconds: round((performance.now() - started) / 1000, 1),
    };
    if (values.json) process.stdout.write(`${JSON.stringify(report)}\n`);
    else printTable(report);
  }).finally(() => agent.destroy());
}

// Run when started as a script; bench-postgres.ts imports the parts it shares.
if (process.argv[1] === fileURLToPath(import.meta.url)) await main();
