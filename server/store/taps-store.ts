import type { Db, DeviceTapsTable, Livemode, TapResult } from "./schema.ts";

export async function findTap(db: Db, deviceId: string, cardUid: string, tappedAt: string) {
  return db
    .selectFrom("device_taps")
    .select(["result", "reason", "session_id", "student_id", "record_id"])
    .where("device_id", "=", deviceId)
    .where("card_uid", "=", cardUid)
    .where("tapped_at", "=", tappedAt)
    .executeTakeFirst();
}

export async function insertTap(db: Db, row: DeviceTapsTable): Promise<void> {
  await db.insertInto("device_taps").values(row).execute();
}

/**
 * The session in `room` a tap at `at` belongs to: one that has started (or starts within
 * `earlyMs`) and has not ended; of several, the one that started last.
 */
export async function sessionAt(db: Db, livemode: Livemode, room: string, at: Date, earlyMs: number) {
  return db
    .selectFrom("sessions")
    .select(["id", "course_code", "room", "starts_at", "status"])
    .where("livemode", "=", livemode)
    .where("room", "=", room)
    .where("starts_at", "<=", new Date(at.getTime() + earlyMs).toISOString())
    .where("ends_at", ">=", at.toISOString())
    .orderBy("starts_at", "desc")
    .limit(1)
    .executeTakeFirst();
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
