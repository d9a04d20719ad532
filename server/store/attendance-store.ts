import { CompiledQuery, sql } from "kysely";
import { columnArrays, compiledQuery, everyColumnOf, postgresStatement, rowsInsert } from "./compiled-query.ts";
import { forUpdate, isPostgres } from "./dialect.ts";
import type { Db, EventsTable, HistoryTable, Livemode, RecordsTable } from "./schema.ts";
import { postgresEventGuard } from "./webhooks-store.ts";

export async function findStudent(db: Db, livemode: Livemode, by: { id?: string; external_id?: string }) {
  let query = db.selectFrom("students").selectAll().where("livemode", "=", livemode);
  if (by.id !== undefined) query = query.where("id", "=", by.id);
  if (by.external_id !== undefined) query = query.where("external_id", "=", by.external_id);
  return query.executeTakeFirst();
}

const studentInCourse = compiledQuery((db: Db, livemode: Livemode, by: { id?: string; external_id?: string }, courseCode: string) => {
  let query = db
    .selectFrom("students")
    .leftJoin("enrollments", (join) =>
      join
        .onRef("enrollments.student_id", "=", "students.id")
        .on("enrollments.livemode", "=", livemode)
        .on("enrollments.course_code", "=", courseCode),
    )
    .selectAll("students")
    .select("enrollments.course_code as enrolled_in")
    .where("students.livemode", "=", livemode);
  if (by.id !== undefined) query = query.where("students.id", "=", by.id);
  if (by.external_id !== undefined) query = query.where("students.external_id", "=", by.external_id);
  return query;
});

/** The student, and whether they are enrolled in `courseCode`, in one query. */
export async function findStudentInCourse(db: Db, livemode: Livemode, by: { id?: string; external_id?: string }, courseCode: string) {
  return (await studentInCourse(db, livemode, by, courseCode)).rows[0];
}

export async function findRecordFor(db: Db, sessionId: string, studentId: string) {
  return db
    .selectFrom("records")
    .select(["id", "status", "method"])
    .where("session_id", "=", sessionId)
    .where("student_id", "=", studentId)
    .executeTakeFirst();
}

const insertUnlessRecorded = compiledQuery((db: Db, row: RecordsTable) =>
  db
    .insertInto("records")
    .values(row)
    .onConflict((oc) => oc.columns(["session_id", "student_id"]).doNothing()),
);

/** Inserts the record unless the student already has one in the session; returns whether it did. */
export async function insertRecordIfAbsent(db: Db, row: RecordsTable): Promise<boolean> {
  const result = await insertUnlessRecorded(db, row);
  return Number(result.numAffectedRows ?? 0n) > 0;
}

/**
 * The record, locked until the transaction `trx` ends: a concurrent correction (from another
 * server process) waits, then reads the status this one leaves, so history entries chain.
 */
export async function findRecordForUpdate(trx: Db, livemode: Livemode, id: string) {
  return forUpdate(trx, trx.selectFrom("records").selectAll().where("livemode", "=", livemode).where("id", "=", id)).executeTakeFirst();
}

export async function updateRecordStatus(db: Db, id: string, status: string, now: string): Promise<void> {
  await db.updateTable("records").set({ status, updated_at: now }).where("id", "=", id).execute();
}

/** Appends to a record's history; call inside the transaction that changes the record. */
export async function appendHistory(db: Db, row: Omit<HistoryTable, "seq">): Promise<void> {
  const last = await db
    .selectFrom("record_history")
    .select((eb) => eb.fn.max("seq").as("seq"))
    .where("record_id", "=", row.record_id)
    .executeTakeFirst();
  await db.insertInto("record_history").values({ ...row, seq: Number(last?.seq ?? 0) + 1 }).execute();
}

export async function findRecordDetail(db: Db, livemode: Livemode, id: string) {
  const record = await db
    .selectFrom("records")
    .innerJoin("students", "students.id", "records.student_id")
    .innerJoin("sessions", "sessions.id", "records.session_id")
    .leftJoin("devices", "devices.id", "records.device_id")
    .selectAll("records")
    .select([
      "students.external_id as student_external_id",
      "students.name as student_name",
      "sessions.room as session_room",
      "devices.model as device_model",
    ])
    .where("records.livemode", "=", livemode)
    .where("records.id", "=", id)
    .executeTakeFirst();
  if (!record) return undefined;
  const history = await db
    .selectFrom("record_history")
    .selectAll()
    .where("record_id", "=", id)
    .orderBy("seq")
    .execute();
  return { ...record, history };
}

export type RecordDetailRow = NonNullable<Awaited<ReturnType<typeof findRecordDetail>>>;

export interface RecordFilter {
  livemode: Livemode;
  /** inclusive lower bound on recorded_at */
  since: string;
  /** exclusive upper bound on recorded_at */
  until: string;
  course_code?: string;
  session_id?: string;
  student_id?: string;
  status?: string;
  /** keyset position: only rows after (recorded_at, id) */
  after?: [string, string];
  limit: number;
}

/** listRecords' query of `records` (the plan that matters; the students' names are read after it). */
function recordsPageQuery(db: Db, filter: RecordFilter) {
  const cursorTime = filter.after?.[0];
  const lowerBound = cursorTime !== undefined && cursorTime > filter.since ? cursorTime : filter.since;
  let query = db
    .selectFrom("records")
    .select(["id", "livemode", "status", "recorded_at", "method", "student_id", "session_id", "course_code"])
    .where("livemode", "=", filter.livemode)
    .where("recorded_at", ">=", lowerBound)
    .where("recorded_at", "<", filter.until);
  if (filter.course_code !== undefined) query = query.where("course_code", "=", filter.course_code);
  if (filter.session_id !== undefined) query = query.where("session_id", "=", filter.session_id);
  if (filter.student_id !== undefined) query = query.where("student_id", "=", filter.student_id);
  if (filter.status !== undefined) query = query.where("status", "=", filter.status);
  if (filter.after) {
    const [recordedAt, id] = filter.after;
    query = query.where((eb) => eb(eb.refTuple("recorded_at", "id"), ">", eb.tuple(recordedAt, id)));
  }
  return query.orderBy("recorded_at").orderBy("id").limit(filter.limit);
}

/**
 * One page of records in (recorded_at, id) order. The query reads `records` alone and SQLite
 * walks records_by_time, whatever the filter (migration 0006 says why there is no index per
 * filter), seeking straight to the cursor: the keyset condition is a row-value comparison plus
 * ONE plain lower bound on recorded_at, the later of the range's start and the cursor's time.
 * An OR of the two columns cannot be used to seek; and given two lower bounds, SQLite starts the
 * range at the range's start, so a deep page stepped over every row before the cursor (last page
 * 35x the first at 1,000,000 records).
 */
export async function listRecords(db: Db, filter: RecordFilter) {
  const rows = await recordsPageQuery(db, filter).execute();
  const studentIds = [...new Set(rows.map((r) => r.student_id))];
  const externalIds = new Map<string, string>();
  if (studentIds.length > 0) {
    const students = await db.selectFrom("students").select(["id", "external_id"]).where("id", "in", studentIds).execute();
    for (const student of students) externalIds.set(student.id, student.external_id);
  }
  return rows.map((row) => ({ ...row, student_external_id: externalIds.get(row.student_id)! }));
}

export type RecordListRow = Awaited<ReturnType<typeof listRecords>>[number];

/** A device capture taking over a record that came from another method. */
export async function takeOverRecord(
  db: Db,
  id: string,
  change: { status: string; device_id: string; updated_at: string },
): Promise<void> {
  await db
    .updateTable("records")
    .set({ ...change, method: "device" })
    .where("id", "=", id)
    .execute();
}

/** The students holding these cards (a card unknown in this mode has no row). */
export const findStudentsByCards = compiledQuery((db: Db, livemode: Livemode, cardUids: string[]) =>
  db
    .selectFrom("students")
    .select(["id", "external_id", "name", "card_uid"])
    .where("livemode", "=", livemode)
    .where("card_uid", "in", cardUids),
);

/** The records table's columns, in the order its inserts list them. */
export const RECORD_COLUMNS = everyColumnOf<"records">()([
  "id",
  "livemode",
  "session_id",
  "student_id",
  "course_code",
  "status",
  "recorded_at",
  "method",
  "device_id",
  "reason",
  "created_at",
  "updated_at",
]);

export const insertRecords = rowsInsert("records", RECORD_COLUMNS);

/** How many records were captured by `method` ("device" for a badge's tap), in both modes. */
export async function countRecordsByMethod(db: Db, method: string): Promise<number> {
  const row = await db.selectFrom("records").select((eb) => eb.fn.countAll().as("n")).where("method", "=", method).executeTakeFirstOrThrow();
  return Number(row.n);
}

/**
 * Gathers PostgreSQL's statistics on `records` now, as autovacuum does within a minute or so of a
 * bulk load (without them it guesses a handful of rows in a range and sorts every match for a
 * first page). SQLite plans without statistics: nothing to do there.
 */
export async function gatherRecordStatistics(db: Db): Promise<void> {
  if (isPostgres(db)) await sql`analyze records`.execute(db);
}

/**
 * The plan of listRecords' query of `records` for `filter`: SQLite's EXPLAIN QUERY PLAN, or
 * PostgreSQL's EXPLAIN (ANALYZE, BUFFERS), which runs it; one line per plan step.
 */
export async function explainRecordsPage(db: Db, filter: RecordFilter): Promise<string[]> {
  const query = recordsPageQuery(db, filter).compile();
  if (isPostgres(db)) {
    const { rows } = await db.executeQuery<{ "QUERY PLAN": string }>(CompiledQuery.raw(`explain (analyze, buffers) ${query.sql}`, [...query.parameters]));
    return rows.map((row) => row["QUERY PLAN"]);
  }
  const { rows } = await db.executeQuery<{ detail: string }>(CompiledQuery.raw(`explain query plan ${query.sql}`, [...query.parameters]));
  return rows.map((row) => row.detail);
}

/** One create of a group (PostgreSQL): what it names; `n` is its place in the group. */
export interface CreateTarget {
  livemode: Livemode;
  sessionId: string;
  studentId: string | undefined;
  externalId: string | undefined;
}

/** What a group's creates read: per create, its session and student (and whether enrolled in the session's course), if found. */
export interface CreateTargetRow {
  n: number;
  session_id: string | null;
  course_code: string | null;
  room: string | null;
  session_status: string | null;
  student_id: string | null;
  external_id: string | null;
  name: string | null;
  enrolled_in: string | null;
}

// The session, the student (by id, or by external_id) and the enrolment of every create of a
// group, one row per create, each found through its unique key. The arrays reach unnest through
// a one-row CTE, so the planner cannot see their lengths: every execution then costs the same to
// it, and PostgreSQL keeps the one plan it made (the generic plan of the prepared statement).
// Given the arrays themselves, it found each group's own plan cheaper than that one and planned
// this four-way join anew for every group: a quarter of PostgreSQL's CPU in the creates' profile.
const createTargets = postgresStatement<CreateTargetRow>(
  `with arrays as materialized (select $1::int[] as n, $2::int[] as livemode, $3::text[] as session_id, $4::text[] as student_id, $5::text[] as external_id)
   select wanted.n, s.id as session_id, s.course_code, s.room, s.status as session_status,
          st.id as student_id, st.external_id, st.name, e.course_code as enrolled_in
   from arrays cross join unnest(arrays.n, arrays.livemode, arrays.session_id, arrays.student_id, arrays.external_id) as wanted(n, livemode, session_id, student_id, external_id)
   left join sessions s on s.id = wanted.session_id and s.livemode = wanted.livemode
   left join lateral (
     select id, external_id, name from students
     where wanted.student_id is not null and students.id = wanted.student_id and students.livemode = wanted.livemode
       and (wanted.external_id is null or students.external_id = wanted.external_id)
     union all
     select id, external_id, name from students
     where wanted.student_id is null and students.livemode = wanted.livemode and students.external_id = wanted.external_id
   ) as st on true
   left join enrollments e on e.livemode = wanted.livemode and e.course_code = s.course_code and e.student_id = st.id
   order by wanted.n`,
);

/** For a group's creates (PostgreSQL), in their order: what each one's checks need, in one statement. */
export async function findCreateTargets(db: Db, targets: readonly CreateTarget[]): Promise<CreateTargetRow[]> {
  const { rows } = await createTargets(db, [
    targets.map((_, n) => n),
    targets.map((t) => t.livemode),
    targets.map((t) => t.sessionId),
    targets.map((t) => t.studentId ?? null),
    targets.map((t) => t.externalId ?? null),
  ]);
  return rows;
}

/** An Idempotency-Key's answer, stored once the write it answers is: with `recordId`, only if that record was inserted. */
export interface KeyAnswer {
  livemode: Livemode;
  apiKeyId: string;
  key: string;
  /** the request's fingerprint: what the key's row holds if the answer has to write it anew */
  fingerprint: string;
  statusCode: number;
  responseBody: string;
  withheld: string | null;
  recordId: string | null;
}

// A group's new records, the event of each one inserted and the answers of the group's
// Idempotency-Keys, as one statement: atomic by itself, so no transaction, and one round trip
// for the group. A record whose (session, student) already has one is not inserted, and neither
// its event nor its key's answer is written; the caller learns which from the ids returned.
// Records are inserted in (session, student) order and keys answered in the order given (the
// write batcher's lock-key order), the orders every instance takes those rows in. An event is
// written dispatched when its mode has no enabled endpoint, as insertEvents writes them.
// The answers go in as an INSERT on the key's unique index (each key's reserved row found through
// it and updated; a row gone meanwhile written anew, answered) rather than an UPDATE joined to
// the answers: that join's plan, made once per connection while the table was small, scanned the
// whole table for every group once it had grown (a create's cost grew with the keys kept).
const eventGuard = postgresEventGuard("$14");
const recordsAnswered = postgresStatement<{ id: string }>(
  `with inserted as (
     insert into records (id, livemode, session_id, student_id, course_code, status, recorded_at, method, device_id, reason, created_at, updated_at)
     select * from unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[])
       as r(id, livemode, session_id, student_id, course_code, status, recorded_at, method, device_id, reason, created_at, updated_at)
     order by session_id, student_id
     on conflict (session_id, student_id) do nothing
     returning id
   ), ${eventGuard.cte}, evented as (
     insert into events (id, livemode, type, created_at, payload, dispatched_at)
     select e.id, e.livemode, e.type, e.created_at, e.payload, ${eventGuard.dispatched}
     from unnest($13::text[], $14::int[], $15::text[], $16::text[], $17::text[], $18::text[]) as e(id, livemode, type, created_at, payload, record_id)
     ${eventGuard.join}
     where e.record_id in (select id from inserted)
   ), answered as (
     insert into idempotency_keys (livemode, api_key_id, key, fingerprint, state, locked_at, status_code, response_body, withheld, created_at)
     select a.livemode, a.api_key_id, a.key, a.fingerprint, 'done', $27, a.status_code, a.response_body, a.withheld, $27
     from unnest($19::int[], $20::text[], $21::text[], $22::text[], $23::int[], $24::text[], $25::text[], $26::text[])
       with ordinality as a(livemode, api_key_id, key, fingerprint, status_code, response_body, withheld, record_id, n)
     where a.record_id is null or a.record_id in (select id from inserted)
     order by a.n
     on conflict (livemode, api_key_id, key) do update
       set state = 'done', status_code = excluded.status_code, response_body = excluded.response_body, withheld = excluded.withheld
   )
   select id from inserted`,
);

/**
 * PostgreSQL: inserts `records` (each unless its student has a record in the session), the event
 * of each inserted one (`events[i]` reports `records[i]`) and the key answers (one naming a
 * record only if that record was inserted), in one statement; returns the ids inserted.
 */
export async function insertRecordsAnswering(db: Db, records: readonly RecordsTable[], events: readonly EventsTable[], answers: readonly KeyAnswer[]): Promise<Set<string>> {
  const { rows } = await recordsAnswered(db, [
    ...columnArrays(records, RECORD_COLUMNS),
    ...columnArrays(events, ["id", "livemode", "type", "created_at", "payload"]),
    records.map((record) => record.id),
    ...columnArrays(answers, ["livemode", "apiKeyId", "key", "fingerprint", "statusCode", "responseBody", "withheld", "recordId"]),
    new Date().toISOString(),
  ]);
  return new Set(rows.map((row) => row.id));
}
