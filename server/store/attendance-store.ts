import { compiledQuery, rowsInsert } from "./compiled-query.ts";
import { forUpdate } from "./dialect.ts";
import type { Db, HistoryTable, Livemode, RecordsTable } from "./schema.ts";

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
  const rows = await query.orderBy("recorded_at").orderBy("id").limit(filter.limit).execute();
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

/** Enrolments among the given courses and students: a superset the caller matches pair by pair. */
export const findEnrolments = compiledQuery((db: Db, livemode: Livemode, courseCodes: string[], studentIds: string[]) =>
  db
    .selectFrom("enrollments")
    .select(["course_code", "student_id"])
    .where("livemode", "=", livemode)
    .where("course_code", "in", courseCodes)
    .where("student_id", "in", studentIds),
);

/**
 * Records among the given sessions and students, a superset the caller matches pair by pair;
 * locked until the transaction ends (as findRecordForUpdate).
 */
export const findRecordsAmong = compiledQuery((db: Db, sessionIds: string[], studentIds: string[]) =>
  forUpdate(
    db,
    db
      .selectFrom("records")
      .select(["id", "session_id", "student_id", "status", "method"])
      .where("session_id", "in", sessionIds)
      .where("student_id", "in", studentIds),
  ),
);

export const insertRecords = rowsInsert("records", [
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
