import type { Db, EventsTable, HistoryTable, Livemode, RecordsTable } from "./schema.ts";

export async function findStudent(db: Db, livemode: Livemode, by: { id?: string; external_id?: string }) {
  let query = db.selectFrom("students").selectAll().where("livemode", "=", livemode);
  if (by.id !== undefined) query = query.where("id", "=", by.id);
  if (by.external_id !== undefined) query = query.where("external_id", "=", by.external_id);
  return query.executeTakeFirst();
}

export async function isEnrolled(db: Db, livemode: Livemode, courseCode: string, studentId: string) {
  const row = await db
    .selectFrom("enrollments")
    .select("student_id")
    .where("livemode", "=", livemode)
    .where("course_code", "=", courseCode)
    .where("student_id", "=", studentId)
    .executeTakeFirst();
  return row !== undefined;
}

export async function findRecordFor(db: Db, sessionId: string, studentId: string) {
  return db
    .selectFrom("records")
    .select(["id", "status", "method"])
    .where("session_id", "=", sessionId)
    .where("student_id", "=", studentId)
    .executeTakeFirst();
}

export async function insertRecord(db: Db, row: RecordsTable): Promise<void> {
  await db.insertInto("records").values(row).execute();
}

export async function findRecord(db: Db, livemode: Livemode, id: string) {
  return db.selectFrom("records").selectAll().where("livemode", "=", livemode).where("id", "=", id).executeTakeFirst();
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

export async function insertEvent(db: Db, row: EventsTable): Promise<void> {
  await db.insertInto("events").values(row).execute();
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

export async function listRecords(db: Db, filter: RecordFilter) {
  let query = db
    .selectFrom("records")
    .innerJoin("students", "students.id", "records.student_id")
    .select([
      "records.id",
      "records.livemode",
      "records.status",
      "records.recorded_at",
      "records.method",
      "records.student_id",
      "students.external_id as student_external_id",
      "records.session_id",
      "records.course_code",
    ])
    .where("records.livemode", "=", filter.livemode)
    .where("records.recorded_at", ">=", filter.since)
    .where("records.recorded_at", "<", filter.until);
  if (filter.course_code !== undefined) query = query.where("records.course_code", "=", filter.course_code);
  if (filter.session_id !== undefined) query = query.where("records.session_id", "=", filter.session_id);
  if (filter.student_id !== undefined) query = query.where("records.student_id", "=", filter.student_id);
  if (filter.status !== undefined) query = query.where("records.status", "=", filter.status);
  if (filter.after) {
    const [recordedAt, id] = filter.after;
    query = query.where((eb) =>
      eb.or([
        eb("records.recorded_at", ">", recordedAt),
        eb.and([eb("records.recorded_at", "=", recordedAt), eb("records.id", ">", id)]),
      ]),
    );
  }
  return query.orderBy("records.recorded_at").orderBy("records.id").limit(filter.limit).execute();
}

export type RecordListRow = Awaited<ReturnType<typeof listRecords>>[number];
