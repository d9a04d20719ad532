import { compiledQuery } from "./compiled-query.ts";
import type { Db, Livemode } from "./schema.ts";

const byId = compiledQuery((db: Db, id: string, livemode: Livemode | undefined) => {
  const query = db.selectFrom("sessions").selectAll().where("id", "=", id);
  return livemode === undefined ? query : query.where("livemode", "=", livemode);
});

export async function findSession(db: Db, id: string, livemode?: Livemode) {
  return (await byId(db, id, livemode)).rows[0];
}

export type SessionRow = NonNullable<Awaited<ReturnType<typeof findSession>>>;

export interface SessionFilter {
  livemode: Livemode;
  date?: string;
  course_code?: string;
  status?: string;
  /** keyset position: only rows after (starts_at, id) */
  after?: [string, string];
  limit: number;
}

export async function listSessions(db: Db, filter: SessionFilter): Promise<SessionRow[]> {
  let query = db.selectFrom("sessions").selectAll().where("livemode", "=", filter.livemode);
  if (filter.date !== undefined) query = query.where("date", "=", filter.date);
  if (filter.course_code !== undefined) query = query.where("course_code", "=", filter.course_code);
  if (filter.status !== undefined) query = query.where("status", "=", filter.status);
  if (filter.after) {
    const [startsAt, id] = filter.after;
    query = query.where((eb) =>
      eb.or([eb("starts_at", ">", startsAt), eb.and([eb("starts_at", "=", startsAt), eb("id", ">", id)])]),
    );
  }
  return query.orderBy("starts_at").orderBy("id").limit(filter.limit).execute();
}

/** Moves a session only if it is still in `from`; returns whether it moved. */
export async function transitionSession(db: Db, id: string, from: string, to: string): Promise<boolean> {
  const result = await db
    .updateTable("sessions")
    .set({ status: to })
    .where("id", "=", id)
    .where("status", "=", from)
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/** Every student enrolled in the session's course, with their record in the session if any. */
export async function rollOf(db: Db, session: SessionRow) {
  return db
    .selectFrom("enrollments")
    .innerJoin("students", "students.id", "enrollments.student_id")
    .leftJoin("records", (join) =>
      join.onRef("records.student_id", "=", "enrollments.student_id").on("records.session_id", "=", session.id),
    )
    .select([
      "students.id as student_id",
      "students.external_id",
      "students.name",
      "records.id as record_id",
      "records.status",
    ])
    .where("enrollments.livemode", "=", session.livemode)
    .where("enrollments.course_code", "=", session.course_code)
    .orderBy("students.external_id")
    .execute();
}
