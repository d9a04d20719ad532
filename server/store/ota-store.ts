import type { Kysely } from "kysely";
import { compiledQuery } from "./compiled-query.ts";
import type { Db, FetchOutcome, Livemode, OtaFetchesTable, OtaReportsTable } from "./schema.ts";

export const insertFetch = compiledQuery((db: Db, row: OtaFetchesTable) => db.insertInto("ota_fetches").values(row));

export const finishFetch = compiledQuery((db: Db, id: string, outcome: Exclude<FetchOutcome, "sending">, bytesSent: number, now: string) =>
  db.updateTable("ota_fetches").set({ outcome, bytes_sent: bytesSent, ended_at: now }).where("id", "=", id),
);

export async function latestFetch(db: Db, deviceId: string): Promise<OtaFetchesTable | undefined> {
  return db
    .selectFrom("ota_fetches")
    .selectAll()
    .where("device_id", "=", deviceId)
    .orderBy("started_at", "desc")
    .orderBy("id", "desc")
    .limit(1)
    .executeTakeFirst();
}

export async function insertReport(db: Db, row: OtaReportsTable): Promise<void> {
  await db.insertInto("ota_reports").values(row).execute();
}

export async function latestReport(db: Db, deviceId: string): Promise<OtaReportsTable | undefined> {
  return db
    .selectFrom("ota_reports")
    .selectAll()
    .where("device_id", "=", deviceId)
    .orderBy("received_at", "desc")
    .orderBy("id", "desc")
    .limit(1)
    .executeTakeFirst();
}

/**
 * The badge's latest `ota=ok|<version>` received after `since` (a report from before a publish
 * says nothing about it), when the badge is of `livemode`: a report counts only for releases of
 * its badge's own mode.
 */
export async function latestOkReport(db: Db, livemode: Livemode, deviceId: string, version: string, since: string): Promise<OtaReportsTable | undefined> {
  return db
    .selectFrom("ota_reports as r")
    .innerJoin("devices as d", "d.id", "r.device_id")
    .selectAll("r")
    .where("d.livemode", "=", livemode)
    .where("r.device_id", "=", deviceId)
    .where("r.received_at", ">", since)
    .where("r.version", "=", version)
    .where("r.outcome", "=", "ok")
    .orderBy("r.received_at", "desc")
    .limit(1)
    .executeTakeFirst();
}

/** The latest row of every badge of one mode that has one, by the table's time column (one query for a whole fleet). */
async function latestPerDevice(db: Db, livemode: Livemode, table: "ota_fetches" | "ota_reports", time: "started_at" | "received_at") {
  // Kysely cannot type a query over either table; both have `id`, `device_id` and the time column.
  const anyDb = db as unknown as Kysely<Record<string, { id: string; device_id: string; livemode: number; started_at: string; received_at: string }>>;
  return anyDb
    .selectFrom(`${table} as t`)
    .innerJoin("devices as d", "d.id", "t.device_id")
    .selectAll("t")
    .where("d.livemode", "=", livemode)
    .where("t.id", "=", (eb) =>
      eb
        .selectFrom(`${table} as u`)
        .select("u.id")
        .whereRef("u.device_id", "=", "t.device_id")
        .orderBy(`u.${time}`, "desc")
        .orderBy("u.id", "desc")
        .limit(1),
    )
    .execute();
}

export async function latestFetchPerDevice(db: Db, livemode: Livemode): Promise<OtaFetchesTable[]> {
  return (await latestPerDevice(db, livemode, "ota_fetches", "started_at")) as unknown as OtaFetchesTable[];
}

export async function latestReportPerDevice(db: Db, livemode: Livemode): Promise<OtaReportsTable[]> {
  return (await latestPerDevice(db, livemode, "ota_reports", "received_at")) as unknown as OtaReportsTable[];
}

/** Every firmware fetch so far (all badges, both modes), by outcome: how many, and the bytes they sent. */
export async function countFetchesByOutcome(db: Db): Promise<Record<FetchOutcome, { fetches: number; bytes_sent: number }>> {
  const rows = await db
    .selectFrom("ota_fetches")
    .select((eb) => ["outcome", eb.fn.countAll().as("fetches"), eb.fn.sum("bytes_sent").as("bytes_sent")])
    .groupBy("outcome")
    .execute();
  const counts = { sending: { fetches: 0, bytes_sent: 0 }, completed: { fetches: 0, bytes_sent: 0 }, cut: { fetches: 0, bytes_sent: 0 } };
  for (const row of rows) counts[row.outcome] = { fetches: Number(row.fetches), bytes_sent: Number(row.bytes_sent) };
  return counts;
}
