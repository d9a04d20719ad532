import type { Db, Livemode } from "./schema.ts";

export async function findIdempotencyKey(db: Db, livemode: Livemode, key: string) {
  return db
    .selectFrom("idempotency_keys")
    .selectAll()
    .where("livemode", "=", livemode)
    .where("key", "=", key)
    .executeTakeFirst();
}

export async function reserveIdempotencyKey(
  db: Db,
  row: { livemode: Livemode; key: string; fingerprint: string; now: string },
): Promise<void> {
  await db
    .insertInto("idempotency_keys")
    .values({
      livemode: row.livemode,
      key: row.key,
      fingerprint: row.fingerprint,
      state: "in_flight",
      locked_at: row.now,
      status_code: null,
      response_body: null,
      created_at: row.now,
    })
    .onConflict((oc) =>
      oc.columns(["livemode", "key"]).doUpdateSet({ fingerprint: row.fingerprint, locked_at: row.now, created_at: row.now }),
    )
    .execute();
}

export async function completeIdempotencyKey(
  db: Db,
  livemode: Livemode,
  key: string,
  response: { status: number; body: unknown },
): Promise<void> {
  await db
    .updateTable("idempotency_keys")
    .set({ state: "done", status_code: response.status, response_body: JSON.stringify(response.body) })
    .where("livemode", "=", livemode)
    .where("key", "=", key)
    .execute();
}

export async function releaseIdempotencyKey(db: Db, livemode: Livemode, key: string): Promise<void> {
  await db
    .deleteFrom("idempotency_keys")
    .where("livemode", "=", livemode)
    .where("key", "=", key)
    .where("state", "=", "in_flight")
    .execute();
}

export async function purgeIdempotencyKeys(db: Db, createdBefore: string): Promise<number> {
  const result = await db.deleteFrom("idempotency_keys").where("created_at", "<", createdBefore).executeTakeFirst();
  return Number(result.numDeletedRows);
}
