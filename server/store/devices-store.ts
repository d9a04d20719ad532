import { compiledQuery } from "./compiled-query.ts";
import type { Db, DevicesTable, Livemode } from "./schema.ts";

export type DeviceRow = DevicesTable;

export async function insertDevice(db: Db, row: DeviceRow): Promise<void> {
  await db.insertInto("devices").values(row).execute();
}

export async function findDevice(db: Db, id: string, livemode?: Livemode): Promise<DeviceRow | undefined> {
  let query = db.selectFrom("devices").selectAll().where("id", "=", id);
  if (livemode !== undefined) query = query.where("livemode", "=", livemode);
  return query.executeTakeFirst();
}

const byTokenLookup = compiledQuery((db: Db, lookup: string) => db.selectFrom("devices").selectAll().where("token_lookup", "=", lookup));

export async function findDeviceByTokenLookup(db: Db, lookup: string): Promise<DeviceRow | undefined> {
  return (await byTokenLookup(db, lookup)).rows[0];
}

export async function listDevices(
  db: Db,
  filter: { livemode?: Livemode; room?: string; model?: string } = {},
): Promise<DeviceRow[]> {
  let query = db.selectFrom("devices").selectAll();
  if (filter.livemode !== undefined) query = query.where("livemode", "=", filter.livemode);
  if (filter.room !== undefined) query = query.where("room", "=", filter.room);
  if (filter.model !== undefined) query = query.where("model", "=", filter.model);
  return query.orderBy("created_at").orderBy("id").execute();
}

export async function revokeDevice(db: Db, id: string, now: string): Promise<DeviceRow | undefined> {
  await db.updateTable("devices").set({ revoked_at: now }).where("id", "=", id).where("revoked_at", "is", null).execute();
  return findDevice(db, id);
}

/** What a badge said about itself in a check or a sync. */
export interface DeviceReport {
  installed_version: string;
  installed_display: string | null;
  battery_volts: number | null;
  charging: Livemode | null;
}

export const recordCheck = compiledQuery((db: Db, id: string, report: DeviceReport, now: string, offeredVersion: string | null) =>
  db
    .updateTable("devices")
    .set({
      ...report,
      last_check_at: now,
      ...(offeredVersion === null ? {} : { offered_version: offeredVersion, offered_at: now }),
    })
    .where("id", "=", id),
);

export const recordSync = compiledQuery((db: Db, id: string, report: DeviceReport, now: string) =>
  db
    .updateTable("devices")
    .set({ ...report, last_sync_at: now })
    .where("id", "=", id),
);

export async function roomExists(db: Db, livemode: Livemode, code: string): Promise<boolean> {
  const row = await db
    .selectFrom("rooms")
    .select("code")
    .where("livemode", "=", livemode)
    .where("code", "=", code)
    .executeTakeFirst();
  return row !== undefined;
}
