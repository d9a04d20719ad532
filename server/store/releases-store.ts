// The database release store's rows: images (inserted once, never updated or deleted, shared by
// both modes) and one manifest row per mode. The publish lock (one for both modes, so two
// publishes never insert the same image at once) is the only dialect-specific part, kept here.
import { sql } from "kysely";
import { isPostgres } from "./dialect.ts";
import type { Db, Livemode, ReleaseImagesTable } from "./schema.ts";

/** The advisory lock key of publish and promote on PostgreSQL ("badger" in ASCII). */
const RELEASES_LOCK_KEY = 0x626164676572;
const LOCK_RETRY_MS = 25;

/** The manifest's current revision (undefined before the first publish): one short row read. */
export async function manifestRevision(db: Db, livemode: Livemode): Promise<string | undefined> {
  const row = await db.selectFrom("release_manifests").select("revision").where("livemode", "=", livemode).executeTakeFirst();
  return row?.revision;
}

export function readManifestRow(db: Db, livemode: Livemode): Promise<{ revision: string; body: string } | undefined> {
  return db.selectFrom("release_manifests").select(["revision", "body"]).where("livemode", "=", livemode).executeTakeFirst();
}

/** Replaces the manifest; call it holding the publish lock, in the transaction that stored its images. */
export async function writeManifestRow(trx: Db, livemode: Livemode, row: { revision: string; body: string; updatedAt: string }): Promise<void> {
  const values = { revision: row.revision, body: row.body, updated_at: row.updatedAt };
  await trx
    .insertInto("release_manifests")
    .values({ livemode, ...values })
    .onConflict((oc) => oc.column("livemode").doUpdateSet(values))
    .execute();
}

export function findImage(db: Db, file: string): Promise<Pick<ReleaseImagesTable, "sha256" | "size" | "body"> | undefined> {
  return db.selectFrom("release_images").select(["sha256", "size", "body"]).where("file", "=", file).executeTakeFirst();
}

/** An image's recorded hash, without its bytes. */
export async function imageSha256(db: Db, file: string): Promise<string | undefined> {
  const row = await db.selectFrom("release_images").select("sha256").where("file", "=", file).executeTakeFirst();
  return row?.sha256;
}

export async function insertImage(trx: Db, image: ReleaseImagesTable): Promise<void> {
  await trx
    .insertInto("release_images")
    .values({ ...image, body: Buffer.from(image.body.buffer, image.body.byteOffset, image.body.byteLength) })
    .execute();
}

/**
 * Takes the publish lock for the rest of `trx`, waiting at most `waitMs`; false when another
 * publish still holds it. PostgreSQL: a transaction-level advisory lock, released by the commit
 * or rollback (so a killed publisher never leaves it behind), tried rather than waited on so the
 * transaction is not aborted by a timeout. SQLite: the write transaction (BEGIN IMMEDIATE, see
 * database.ts) already excludes every other writer of the file, so there is nothing more to take.
 */
export async function lockReleases(trx: Db, waitMs: number): Promise<boolean> {
  if (!isPostgres(trx)) return true;
  const deadline = Date.now() + waitMs;
  for (;;) {
    const { rows } = await sql<{ locked: boolean }>`select pg_try_advisory_xact_lock(${RELEASES_LOCK_KEY}) as locked`.execute(trx);
    if (rows[0]!.locked) return true;
    if (Date.now() >= deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, LOCK_RETRY_MS));
  }
}
