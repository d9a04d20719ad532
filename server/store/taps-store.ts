import { insertRecords } from "./attendance-store.ts";
import { compiledQuery, postgresStatement, rowsInsert } from "./compiled-query.ts";
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

const TAP_COLUMNS = ["id", "livemode", "device_id", "card_uid", "tapped_at", "received_at", "result", "reason", "session_id", "student_id", "record_id"] as const;
const RECORD_COLUMNS = ["id", "livemode", "session_id", "student_id", "course_code", "status", "recorded_at", "method", "device_id", "reason", "created_at", "updated_at"] as const;
const EVENT_COLUMNS = ["id", "livemode", "type", "created_at", "payload"] as const;

export const insertTaps = rowsInsert("device_taps", TAP_COLUMNS);

// A sync's new records, their events and its taps as one statement over array parameters: one
// executor, one plan per connection whatever the counts, where three inserts of 30 rows each were
// three statements of up to 360 parameters. (`livemode` is the only integer column of the three.)
const arraysOf = (columns: readonly string[], first: number) =>
  columns.map((column, i) => `$${first + i}::${column === "livemode" ? "int" : "text"}[]`).join(", ");
const eventGuard = postgresEventGuard(`$${RECORD_COLUMNS.length + 2}`);
const capturesInserted = postgresStatement(
  `with recorded as (
     insert into records (${RECORD_COLUMNS.join(", ")})
     select * from unnest(${arraysOf(RECORD_COLUMNS, 1)})
   ), ${eventGuard.cte}, evented as (
     insert into events (id, livemode, type, created_at, payload, dispatched_at)
     select e.id, e.livemode, e.type, e.created_at, e.payload, ${eventGuard.dispatched}
     from unnest(${arraysOf(EVENT_COLUMNS, RECORD_COLUMNS.length + 1)}) as e(${EVENT_COLUMNS.join(", ")})
     ${eventGuard.join}
   )
   insert into device_taps (${TAP_COLUMNS.join(", ")})
   select * from unnest(${arraysOf(TAP_COLUMNS, RECORD_COLUMNS.length + EVENT_COLUMNS.length + 1)})`,
);

/**
 * A sync's writes: the records its taps made, their events (written dispatched when the mode has
 * no enabled endpoint, as insertEvents writes them) and the taps; one statement on PostgreSQL.
 */
export async function insertCaptures(db: Db, records: readonly RecordsTable[], events: readonly EventsTable[], taps: readonly DeviceTapsTable[]): Promise<void> {
  if (isPostgres(db)) {
    const columnsOf = <Row>(rows: readonly Row[], columns: readonly (keyof Row)[]) => columns.map((column) => rows.map((row) => row[column] ?? null));
    await capturesInserted(db, [...columnsOf(records, RECORD_COLUMNS), ...columnsOf(events, EVENT_COLUMNS), ...columnsOf(taps, TAP_COLUMNS)]);
    return;
  }
  if (records.length > 0) {
    await insertRecords(db, records);
    await insertEvents(db, events);
  }
  if (taps.length > 0) await insertTaps(db, taps);
}

/**
 * The sessions in `room` that a tap between two moments can belong to: started (or starting
 * within the early margin, already added to `startsBy`) by `startsBy` and not ended before
 * `endsFrom`; latest start first.
 */
export const sessionsInRoom = compiledQuery((db: Db, livemode: Livemode, room: string, startsBy: string, endsFrom: string) =>
  db
    .selectFrom("sessions")
    .select(["id", "course_code", "room", "starts_at", "ends_at", "status"])
    .where("livemode", "=", livemode)
    .where("room", "=", room)
    .where("starts_at", "<=", startsBy)
    .where("ends_at", ">=", endsFrom)
    .orderBy("starts_at", "desc")
    .orderBy("id", "desc"),
);

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
