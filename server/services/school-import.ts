// Imports a school (rooms, students, courses, enrollments, sessions) from a JSON file into one
// mode. Import is idempotent: students are matched by external_id, courses and rooms by code,
// sessions by course and start time, so re-importing a file changes nothing twice and never
// resets a session's status. A `timetable` (weekly pattern) expands into the sessions of one
// week. All times are UTC. The whole file is checked before anything is written.
import type { Kysely } from "kysely";
import { z } from "zod";
import { newId } from "../ids.ts";
import { isoDate } from "../iso-date.ts";
import type { Database, Livemode } from "../store/schema.ts";
import * as store from "../store/school-store.ts";
import { SESSION_STATUSES } from "./sessions.ts";

const code = z.string().min(1).max(100);
const time = z.string().regex(/^([01]\d|2[0-3]):[0-5]\d$/, "must be a time HH:MM (24-hour, UTC)");
const timestamp = z.iso.datetime({ message: "must be an ISO 8601 UTC timestamp such as 2026-11-23T09:00:00Z" });

export const schoolFileSchema = z.strictObject({
  school: z.strictObject({ name: z.string().min(1) }).optional(),
  rooms: z.array(z.strictObject({ code, name: z.string().min(1) })).default([]),
  students: z.array(z.strictObject({ external_id: code, name: z.string().min(1), card_uid: z.string().regex(/^[0-9A-F]{8,20}$/, "must be upper-case hex").optional() })).default([]),
  courses: z.array(z.strictObject({ code, name: z.string().min(1) })).default([]),
  enrollments: z.array(z.strictObject({ course_code: code, external_ids: z.array(code) })).default([]),
  sessions: z
    .array(z.strictObject({ course_code: code, room: code, starts_at: timestamp, ends_at: timestamp, status: z.enum(SESSION_STATUSES).optional() }))
    .default([]),
  timetable: z
    .array(z.strictObject({ course_code: code, room: code, weekday: z.number().int().min(1).max(7), start: time, end: time }))
    .default([]),
});

export type SchoolFile = z.input<typeof schoolFileSchema>;

export class SchoolImportError extends Error {
  override name = "SchoolImportError";
}

export interface ImportSummary {
  mode: "test" | "live";
  rooms: number;
  students: number;
  courses: number;
  enrollments: number;
  sessions_added: number;
}

/** The Monday (UTC) of the week holding `date`. */
export function mondayOf(date: string): string {
  const day = new Date(`${date}T00:00:00Z`);
  const offset = (day.getUTCDay() + 6) % 7;
  return new Date(day.getTime() - offset * 86_400_000).toISOString().slice(0, 10);
}

function weekdayDate(monday: string, weekday: number): string {
  return new Date(Date.parse(`${monday}T00:00:00Z`) + (weekday - 1) * 86_400_000).toISOString().slice(0, 10);
}

function check(input: unknown, source: string) {
  const result = schoolFileSchema.safeParse(input);
  if (!result.success) {
    const issue = result.error.issues[0]!;
    throw new SchoolImportError(`${source}: ${issue.path.map(String).join(".") || "(root)"}: ${issue.message}`);
  }
  const file = result.data;
  const fail = (where: string, message: string) => {
    throw new SchoolImportError(`${source}: ${where}: ${message}`);
  };
  const students = new Set(file.students.map((s) => s.external_id));
  const courses = new Set(file.courses.map((c) => c.code));
  const rooms = new Set(file.rooms.map((r) => r.code));
  file.enrollments.forEach((e, i) => {
    if (!courses.has(e.course_code)) fail(`enrollments.${i}.course_code`, `unknown course ${e.course_code}`);
    const unknown = e.external_ids.find((id) => !students.has(id));
    if (unknown) fail(`enrollments.${i}.external_ids`, `unknown student ${unknown}`);
  });
  [...file.sessions, ...file.timetable].forEach((s, i) => {
    const where = i < file.sessions.length ? `sessions.${i}` : `timetable.${i - file.sessions.length}`;
    if (!courses.has(s.course_code)) fail(`${where}.course_code`, `unknown course ${s.course_code}`);
    if (!rooms.has(s.room)) fail(`${where}.room`, `unknown room ${s.room}`);
  });
  file.sessions.forEach((s, i) => {
    if (s.ends_at <= s.starts_at) fail(`sessions.${i}.ends_at`, "must be after starts_at");
  });
  file.timetable.forEach((t, i) => {
    if (t.end <= t.start) fail(`timetable.${i}.end`, "must be after start");
  });
  return file;
}

const utc = (value: string) => new Date(value).toISOString();

export async function importSchool(
  db: Kysely<Database>,
  input: unknown,
  options: { mode: "test" | "live"; week?: string; source?: string },
): Promise<ImportSummary> {
  const file = check(input, options.source ?? "school file");
  if (options.week !== undefined && !isoDate.safeParse(options.week).success) {
    throw new SchoolImportError(`--week must be a date YYYY-MM-DD, got ${options.week}`);
  }
  const livemode: Livemode = options.mode === "live" ? 1 : 0;
  const monday = mondayOf(options.week ?? new Date().toISOString().slice(0, 10));
  const sessions = [
    ...file.sessions.map((s) => ({ ...s, starts_at: utc(s.starts_at), ends_at: utc(s.ends_at), status: s.status ?? "scheduled" })),
    ...file.timetable.map((t) => {
      const date = weekdayDate(monday, t.weekday);
      return {
        course_code: t.course_code,
        room: t.room,
        starts_at: `${date}T${t.start}:00.000Z`,
        ends_at: `${date}T${t.end}:00.000Z`,
        status: "scheduled",
      };
    }),
  ];
  const summary = await db.transaction().execute(async (trx) => {
    await store.upsertRooms(trx, file.rooms.map((r) => ({ livemode, ...r })));
    await store.upsertCourses(trx, file.courses.map((c) => ({ livemode, ...c })));
    const studentIds = await store.upsertStudents(
      trx,
      livemode,
      file.students.map((s) => ({ id: newId("stu"), livemode, external_id: s.external_id, name: s.name, card_uid: s.card_uid ?? null })),
    );
    const enrollments = file.enrollments.flatMap((e) =>
      e.external_ids.map((externalId) => ({ livemode, course_code: e.course_code, student_id: studentIds.get(externalId)! })),
    );
    await store.insertEnrollments(trx, enrollments);
    const added = await store.insertSessions(
      trx,
      sessions.map((s) => ({ id: newId("ses"), livemode, date: s.starts_at.slice(0, 10), ...s })),
    );
    return {
      mode: options.mode,
      rooms: file.rooms.length,
      students: file.students.length,
      courses: file.courses.length,
      enrollments: enrollments.length,
      sessions_added: added,
    };
  });
  await store.gatherSchoolStatistics(db);
  return summary;
}
