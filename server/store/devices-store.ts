import { announceChange } from "./change-feed.ts";
import { CompiledQuery, type Kysely } from "kysely";
import { compiledQuery, prepareAsHot } from "./compiled-query.ts";
import type { Database, Db, DevicesTable, Livemode } from "./schema.ts";
import type { CombinableWrite } from "./write-batcher.ts";

export type DeviceRow = DevicesTable;

/** Rows per INSERT: 18 columns each stays under SQLite's 32,766 and PostgreSQL's 65,535 parameters. */
const DEVICES_PER_INSERT = 500;

/**
 * Inserts the rows, a few hundred per statement: all or none. One statement is atomic already;
 * more run in a transaction, the caller's when `db` is one.
 */
export async function insertDevices(db: Kysely<Database>, rows: DeviceRow[]): Promise<void> {
  const insertAll = async (into: Kysely<Database>) => {
    for (let first = 0; first < rows.length; first += DEVICES_PER_INSERT) {
      await into.insertInto("devices").values(rows.slice(first, first + DEVICES_PER_INSERT)).execute();
    }
  };
  if (rows.length <= DEVICES_PER_INSERT || db.isTransaction) await insertAll(db);
  else await db.transaction().execute(insertAll);
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

/** Revokes the badge's token; every server's cached device principals are emptied (change-feed.ts). */
export async function revokeDevice(db: Db, id: string, now: string): Promise<DeviceRow | undefined> {
  return announceChange(db, async (trx) => {
    await trx.updateTable("devices").set({ revoked_at: now }).where("id", "=", id).where("revoked_at", "is", null).execute();
    return findDevice(trx, id);
  });
}

/** What a badge said about itself in a check or a sync. */
export interface DeviceReport {
  installed_version: string;
  installed_display: string | null;
  battery_volts: number | null;
  charging: Livemode | null;
}

// A check is answered before its record commits (services/ota-offer.ts), so its record may reach
// the row after a later check or sync of the same badge (a record retried after a lost deadlock,
// or the sync served by another instance): a record older than what the row holds is dropped,
// never written over newer status.
export const recordCheck = compiledQuery((db: Db, id: string, report: DeviceReport, now: string, offeredVersion: string | null) =>
  db
    .updateTable("devices")
    .set({
      ...report,
      last_check_at: now,
      ...(offeredVersion === null ? {} : { offered_version: offeredVersion, offered_at: now }),
    })
    .where("id", "=", id)
    .where((eb) => eb(eb.fn.coalesce("last_check_at", eb.val("")), "<=", now))
    .where((eb) => eb(eb.fn.coalesce("last_sync_at", eb.val("")), "<=", now)),
);

/** One check's record: the badge, what it reported, when, and the version offered to it (null: none). */
export interface CheckRecord {
  id: string;
  report: DeviceReport;
  now: string;
  offeredVersion: string | null;
}

// The checks of a group as one UPDATE on PostgreSQL: one array per column, unnested into rows.
// The rows come sorted by badge so that every instance takes the rows in one order.
const RECORD_CHECKS_SQL = `update devices set
  installed_version = c.installed_version,
  installed_display = c.installed_display,
  battery_volts = c.battery_volts,
  charging = c.charging,
  last_check_at = c.checked_at,
  offered_version = coalesce(c.offered_version, devices.offered_version),
  offered_at = case when c.offered_version is null then devices.offered_at else c.checked_at end
from (
  select * from unnest($1::text[], $2::text[], $3::text[], $4::float8[], $5::int4[], $6::text[], $7::text[])
    as t(id, installed_version, installed_display, battery_volts, charging, checked_at, offered_version)
  order by id
) as c
where devices.id = c.id
  and coalesce(devices.last_check_at, '') <= c.checked_at
  and coalesce(devices.last_sync_at, '') <= c.checked_at`;
prepareAsHot(RECORD_CHECKS_SQL);

/**
 * A check's write on its badge's devices row; the write batcher runs a group of them on
 * PostgreSQL as one statement (`many`, one round trip for the group, no transaction).
 */
export const checkRecords: CombinableWrite<CheckRecord> = {
  one: async (db, check) => void (await recordCheck(db, check.id, check.report, check.now, check.offeredVersion)),
  async many(db, checks) {
    // A badge twice in one group (a retry racing its first check): its newest check is kept, as one after the other would.
    const newest = new Map<string, CheckRecord>();
    for (const check of checks) {
      const kept = newest.get(check.id);
      if (!kept || kept.now <= check.now) newest.set(check.id, check);
    }
    const last = [...newest.values()];
    const column = <T>(pick: (check: CheckRecord) => T) => last.map(pick);
    await db.executeQuery(
      CompiledQuery.raw(RECORD_CHECKS_SQL, [
        column((c) => c.id),
        column((c) => c.report.installed_version),
        column((c) => c.report.installed_display),
        column((c) => c.report.battery_volts),
        column((c) => c.report.charging),
        column((c) => c.now),
        column((c) => c.offeredVersion),
      ]),
    );
    return checks.map(() => undefined);
  },
};

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

/** How many badges have checked in and were offered `version` (in both modes). */
export async function countDevicesOffered(db: Db, version: string): Promise<number> {
  const row = await db
    .selectFrom("devices")
    .select((eb) => eb.fn.countAll().as("n"))
    .where("last_check_at", "is not", null)
    .where("offered_version", "=", version)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}
