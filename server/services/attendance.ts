// Attendance records: the list, the single read with its permanent history, API creates and
// corrections. Rules (documented in server/README.md):
// - one record per student per session; an API create where a record exists is a 409 that
//   names the existing record, to be corrected with PATCH instead;
// - a create needs the student to be enrolled in the session's course and the session not to
//   be cancelled;
// - a correction needs a non-empty reason and a status different from the current one; it
//   appends a history entry in the same transaction, and history is never edited or removed;
// - every create and correction writes its event to the outbox in the same transaction.
import type { Kysely, Transaction } from "kysely";
import { conflict, invalidParam, notFound } from "../errors.ts";
import { CursorCodec, filterFingerprint, toPage, type ListEnvelope } from "../cursor.ts";
import { newId } from "../ids.ts";
import * as store from "../store/attendance-store.ts";
import { findSession } from "../store/sessions-store.ts";
import type { WindowRecord } from "../store/taps-store.ts";
import type { Database, Db, EventsTable, Livemode, RecordsTable } from "../store/schema.ts";
import { eventRow, writeEvent, writeEvents } from "./outbox.ts";
import type { Principal } from "./api-keys.ts";
import { groupedWrite, keyAnswer, refusalResponse, type StoredResponse } from "./idempotency.ts";
import { RUN_ALONE } from "../store/write-batcher.ts";

/** An attendance record's status; a device capture makes only present or late. */
export const RECORD_STATUSES = ["present", "late", "absent", "excused"] as const;
export type RecordStatus = (typeof RECORD_STATUSES)[number];

export interface Actor {
  type: "user" | "device";
  id: string;
  name: string;
}

export interface RecordListItem {
  id: string;
  object: "attendance_record";
  livemode: boolean;
  status: string;
  recorded_at: string;
  method: string;
  student: { id: string; external_id: string };
  session: { id: string; course_code: string };
}

export interface RecordDetail extends RecordListItem {
  student: { id: string; external_id: string; name: string };
  session: { id: string; course_code: string; room: string };
  device: { id: string; model: string } | null;
  reason: string | null;
  created_at: string;
  updated_at: string;
  history: { at: string; from: string; to: string; reason: string; actor: Actor }[];
}

function toListItem(row: store.RecordListRow): RecordListItem {
  return {
    id: row.id,
    object: "attendance_record",
    livemode: row.livemode === 1,
    status: row.status,
    recorded_at: row.recorded_at,
    method: row.method,
    student: { id: row.student_id, external_id: row.student_external_id },
    session: { id: row.session_id, course_code: row.course_code },
  };
}

/** What the detail read joins to a record's row: its student, its session's room, its device's model, its history. */
type DetailJoin = Pick<store.RecordDetailRow, "student_external_id" | "student_name" | "session_room" | "device_model" | "history">;

// Built field by field from the two objects, without spreading either into a new object: a
// sync builds one detail per tap for its events, and the spreads made that a tenth of its CPU.
function toDetail(row: RecordsTable, joined: DetailJoin): RecordDetail {
  return {
    id: row.id,
    object: "attendance_record",
    livemode: row.livemode === 1,
    status: row.status,
    recorded_at: row.recorded_at,
    method: row.method,
    student: { id: row.student_id, external_id: joined.student_external_id, name: joined.student_name },
    session: { id: row.session_id, course_code: row.course_code, room: joined.session_room },
    device: row.device_id && joined.device_model ? { id: row.device_id, model: joined.device_model } : null,
    reason: row.reason,
    created_at: row.created_at,
    updated_at: row.updated_at,
    history: joined.history.map((h) => ({
      at: h.at,
      from: h.from_status,
      to: h.to_status,
      reason: h.reason,
      actor: { type: h.actor_type as Actor["type"], id: h.actor_id, name: h.actor_name },
    })),
  };
}

export async function getRecord(db: Db, livemode: Livemode, id: string) {
  const row = await store.findRecordDetail(db, livemode, id);
  if (!row) throw notFound("attendance record", id);
  return toDetail(row, row);
}

export interface RecordQuery {
  from?: string;
  to?: string;
  course_code?: string;
  session_id?: string;
  student_id?: string;
  external_id?: string;
  status?: RecordStatus;
  limit: number;
  cursor?: string;
}

const DAY_MS = 86_400_000;
const dayOffset = (date: string, days: number) =>
  new Date(Date.parse(`${date}T00:00:00Z`) + days * DAY_MS).toISOString().slice(0, 10);

/** The date window of a list: both ends inclusive; without them, the last 7 days ending today (UTC). */
function resolveWindow(query: RecordQuery, today: string): { from: string; to: string } {
  const to = query.to ?? (query.from && query.from > today ? query.from : today);
  const from = query.from ?? dayOffset(to, -6);
  if (from > to) throw invalidParam("from", `from (${from}) is after to (${to}).`);
  return { from, to };
}

export async function listRecords(
  db: Kysely<Database>,
  codec: CursorCodec,
  livemode: Livemode,
  query: RecordQuery,
  today = new Date().toISOString().slice(0, 10),
): Promise<ListEnvelope<RecordListItem>> {
  const { limit, cursor, ...filterParams } = query;
  const filters = filterFingerprint("attendance", filterParams);
  const position = cursor === undefined ? undefined : codec.decode(cursor, filters);
  const window = position?.pinned
    ? { from: position.pinned.from!, to: position.pinned.to! }
    : resolveWindow(query, today);
  let studentId = query.student_id;
  if (query.external_id !== undefined) {
    const student = await store.findStudent(db, livemode, { external_id: query.external_id, id: query.student_id });
    if (!student) return { object: "list", has_more: false, next_cursor: null, data: [] };
    studentId = student.id;
  }
  const rows = await store.listRecords(db, {
    livemode,
    since: `${window.from}T00:00:00.000Z`,
    until: `${dayOffset(window.to, 1)}T00:00:00.000Z`,
    course_code: query.course_code,
    session_id: query.session_id,
    student_id: studentId,
    status: query.status,
    after: position?.after,
    limit: limit + 1,
  });
  return toPage(rows, limit, {
    codec,
    filters,
    pinned: window,
    keyOf: (row) => [row.recorded_at, row.id],
    view: toListItem,
  });
}

export interface CreateRecordInput {
  session_id: string;
  external_id?: string;
  student_id?: string;
  status: RecordStatus;
  reason?: string;
}

export function actorOf(principal: Principal): Actor {
  return { type: "user", id: principal.user.id, name: principal.user.name };
}

/** What a create's checks read: its session and its student, with the student's enrolment in the session's course. */
interface CreateTargets {
  session: { id: string; course_code: string; room: string; status: string } | undefined;
  student: { id: string; external_id: string; name: string; enrolled_in: string | null } | undefined;
}

/** A create the checks let through: its record, and the event reporting it. */
interface PlannedCreate {
  row: RecordsTable;
  record: RecordDetail;
  event: EventsTable;
}

/** The create's record and event, or the refusal it throws (no such session or student, a cancelled session, a student not enrolled). */
function planCreate(principal: Principal, input: CreateRecordInput, { session, student }: CreateTargets): PlannedCreate {
  const { livemode } = principal;
  if (!session) throw notFound("session", input.session_id, "session_id");
  if (session.status === "cancelled") {
    throw conflict("session_cancelled", `Session ${session.id} is cancelled; it takes no attendance.`, "session_id");
  }
  const studentParam = input.external_id !== undefined ? "external_id" : "student_id";
  if (!student) throw notFound("student", (input.external_id ?? input.student_id)!, studentParam);
  if (student.enrolled_in === null) {
    throw invalidParam(
      studentParam,
      `Student ${student.external_id} is not enrolled in ${session.course_code}, the course of session ${session.id}.`,
      "student_not_enrolled",
    );
  }
  const now = new Date();
  const nowText = now.toISOString();
  const row: RecordsTable = {
    id: newId("att"),
    livemode,
    session_id: session.id,
    student_id: student.id,
    course_code: session.course_code,
    status: input.status,
    recorded_at: nowText,
    method: "api",
    device_id: null,
    reason: input.reason ?? null,
    created_at: nowText,
    updated_at: nowText,
  };
  const record = toDetail(row, {
    student_external_id: student.external_id,
    student_name: student.name,
    session_room: session.room,
    device_model: null,
    history: [],
  });
  return { row, record, event: eventRow(livemode, "attendance.recorded", { object: record, actor: actorOf(principal) }, now) };
}

async function createRecord(
  trx: Transaction<Database>,
  principal: Principal,
  input: CreateRecordInput,
): Promise<StoredResponse> {
  const { livemode } = principal;
  const session = await findSession(trx, input.session_id, livemode);
  const by = { id: input.student_id, external_id: input.external_id };
  const student = session && session.status !== "cancelled" ? await store.findStudentInCourse(trx, livemode, by, session.course_code) : undefined;
  const { row, record, event } = planCreate(principal, input, { session, student });
  if (!(await store.insertRecordIfAbsent(trx, row))) {
    const existing = (await store.findRecordFor(trx, row.session_id, row.student_id))!;
    throw recordExists(record.student.external_id, row.session_id, existing);
  }
  await writeEvents(trx, [event]);
  return { status: 201, body: record };
}

const recordExists = (externalId: string, sessionId: string, existing: { id: string; status: string }) =>
  conflict(
    "record_exists",
    `Student ${externalId} already has a record in session ${sessionId}: ${existing.id} (${existing.status}). Correct it with PATCH /v1/attendance/${existing.id}.`,
  );

/** An API create as a request of the Idempotency-Key gate. */
export interface CreateRequest {
  principal: Principal;
  input: CreateRecordInput;
}

/** What a create names, as the group's read looks it up. */
const targetOf = ({ principal, input }: CreateRequest): store.CreateTarget => ({
  livemode: principal.livemode,
  sessionId: input.session_id,
  studentId: input.student_id,
  externalId: input.external_id,
});

/**
 * API creates as one grouped write (IdempotencyGate.runGrouped): on PostgreSQL a group's creates
 * are two statements whatever their number, one reading every create's session, student and
 * enrolment (the prefetch, run beside the group's Idempotency-Key reservations), one writing the
 * records, their events and every key's answer (refusals included), instead of a transaction with
 * six statements a create. A create whose student got a record
 * after the read (another request's, in this group or elsewhere) runs again alone, to answer
 * `record_exists` naming that record.
 */
export const createRecords = groupedWrite<CreateRequest>({
  operation: ({ principal, input }) => (trx) => createRecord(trx, principal, input),
  // The session, student and enrolment read beside the Idempotency-Key's reservation.
  prefetch: {
    one: async (db, request) => (await store.findCreateTargets(db, [targetOf(request)]))[0]!,
    many: (db, requests) => store.findCreateTargets(db, requests.map(targetOf)),
  },
  async many(db, requests) {
    // What the prefetch read (read again if any of it failed, or for a request run without it).
    const prefetched = await Promise.all(requests.map((request) => request.prefetched?.catch(() => undefined) as Promise<store.CreateTargetRow | undefined> | undefined));
    const found = prefetched.every((row) => row !== undefined) ? prefetched : await store.findCreateTargets(db, requests.map((request) => targetOf(request.input)));
    const plans = requests.map((request, i) => {
      const row = found[i]!;
      const targets: CreateTargets = {
        session: row.session_id === null ? undefined : { id: row.session_id, course_code: row.course_code!, room: row.room!, status: row.session_status! },
        student: row.student_id === null ? undefined : { id: row.student_id, external_id: row.external_id!, name: row.name!, enrolled_in: row.enrolled_in },
      };
      try {
        const planned = planCreate(request.input.principal, request.input.input, targets);
        return { planned, response: { status: 201, body: planned.record } };
      } catch (error) {
        return { planned: undefined, response: refusalResponse(error) };
      }
    });
    const created = plans.flatMap((plan) => (plan.planned ? [plan.planned] : []));
    const inserted = await store.insertRecordsAnswering(
      db,
      created.map((c) => c.row),
      created.map((c) => c.event),
      requests.map((request, i) => keyAnswer(request, plans[i]!.response, plans[i]!.planned?.row.id ?? null)),
    );
    return plans.map((plan) => (plan.planned && !inserted.has(plan.planned.row.id) ? RUN_ALONE : plan.response));
  },
});

export interface CorrectRecordInput {
  status: RecordStatus;
  reason: string;
}

export async function correctRecord(
  trx: Transaction<Database>,
  principal: Principal,
  id: string,
  input: CorrectRecordInput,
): Promise<StoredResponse> {
  const { livemode } = principal;
  const current = await store.findRecordForUpdate(trx, livemode, id);
  if (!current) throw notFound("attendance record", id);
  if (current.status === input.status) {
    throw invalidParam("status", `Record ${id} is already ${input.status}; a correction must change the status.`, "status_unchanged");
  }
  const now = new Date();
  const actor = actorOf(principal);
  await store.updateRecordStatus(trx, id, input.status, now.toISOString());
  await store.appendHistory(trx, {
    id: newId("hst", now.getTime()),
    record_id: id,
    at: now.toISOString(),
    from_status: current.status,
    to_status: input.status,
    reason: input.reason,
    actor_type: actor.type,
    actor_id: actor.id,
    actor_name: actor.name,
  });
  const record = await getRecord(trx, livemode, id);
  await writeEvent(
    trx,
    livemode,
    "attendance.updated",
    { object: record, from: current.status, to: input.status, previous_attributes: { status: current.status }, reason: input.reason, actor },
    now,
  );
  return { status: 200, body: record };
}

export interface CaptureInput {
  device: { id: string; name: string; model: string; livemode: Livemode };
  session: { id: string; course_code: string; room: string };
  student: { id: string; external_id: string; name: string };
  status: "present" | "late";
  /** the moment of the card tap: the record's recorded_at */
  at: Date;
}

export type CaptureOutcome = { recordId: string; effect: "created" | "took_over" | "already_marked" };

/**
 * Device captures (the card taps of one badge sync), in order, as a set, given the records they
 * touch, read and locked by the caller (recordsInWindow): the new records and their events are
 * returned for the caller to insert with its taps (insertCaptures: one statement on PostgreSQL).
 * Device captures are authoritative: a record made another way (the API) is taken over, with a history entry
 * whose actor is the device; a student already marked by a device (earlier, or by a capture
 * before this one in the set) keeps the first capture.
 */
export async function captureFromDevices(
  trx: Transaction<Database>,
  captures: CaptureInput[],
  found: readonly WindowRecord[],
): Promise<{ outcomes: CaptureOutcome[]; records: RecordsTable[]; events: EventsTable[] }> {
  const pair = (sessionId: string, studentId: string) => `${sessionId} ${studentId}`;
  const known = new Map<string, { id: string; status: string; method: string }>();
  for (const row of found) known.set(pair(row.session_id, row.student_id), row);
  const now = new Date();
  const nowText = now.toISOString();
  const records: RecordsTable[] = [];
  const events: EventsTable[] = [];
  const outcomes: CaptureOutcome[] = [];
  for (const capture of captures) {
    const { device, session, student } = capture;
    const key = pair(session.id, student.id);
    const existing = known.get(key);
    if (existing?.method === "device") {
      outcomes.push({ recordId: existing.id, effect: "already_marked" });
    } else if (existing) {
      await takeOver(trx, capture, existing, now);
      known.set(key, { ...existing, method: "device" });
      outcomes.push({ recordId: existing.id, effect: "took_over" });
    } else {
      const row: RecordsTable = {
        id: newId("att", capture.at.getTime()),
        livemode: device.livemode,
        session_id: session.id,
        student_id: student.id,
        course_code: session.course_code,
        status: capture.status,
        recorded_at: capture.at.toISOString(),
        method: "device",
        device_id: device.id,
        reason: null,
        created_at: nowText,
        updated_at: nowText,
      };
      const record = toDetail(row, {
        student_external_id: student.external_id,
        student_name: student.name,
        session_room: session.room,
        device_model: device.model,
        history: [],
      });
      records.push(row);
      events.push(eventRow(device.livemode, "attendance.recorded", { object: record, actor: deviceActor(device) }, now));
      known.set(key, { id: row.id, status: row.status, method: row.method });
      outcomes.push({ recordId: row.id, effect: "created" });
    }
  }
  return { outcomes, records, events };
}

const deviceActor = (device: CaptureInput["device"]): Actor => ({ type: "device", id: device.id, name: device.name });

/** A device capture taking over a record another method made: the change, its history entry and its event. */
async function takeOver(trx: Transaction<Database>, capture: CaptureInput, existing: { id: string; status: string; method: string }, now: Date) {
  const { device } = capture;
  const actor = deviceActor(device);
  const reason = `device capture by ${device.name} replaces the ${existing.method} mark`;
  await store.takeOverRecord(trx, existing.id, { status: capture.status, device_id: device.id, updated_at: now.toISOString() });
  await store.appendHistory(trx, {
    id: newId("hst", now.getTime()),
    record_id: existing.id,
    at: now.toISOString(),
    from_status: existing.status,
    to_status: capture.status,
    reason,
    actor_type: actor.type,
    actor_id: actor.id,
    actor_name: actor.name,
  });
  const record = await getRecord(trx, device.livemode, existing.id);
  await writeEvent(
    trx,
    device.livemode,
    "attendance.updated",
    { object: record, from: existing.status, to: capture.status, previous_attributes: { status: existing.status, method: existing.method }, reason, actor },
    now,
  );
}
