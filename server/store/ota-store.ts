import { compiledQuery } from "./compiled-query.ts";
import type { Db, FetchOutcome, OtaFetchesTable, OtaReportsTable } from "./schema.ts";

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

export async function listFetches(db: Db, deviceId: string): Promise<OtaFetchesTable[]> {
  return db.selectFrom("ota_fetches").selectAll().where("device_id", "=", deviceId).orderBy("started_at").orderBy("id").execute();
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

/** The badge's latest `ota=ok|<version>` received after `since` (a report from before a publish says nothing about it). */
export async function latestOkReport(db: Db, deviceId: string, version: string, since: string): Promise<OtaReportsTable | undefined> {
  return db
    .selectFrom("ota_reports")
    .selectAll()
    .where("device_id", "=", deviceId)
    .where("received_at", ">", since)
    .where("version", "=", version)
    .where("outcome", "=", "ok")
    .orderBy("received_at", "desc")
    .limit(1)
    .executeTakeFirst();
}
