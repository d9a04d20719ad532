import { sql } from "kysely";
import { isPostgres } from "./dialect.ts";
import type { CoursesTable, Db, Livemode, RoomsTable, SessionsTable, StudentsTable } from "./schema.ts";

const CHUNK = 200;

async function inChunks<T>(rows: T[], write: (chunk: T[]) => Promise<unknown>): Promise<void> {
  for (let i = 0; i < rows.length; i += CHUNK) await write(rows.slice(i, i + CHUNK));
}

export async function upsertRooms(db: Db, rows: RoomsTable[]) {
  await inChunks(rows, (chunk) =>
    db.insertInto("rooms").values(chunk).onConflict((oc) => oc.columns(["livemode", "code"]).doUpdateSet((eb) => ({ name: eb.ref("excluded.name") }))).execute(),
  );
}

export async function upsertCourses(db: Db, rows: CoursesTable[]) {
  await inChunks(rows, (chunk) =>
    db.insertInto("courses").values(chunk).onConflict((oc) => oc.columns(["livemode", "code"]).doUpdateSet((eb) => ({ name: eb.ref("excluded.name") }))).execute(),
  );
}

/** Inserts new students and updates the name and card of known ones; returns external_id -> id. */
export async function upsertStudents(db: Db, livemode: Livemode, rows: StudentsTable[]): Promise<Map<string, string>> {
  await inChunks(rows, (chunk) =>
    db
      .insertInto("students")
      .values(chunk)
      .onConflict((oc) =>
        oc.columns(["livemode", "external_id"]).doUpdateSet((eb) => ({ name: eb.ref("excluded.name"), card_uid: eb.ref("excluded.card_uid") })),
      )
      .execute(),
  );
  const ids = new Map<string, string>();
  const all = await db.selectFrom("students").select(["id", "external_id"]).where("livemode", "=", livemode).execute();
  for (const row of all) ids.set(row.external_id, row.id);
  return ids;
}

export async function insertEnrollments(db: Db, rows: { livemode: Livemode; course_code: string; student_id: string }[]) {
  await inChunks(rows, (chunk) =>
    db.insertInto("enrollments").values(chunk).onConflict((oc) => oc.columns(["livemode", "course_code", "student_id"]).doNothing()).execute(),
  );
}

/** Inserts sessions not yet known by (course, start); a known session keeps its id and status. */
export async function insertSessions(db: Db, rows: SessionsTable[]): Promise<number> {
  let inserted = 0;
  await inChunks(rows, async (chunk) => {
    const result = await db
      .insertInto("sessions")
      .values(chunk)
      .onConflict((oc) => oc.columns(["livemode", "course_code", "starts_at"]).doNothing())
      .executeTakeFirst();
    inserted += Number(result.numInsertedOrUpdatedRows ?? 0n);
  });
  return inserted;
}

export async function countStudents(db: Db, livemode: Livemode): Promise<number> {
  const row = await db.selectFrom("students").select((eb) => eb.fn.countAll().as("n")).where("livemode", "=", livemode).executeTakeFirst();
  return Number(row?.n ?? 0);
}

/**
 * Gathers PostgreSQL's statistics on the tables an import fills, as autovacuum would within a
 * minute or so. Until then PostgreSQL plans the badge sync's lookups (cards, enrolments) from
 * guesses: it took a mode's every student as a handful of rows, read all of them and filtered
 * by card (6-60 ms of its CPU a sync, most of a sync's cost) instead of looking the cards up in
 * `students_by_card`. SQLite plans without statistics: nothing to do there.
 */
export async function gatherSchoolStatistics(db: Db): Promise<void> {
  if (isPostgres(db)) await sql`analyze rooms, courses, students, enrollments, sessions`.execute(db);
}
