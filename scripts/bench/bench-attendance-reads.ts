// The attendance benchmark's read figures, shared with bench-postgres.ts: a school of
// CLASS_SIZE-student courses imported through the store, N records seeded through the store's
// own bulk insert (the API would take hours for a million), then keyset pagination (first and
// last page of a filtered list, with the list query's plan) and a session's roll, timed over
// HTTP against an in-process server on SQLite or PostgreSQL.
import http from "node:http";
import { performance } from "node:perf_hooks";
import SQLite from "better-sqlite3";
import { Kysely, PostgresDialect, SqliteDialect } from "kysely";
import pg from "pg";
import { pino } from "pino";
import { newId } from "../../server/ids.ts";
import { startServer } from "../../server/main.ts";
import { createApiKey } from "../../server/services/api-keys.ts";
import { importSchool, type SchoolFile } from "../../server/services/school-import.ts";
import * as attendanceStore from "../../server/store/attendance-store.ts";
import { openStore, sqliteFileOf, type Store } from "../../server/store/database.ts";
import type { Database, RecordsTable } from "../../server/store/schema.ts";
import { log, percentile, round } from "./bench-common.ts";

// Every course in the benchmark schools has exactly this many students: the roll figure is
// specified for a 300-student session, and pagination rows come in blocks of one class.
export const CLASS_SIZE = 300;
const PAGE_LIMIT = 200;
const PAGE_REPEATS = 20;
const ROLL_REQUESTS = 200;


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
export async function prepareDataDir(dataDir: string, plan: SchoolPlan, scope: string, databaseUrl?: string) {
  // `normal` sync: this is setup, not the thing being measured.
  const store = await openStore({ dataDir, sync: "normal", databaseUrl });
  await importSchool(store.db, buildSchool(plan), { mode: "test", source: "bench school" });
  const key = await createApiKey(store.db, { mode: "test", scopes: [scope], name: `bench ${scope}` });
  const school = await loadSchool(store);
  return { store, token: key.secret, ...school };
}

// ---------------------------------------------------------------------------------------------
// Seeding N records through the store's bulk insert (the API would take hours for a million).

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
        await attendanceStore.insertRecords(trx, batch.slice(i, i + ROWS_PER_INSERT));
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
 * The plan of the server's own list query on a second connection, for the first page and for
 * the last page's keyset position: SQLite's EXPLAIN QUERY PLAN on `dbFile`, or PostgreSQL's
 * EXPLAIN (ANALYZE) on `databaseUrl`.
 */
async function explainListQuery(target: { dbFile: string } | { databaseUrl: string }, filter: ListFilter, lastCursor?: string) {
  const db = new Kysely<Database>({
    dialect:
      "dbFile" in target
        ? new SqliteDialect({ database: new SQLite(target.dbFile, { readonly: true }) })
        : new PostgresDialect({ pool: new pg.Pool({ connectionString: target.databaseUrl, max: 1 }) }),
  });
  const plan = (after?: [string, string]) => attendanceStore.explainRecordsPage(db, { livemode: 0, ...filter, after, limit: PAGE_LIMIT + 1 });
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
  await attendanceStore.gatherRecordStatistics(store.db);
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
