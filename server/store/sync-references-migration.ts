// Migration 0013 (issue 27): on PostgreSQL, the foreign keys of the rows a badge sync writes
// dropped, apart from migrations.ts, which would otherwise pass 500 lines; migrations.ts lists it
// under its name like the others.
//
// `device_taps.device_id` and `records.device_id` name the badge whose sync (or whose capture
// taking a record over) writes the row: the authenticated principal, whose devices row the same
// transaction has already updated (recordSync, the first statement of every sync) and so holds
// locked to its commit. `records.session_id` and `records.student_id` name rows its writer read
// first: a sync in its own transaction (the room's sessions, the cards' students), an API create
// through findCreateTargets or findStudentInCourse. No code deletes a device, a session or a
// student, or changes an id (a revoked badge keeps its row, a cancelled session too). So these
// checks could never fail, yet PostgreSQL ran each as a query of its own for every row, share-
// locking the referenced row (a lock written into the row and the log): 120 a 30-tap sync,
// 16.6% of its backends' CPU in a sync phase (`perf`, issue 27), and the sessions row of every
// record share-locked by every group writing one.
//
// SQLite keeps them: it cannot drop a constraint without copying the table anew (the store's two
// largest), and its check is one lookup in the same process. As every suite runs on SQLite, a
// change that starts deleting devices, sessions or students, or writing a record from ids it did
// not read, still meets the check there.
import { sql, type Kysely } from "kysely";
import { isPostgres } from "./dialect.ts";

export async function dropSyncReferences(db: Kysely<any>): Promise<void> {
  if (!isPostgres(db)) return;
  await sql`alter table device_taps drop constraint device_taps_device_id_fkey`.execute(db);
  for (const column of ["device_id", "session_id", "student_id"]) {
    await sql`alter table records drop constraint ${sql.id(`records_${column}_fkey`)}`.execute(db);
  }
}
