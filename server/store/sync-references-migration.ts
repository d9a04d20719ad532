// Migration 0013 (issue 27): the foreign keys from a badge sync's rows to the badge dropped on
// PostgreSQL, apart from migrations.ts, which would otherwise pass 500 lines; migrations.ts lists
// it under its name like the others.
//
// `device_taps.device_id` and `records.device_id` name the badge whose sync (or whose capture
// taking a record over) writes the row: the authenticated principal, whose devices row the same
// transaction has already updated (recordSync, the first statement of every sync) and so holds
// locked to its commit, and no code deletes a device or changes its id (a revoked badge keeps
// its row). The check could never fail, yet PostgreSQL ran it as a query of its own for every
// row: 60 a 30-tap sync, about a twelfth of PostgreSQL's CPU in a sync (`perf` of its backends,
// issue 27). The other references (records to sessions and students) stay: a record's session and
// student are rows its writer read without a lock, and the check is what keeps a record from
// naming one that is not there.
//
// SQLite keeps them: it cannot drop a constraint without copying the table anew (the store's two
// largest), and its check is one lookup in the same process, of a page it has just written.
import { sql, type Kysely } from "kysely";
import { isPostgres } from "./dialect.ts";

export async function dropSyncDeviceReferences(db: Kysely<any>): Promise<void> {
  if (!isPostgres(db)) return;
  await sql`alter table device_taps drop constraint device_taps_device_id_fkey`.execute(db);
  await sql`alter table records drop constraint records_device_id_fkey`.execute(db);
}
