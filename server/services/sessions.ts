// Sessions (one timetabled meeting of a course in a room) and their rolls.
// Lifecycle: scheduled -> open -> closed, and scheduled -> cancelled. Nothing else moves;
// an illegal move is a 409 naming both states. Only an open session accepts device captures.
import type { Kysely, Transaction } from "kysely";
import { conflict, notFound } from "../errors.ts";
import { CursorCodec, filterFingerprint, toPage, type ListEnvelope } from "../cursor.ts";
import * as store from "../store/sessions-store.ts";
import type { Database, Livemode } from "../store/schema.ts";
import type { RecordStatus } from "./attendance.ts";

export const SESSION_STATUSES = ["scheduled", "open", "closed", "cancelled"] as const;
export type SessionStatus = (typeof SESSION_STATUSES)[number];

export interface SessionView {
  id: string;
  object: "session";
  livemode: boolean;
  course_code: string;
  room: string;
  date: string;
  starts_at: string;
  ends_at: string;
  status: SessionStatus;
}

export interface RollView {
  object: "roll";
  livemode: boolean;
  session: { id: string; course_code: string; status: SessionStatus; room: string; date: string; starts_at: string; ends_at: string };
  roll: { external_id: string; student_id: string; name: string; status: RecordStatus | null; record_id: string | null }[];
}

export function toSessionView(row: store.SessionRow): SessionView {
  return {
    id: row.id,
    object: "session",
    livemode: row.livemode === 1,
    course_code: row.course_code,
    room: row.room,
    date: row.date,
    starts_at: row.starts_at,
    ends_at: row.ends_at,
    status: row.status as SessionStatus,
  };
}

export async function getSession(db: Kysely<Database>, livemode: Livemode, id: string): Promise<SessionView> {
  const row = await store.findSession(db, id, livemode);
  if (!row) throw notFound("session", id);
  return toSessionView(row);
}

export interface SessionQuery {
  date?: string;
  course_code?: string;
  status?: SessionStatus;
  limit: number;
  cursor?: string;
}

export async function listSessions(
  db: Kysely<Database>,
  codec: CursorCodec,
  livemode: Livemode,
  query: SessionQuery,
): Promise<ListEnvelope<SessionView>> {
  const { limit, cursor, ...filterParams } = query;
  const filters = filterFingerprint("sessions", filterParams);
  const position = cursor === undefined ? undefined : codec.decode(cursor, filters);
  const rows = await store.listSessions(db, { livemode, ...filterParams, after: position?.after, limit: limit + 1 });
  return toPage(rows, limit, { codec, filters, keyOf: (row) => [row.starts_at, row.id], view: toSessionView });
}

export async function getRoll(db: Kysely<Database>, livemode: Livemode, id: string): Promise<RollView> {
  const session = await store.findSession(db, id, livemode);
  if (!session) throw notFound("session", id);
  const entries = await store.rollOf(db, session);
  const view = toSessionView(session);
  return {
    object: "roll",
    livemode: view.livemode,
    session: {
      id: view.id,
      course_code: view.course_code,
      status: view.status,
      room: view.room,
      date: view.date,
      starts_at: view.starts_at,
      ends_at: view.ends_at,
    },
    roll: entries.map((e) => ({
      external_id: e.external_id,
      student_id: e.student_id,
      name: e.name,
      status: (e.status ?? null) as RecordStatus | null,
      record_id: e.record_id ?? null,
    })),
  };
}

export const SESSION_ACTIONS = {
  open: { from: "scheduled", to: "open" },
  close: { from: "open", to: "closed" },
  cancel: { from: "scheduled", to: "cancelled" },
} as const satisfies Record<string, { from: SessionStatus; to: SessionStatus }>;

export type SessionAction = keyof typeof SESSION_ACTIONS;

/**
 * Moves a session along its lifecycle, inside the caller's transaction. `livemode` is omitted
 * by admin commands, which see both modes.
 */
export async function transitionSession(
  trx: Transaction<Database>,
  id: string,
  action: SessionAction,
  livemode?: Livemode,
): Promise<SessionView> {
  const { from, to } = SESSION_ACTIONS[action];
  const session = await store.findSession(trx, id, livemode);
  if (!session) throw notFound("session", id);
  if (session.status !== from || !(await store.transitionSession(trx, id, from, to))) {
    throw conflict(
      "session_transition_invalid",
      `Cannot ${action} session ${id}: it is ${session.status}, and only a ${from} session can become ${to} (${session.status} -> ${to} is not allowed).`,
    );
  }
  return toSessionView({ ...session, status: to });
}
