import { compiledQuery, rowsInsert } from "./compiled-query.ts";
import type { Db, DeviceTapsTable, Livemode, TapResult } from "./schema.ts";

/**
 * The badge's stored taps among the given cards and seconds: a superset of the taps asked for
 * (every card with every second), which the caller matches pair by pair.
 */
export const findTaps = compiledQuery((db: Db, deviceId: string, cardUids: string[], tappedAts: string[]) =>
  db
    .selectFrom("device_taps")
    .select(["card_uid", "tapped_at", "result", "reason", "session_id", "student_id", "record_id"])
    .where("device_id", "=", deviceId)
    .where("card_uid", "in", cardUids)
    .where("tapped_at", "in", tappedAts),
);

export const insertTaps = rowsInsert("device_taps", [
  "id",
  "livemode",
  "device_id",
  "card_uid",
  "tapped_at",
  "received_at",
  "result",
  "reason",
  "session_id",
  "student_id",
  "record_id",
]);

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
