import { compiledQuery, postgresStatement } from "./compiled-query.ts";
import type { Db, IdempotencyKeysTable, Livemode } from "./schema.ts";
import type { CombinableWrite } from "./write-batcher.ts";

/** Whose Idempotency-Key it is: keys are scoped to the API key that sent them (and its mode). */
export interface KeyOwner {
  livemode: Livemode;
  apiKeyId: string;
}

const byKey = compiledQuery((db: Db, livemode: Livemode, apiKeyId: string, key: string) =>
  db.selectFrom("idempotency_keys").selectAll().where("livemode", "=", livemode).where("api_key_id", "=", apiKeyId).where("key", "=", key),
);

async function findIdempotencyKey(db: Db, owner: KeyOwner, key: string) {
  return (await byKey(db, owner.livemode, owner.apiKeyId, key)).rows[0];
}

const reserve = compiledQuery(
  (db: Db, row: { livemode: Livemode; apiKeyId: string; key: string; fingerprint: string; now: string; staleBefore: string }) =>
    db
      .insertInto("idempotency_keys")
      .values({
        livemode: row.livemode,
        api_key_id: row.apiKeyId,
        key: row.key,
        fingerprint: row.fingerprint,
        state: "in_flight",
        locked_at: row.now,
        status_code: null,
        response_body: null,
        withheld: null,
        created_at: row.now,
      })
      .onConflict((oc) =>
        oc
          .columns(["livemode", "api_key_id", "key"])
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
  owner: KeyOwner,
  row: { key: string; fingerprint: string; now: string; staleBefore: string },
): Promise<boolean> {
  return Number((await reserve(db, { ...owner, ...row })).numAffectedRows ?? 0n) > 0;
}

const complete = compiledQuery(
  (db: Db, livemode: Livemode, apiKeyId: string, key: string, statusCode: number, responseBody: string, withheld: string | null) =>
    db
      .updateTable("idempotency_keys")
      .set({ state: "done", status_code: statusCode, response_body: responseBody, withheld })
      .where("livemode", "=", livemode)
      .where("api_key_id", "=", apiKeyId)
      .where("key", "=", key),
);

/** Stores the answer to replay; `withheld` names the fields whose secret it no longer holds. */
export async function completeIdempotencyKey(
  db: Db,
  owner: KeyOwner,
  key: string,
  response: { status: number; body: unknown; withheld: string[] },
): Promise<void> {
  const withheld = response.withheld.length > 0 ? JSON.stringify(response.withheld) : null;
  await complete(db, owner.livemode, owner.apiKeyId, key, response.status, JSON.stringify(response.body), withheld);
}

const release = compiledQuery((db: Db, livemode: Livemode, apiKeyId: string, key: string) =>
  db
    .deleteFrom("idempotency_keys")
    .where("livemode", "=", livemode)
    .where("api_key_id", "=", apiKeyId)
    .where("key", "=", key)
    .where("state", "=", "in_flight"),
);

export async function releaseIdempotencyKey(db: Db, owner: KeyOwner, key: string): Promise<void> {
  await release(db, owner.livemode, owner.apiKeyId, key);
}

/** A request's reservation of its Idempotency-Key; a reservation older than `staleBefore` may be taken over. */
export interface Reservation {
  owner: KeyOwner;
  key: string;
  fingerprint: string;
  now: string;
  staleBefore: string;
}

/**
 * What a reservation found: undefined when the key is now the caller's; the key's row when it is
 * taken (done, or reserved by another request); "freed" when another server process reserved it
 * and freed it again between the two statements (worth a retry).
 */
export type ReservationOutcome = IdempotencyKeysTable | undefined | "freed";

async function heldBy(db: Db, reservation: Reservation): Promise<ReservationOutcome> {
  return (await findIdempotencyKey(db, reservation.owner, reservation.key)) ?? "freed";
}

// A group's reservations on PostgreSQL, in the order given (the write batcher's lock-key order).
// Committed without waiting for the disk (synchronous_commit off for this statement's own
// transaction), as on SQLite: the reservation is seen by every instance from its commit on, which
// is what the in-flight 409 needs, and one lost in a power cut had been acknowledged to nobody;
// the log is written in order, so the synced commit of the write it reserves for makes it durable
// too. It was a second wait for the disk in every create.
const reserveMany = postgresStatement<{ livemode: Livemode; api_key_id: string; key: string }>(
  `insert into idempotency_keys (livemode, api_key_id, key, fingerprint, state, locked_at, status_code, response_body, withheld, created_at)
   select r.livemode, r.api_key_id, r.key, r.fingerprint, 'in_flight', r.now, null, null, null, r.now
   from unnest($1::int[], $2::text[], $3::text[], $4::text[], $5::text[]) with ordinality as r(livemode, api_key_id, key, fingerprint, now, n)
   where set_config('synchronous_commit', 'off', true) = 'off'
   order by r.n
   on conflict (livemode, api_key_id, key) do update set fingerprint = excluded.fingerprint, locked_at = excluded.locked_at, created_at = excluded.created_at
     where idempotency_keys.state = 'in_flight' and idempotency_keys.locked_at < $6
   returning livemode, api_key_id, key`,
);

/**
 * Reservations, which the write batcher runs on PostgreSQL (`many` runs there only) as one INSERT
 * for the group (each key reserved if free or stale; a key another request holds is read
 * afterwards, a replay's rare case). One at a time: the key's row read first, then reserved.
 */
export const reservations: CombinableWrite<Reservation, ReservationOutcome> = {
  async one(db, reservation) {
    const row = await findIdempotencyKey(db, reservation.owner, reservation.key);
    const stale = row?.state === "in_flight" && row.locked_at < reservation.staleBefore;
    if (row && !stale) return row;
    if (await reserveIdempotencyKey(db, reservation.owner, reservation)) return undefined;
    // Another server process reserved the key after the read above: its reservation decides.
    return heldBy(db, reservation);
  },
  async many(db, list) {
    const slot = (livemode: number, apiKeyId: string, key: string) => `${livemode}:${apiKeyId}:${key}`;
    const slots = list.map((r) => slot(r.owner.livemode, r.owner.apiKeyId, r.key));
    // One statement cannot take one key twice; the gate sends each key once per process, so this is a safeguard.
    if (new Set(slots).size !== slots.length) throw new Error("one Idempotency-Key twice in a group");
    // The group's earliest bound: a reservation a few milliseconds short of stale for one request waits for the next.
    const staleBefore = list.reduce((min, r) => (r.staleBefore < min ? r.staleBefore : min), list[0]!.staleBefore);
    const { rows } = await reserveMany(db, [
      list.map((r) => r.owner.livemode),
      list.map((r) => r.owner.apiKeyId),
      list.map((r) => r.key),
      list.map((r) => r.fingerprint),
      list.map((r) => r.now),
      staleBefore,
    ]);
    const reserved = new Set(rows.map((row) => slot(row.livemode, row.api_key_id, row.key)));
    const outcomes: ReservationOutcome[] = [];
    for (const [i, reservation] of list.entries()) outcomes.push(reserved.has(slots[i]!) ? undefined : await heldBy(db, reservation));
    return outcomes;
  },
};

export async function purgeIdempotencyKeys(db: Db, createdBefore: string): Promise<number> {
  const result = await db.deleteFrom("idempotency_keys").where("created_at", "<", createdBefore).executeTakeFirst();
  return Number(result.numDeletedRows);
}
