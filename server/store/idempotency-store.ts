import { compiledQuery } from "./compiled-query.ts";
import type { Db, Livemode } from "./schema.ts";

const byKey = compiledQuery((db: Db, livemode: Livemode, key: string) =>
  db.selectFrom("idempotency_keys").selectAll().where("livemode", "=", livemode).where("key", "=", key),
);

export async function findIdempotencyKey(db: Db, livemode: Livemode, key: string) {
  return (await byKey(db, livemode, key)).rows[0];
}

const reserve = compiledQuery((db: Db, row: { livemode: Livemode; key: string; fingerprint: string; now: string; staleBefore: string }) =>
  db
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
      oc
        .columns(["livemode", "key"])
        .doUpdateSet({ fingerprint: row.fingerprint, locked_at: row.now, created_at: row.now })
        .where("idempotency_keys.state", "=", "in_flight")
        .where("idempotency_keys.locked_at", "<", row.staleBefore),
    ),
);

/**
 * Reserves the key for a request: a new key, or one whose reservation is older than
 * `staleBefore` (its process died). Returns false when the key is taken (done, or reserved
 * since), also when another server process reserved it after the caller looked: on PostgreSQL
 * the insert waits for that process's commit and then finds the key taken.
 */
export async function reserveIdempotencyKey(
  db: Db,
  row: { livemode: Livemode; key: string; fingerprint: string; now: string; staleBefore: string },
): Promise<boolean> {
  return Number((await reserve(db, row)).numAffectedRows ?? 0n) > 0;
}

const complete = compiledQuery((db: Db, livemode: Livemode, key: string, statusCode: number, responseBody: string) =>
  db
    .updateTable("idempotency_keys")
    .set({ state: "done", status_code: statusCode, response_body: responseBody })
    .where("livemode", "=", livemode)
    .where("key", "=", key),
);

export async function completeIdempotencyKey(
  db: Db,
  livemode: Livemode,
  key: string,
  response: { status: number; body: unknown },
): Promise<void> {
  await complete(db, livemode, key, response.status, JSON.stringify(response.body));
}

export const releaseIdempotencyKey = compiledQuery((db: Db, livemode: Livemode, key: string) =>
  db.deleteFrom("idempotency_keys").where("livemode", "=", livemode).where("key", "=", key).where("state", "=", "in_flight"),
);

export async function purgeIdempotencyKeys(db: Db, createdBefore: string): Promise<number> {
  const result = await db.deleteFrom("idempotency_keys").where("created_at", "<", createdBefore).executeTakeFirst();
  return Number(result.numDeletedRows);
}
