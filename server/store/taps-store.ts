import { insertRecords, RECORD_COLUMNS } from "./attendance-store.ts";
import { columnArrays, compiledQuery, everyColumnOf, postgresStatement, rowsInsert } from "./compiled-query.ts";
import { isPostgres } from "./dialect.ts";
import type { Db, DeviceTapsTable, EventsTable, Livemode, RecordsTable, TapResult } from "./schema.ts";
import { insertEvents, postgresEventGuard } from "./webhooks-store.ts";

const tapsAmong = compiledQuery((db: Db, deviceId: string, cardUids: string[], tappedAts: string[]) =>
  db
    .selectFrom("device_taps")
    .select(["card_uid", "tapped_at", "result", "reason", "session_id", "student_id", "record_id"])
    .where("device_id", "=", deviceId)
    .where("card_uid", "in", cardUids)
    .where("tapped_at", "in", tappedAts),
);

type StoredTap = Pick<DeviceTapsTable, "card_uid" | "tapped_at" | "result" | "reason" | "session_id" | "student_id" | "record_id">;

// One lookup of the unique key (badge, card, second) per tap, whatever PostgreSQL's statistics
// say: planned from statistics taken while `device_taps` was small, the IN lists read every
// tap of the badge and filtered them (about 4 ms a sync, growing with the badge's taps).
const tapsOfKeys = postgresStatement<StoredTap>(
  `select t.card_uid, t.tapped_at, t.result, t.reason, t.session_id, t.student_id, t.record_id
   from unnest($2::text[], $3::text[]) as wanted(card_uid, tapped_at)
   cross join lateral (
     select * from device_taps
     where device_taps.device_id = $1 and device_taps.card_uid = wanted.card_uid and device_taps.tapped_at = wanted.tapped_at
   ) as t`,
);

/**
 * The badge's stored taps among the given (card, second) pairs; on SQLite a superset (every
 * card with every second), which the caller matches pair by pair.
 */
export async function findTaps(db: Db, deviceId: string, taps: readonly { cardUid: string; tappedAt: string }[]) {
  if (isPostgres(db)) return tapsOfKeys(db, [deviceId, taps.map((t) => t.cardUid), taps.map((t) => t.tappedAt)]);
  return tapsAmong(db, deviceId, [...new Set(taps.map((t) => t.cardUid))], [...new Set(taps.map((t) => t.tappedAt))]);
}

const TAP_COLUMNS = everyColumnOf<"device_taps">()(["id", "livemode", "device_id", "card_uid", "tapped_at", "received_at", "result", "reason", "session_id", "student_id", "record_id"]);
/** An event's columns but its payload, which goes apart (capturesInserted). */
const EVENT_COLUMNS = ["id", "livemode", "type", "created_at"] as const;

export const insertTaps = rowsInsert("device_taps", TAP_COLUMNS);

// A sync's new records, their events and its taps as one statement over array parameters: one
// executor, one plan per connection whatever the counts, where three inserts of 30 rows each were
// three statements of up to 360 parameters. (`livemode` is the only integer column of the three.)
// The events' payloads, JSON already, go as one JSON array, whose elements PostgreSQL hands back
// as they were written: as a text array each payload's every quote was escaped by pg (a tenth
// of the server's CPU in a sync) and unescaped by PostgreSQL.
const arrayTypeOf = (column: string) => `${column === "livemode" ? "int" : "text"}[]`;
const arraysOf = (columns: readonly string[], first: number) => columns.map((column, i) => `$${first + i}::${arrayTypeOf(column)}`).join(", ");
const eventGuard = postgresEventGuard(`$${RECORD_COLUMNS.length + 2}`);
const PAYLOADS = RECORD_COLUMNS.length + EVENT_COLUMNS.length + 1;
const capturesInserted = postgresStatement(
  `with recorded as (
     insert into records (${RECORD_COLUMNS.join(", ")})
     select * from unnest(${arraysOf(RECORD_COLUMNS, 1)})
   ), ${eventGuard.cte}, evented as (
     insert into events (id, livemode, type, created_at, payload, dispatched_at)
     select e.id, e.livemode, e.type, e.created_at, e.payload::text, ${eventGuard.dispatched}
     from rows from (${EVENT_COLUMNS.map((column, i) => `unnest($${RECORD_COLUMNS.length + 1 + i}::${arrayTypeOf(column)})`).join(", ")}, json_array_elements($${PAYLOADS}::json))
       as e(${EVENT_COLUMNS.join(", ")}, payload)
     ${eventGuard.join}
   )
   insert into device_taps (${TAP_COLUMNS.join(", ")})
   select * from unnest(${arraysOf(TAP_COLUMNS, PAYLOADS + 1)})`,
);

/**
 * A sync's writes: the records its taps made, their events (written dispatched when the mode has
 * no enabled endpoint, as insertEvents writes them) and the taps; one statement on PostgreSQL.
 */
export async function insertCaptures(db: Db, records: readonly RecordsTable[], events: readonly EventsTable[], taps: readonly DeviceTapsTable[]): Promise<void> {
  if (isPostgres(db)) {
    const payloads = `[${events.map((event) => event.payload).join(",")}]`;
    await capturesInserted(db, [...columnArrays(records, RECORD_COLUMNS), ...columnArrays(events, EVENT_COLUMNS), payloads, ...columnArrays(taps, TAP_COLUMNS)]);
    return;
  }
  if (records.length > 0) {
    await insertRecords(db, records);
    await insertEvents(db, events);
  }
  if (taps.length > 0) await insertTaps(db, taps);
}

/**
 * Where and when a sync's taps were made: the badge's mode and room, and the moments a session
 * must have started by (the latest tap plus the early margin) and not ended before (the earliest).
 */
export interface TapWindow {
  livemode: Livemode;
  room: string;
  startsBy: string;
  endsFrom: string;
}

/** The sessions in the window's room that a tap of the window can belong to. */
const windowSessions = (db: Db, w: TapWindow) =>
  db.selectFrom("sessions").where("livemode", "=", w.livemode).where("room", "=", w.room).where("starts_at", "<=", w.startsBy).where("ends_at", ">=", w.endsFrom);

const studentsWithCards = (db: Db, livemode: Livemode, cardUids: string[]) =>
  db.selectFrom("students").select("id").where("livemode", "=", livemode).where("card_uid", "in", cardUids);

/** The sessions a tap of the window can belong to, latest start first. */
export const sessionsInRoom = compiledQuery((db: Db, w: TapWindow) =>
  windowSessions(db, w).select(["id", "course_code", "room", "starts_at", "ends_at", "status"]).orderBy("starts_at", "desc").orderBy("id", "desc"),
);

/**
 * The enrolments of the students holding `cardUids` in the courses of the window's sessions: a
 * superset of those a sync's taps need, read with the cards and sessions rather than after them
 * (a round trip fewer), which the caller matches pair by pair.
 */
export const enrolmentsInWindow = compiledQuery((db: Db, w: TapWindow, cardUids: string[]) =>
  db
    .selectFrom("enrollments")
    .select(["course_code", "student_id"])
    .where("livemode", "=", w.livemode)
    .where("course_code", "in", windowSessions(db, w).select("course_code"))
    .where("student_id", "in", studentsWithCards(db, w.livemode, cardUids)),
);

/** A record found by recordsInWindow. */
export type WindowRecord = Pick<RecordsTable, "id" | "session_id" | "student_id" | "status" | "method">;

const recordsAmong = compiledQuery((db: Db, w: TapWindow, cardUids: string[]) =>
  db
    .selectFrom("records")
    .select(["id", "session_id", "student_id", "status", "method"])
    .where("session_id", "in", windowSessions(db, w).select("id"))
    .where("student_id", "in", studentsWithCards(db, w.livemode, cardUids)),
);

// One lookup of the unique key (session, student) per pair of a window's session and a card's
// student, whatever PostgreSQL's statistics say: planned from statistics taken while `records`
// was small, `session_id IN (...) AND student_id IN (...)` read every record of the session and
// filtered by student (1-9 ms a sync, growing with the session). Rows are locked in (session,
// student) order, the order every instance locks records in (API creates insert in it too).
const recordsOfPairs = postgresStatement<WindowRecord>(
  `select r.id, r.session_id, r.student_id, r.status, r.method
   from (
     select s.id as session_id, st.id as student_id
     from sessions s cross join students st
     where s.livemode = $1 and s.room = $2 and s.starts_at <= $3 and s.ends_at >= $4
       and st.livemode = $1 and st.card_uid = any($5::text[])
     order by s.id, st.id
   ) as wanted
   cross join lateral (
     select id, session_id, student_id, status, method from records
     where records.session_id = wanted.session_id and records.student_id = wanted.student_id
     for update
   ) as r`,
);

/**
 * The records of the students holding `cardUids` in the window's sessions, locked until the
 * transaction ends (as findRecordForUpdate): a superset of those a sync's captures touch, read
 * with the cards and sessions rather than after them (a round trip fewer), and locked all the
 * same (services/badge-sync.ts answerTaps says what that costs a replay).
 */
export async function recordsInWindow(db: Db, w: TapWindow, cardUids: string[]) {
  if (isPostgres(db)) return recordsOfPairs(db, [w.livemode, w.room, w.startsBy, w.endsFrom, cardUids]);
  return recordsAmong(db, w, cardUids);
}

export interface TapFilter {
  livemode: Livemode;
  result?: TapResult;
  device_id?: string;
  /** keyset position: only rows after (received_at, id) */
  after?: [string, string];
  limit: number;
}

export async function listTaps(db: Db, filter: TapFilter): Promise<DeviceTapsTable[]> {
  let query = db.selectFrom("device_taps").selectAll().where("livemode", "=", filter.livemode);
  if (filter.result !== undefined) query = query.where("result", "=", filter.result);
  if (filter.device_id !== undefined) query = query.where("device_id", "=", filter.device_id);
  if (filter.after !== undefined) {
    const after = filter.after;
    query = query.where((eb) => eb(eb.refTuple("received_at", "id"), ">", eb.tuple(after[0], after[1])));
  }
  return query.orderBy("received_at").orderBy("id").limit(filter.limit).execute();
}

/** How many stored taps have `result`, over every badge and both modes. */
export async function countTapsByResult(db: Db, result: TapResult): Promise<number> {
  const row = await db.selectFrom("device_taps").select((eb) => eb.fn.countAll().as("n")).where("result", "=", result).executeTakeFirstOrThrow();
  return Number(row.n);
}
