// Idempotent writes, Stripe-style: the first response for a key (status and body, business
// failures included) is stored in the same transaction as the write and replayed to every
// retry. Reusing a key with another request is refused (422). A key reserved by a request that
// is still running elsewhere (another server process) gets 409; within this process, a retry
// that arrives while the first attempt runs waits for it and gets the same response, so a
// burst of identical retries yields one write and identical answers.
import { createHash } from "node:crypto";
import type { Transaction } from "kysely";
import { ApiError } from "../errors.ts";
import type { Database, Livemode } from "../store/schema.ts";
import * as store from "../store/idempotency-store.ts";
import { inSavepoint, lockKeys, type WriteBatcher } from "../store/write-batcher.ts";

export interface StoredResponse {
  status: number;
  body: unknown;
}

export interface IdempotentResult extends StoredResponse {
  replayed: boolean;
}

export type Operation = (trx: Transaction<Database>) => Promise<StoredResponse>;

/** A reservation older than this belongs to a process that died mid-request; it may be taken over. */
export const STALE_RESERVATION_MS = 60_000;
/** How long a completed key is kept and replayed. */
export const KEY_RETENTION_MS = 24 * 60 * 60 * 1000;
export const MAX_KEY_LENGTH = 255;

function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

export function requestFingerprint(method: string, path: string, body: unknown): string {
  return createHash("sha256").update(`${method} ${path}\n${canonicalJson(body ?? null)}`).digest("hex");
}

/**
 * The operation's response: what it returns, or the refusal it throws (a business failure is a
 * response too, stored and replayed), with whatever it wrote before refusing undone.
 */
async function respond(trx: Transaction<Database>, operation: Operation): Promise<StoredResponse> {
  try {
    return await inSavepoint(trx, () => operation(trx));
  } catch (error) {
    if (error instanceof ApiError && error.status < 500) return { status: error.status, body: error.toBody() };
    throw error;
  }
}

const reused = (key: string) =>
  new ApiError(
    422,
    "idempotency_error",
    "idempotency_key_reused",
    `Idempotency-Key '${key}' was already used with a different request. Use a new key for a different request.`,
  );

const inUse = (key: string) =>
  new ApiError(
    409,
    "idempotency_error",
    "idempotency_key_in_use",
    `A request with Idempotency-Key '${key}' is still being processed. Retry after it completes.`,
    { headers: { "Retry-After": "1" } },
  );

export class IdempotencyGate {
  readonly #writes: WriteBatcher;
  readonly #running = new Map<string, { fingerprint: string; done: Promise<StoredResponse> }>();

  constructor(writes: WriteBatcher) {
    this.#writes = writes;
  }

  async run(livemode: Livemode, key: string, fingerprint: string, operation: Operation): Promise<IdempotentResult> {
    const slot = `${livemode}:${key}`;
    const running = this.#running.get(slot);
    if (running) {
      if (running.fingerprint !== fingerprint) throw reused(key);
      return { ...(await running.done), replayed: true };
    }
    let replayed = false;
    const done = this.#execute(livemode, key, fingerprint, operation).then((result) => {
      replayed = result.replayed;
      return { status: result.status, body: result.body };
    });
    this.#running.set(slot, { fingerprint, done });
    try {
      return { ...(await done), replayed };
    } finally {
      this.#running.delete(slot);
    }
  }

  // Two group-committed steps: the reservation commits first, so another server process sees
  // the key in flight (409) while the write runs; then the write, its response and the key's
  // completion commit together. Requests arriving together share each step's transaction. Only
  // the second waits for the disk: a reservation is visible from its commit on, and one lost in a
  // power cut had been acknowledged to nobody.
  async #execute(livemode: Livemode, key: string, fingerprint: string, operation: Operation): Promise<IdempotentResult> {
    const now = new Date();
    const lockKey = lockKeys.idempotencyKey(livemode, key);
    const existing = await this.#writes.run(async (trx) => {
      const row = await store.findIdempotencyKey(trx, livemode, key);
      const staleBefore = new Date(now.getTime() - STALE_RESERVATION_MS).toISOString();
      const stale = row?.state === "in_flight" && row.locked_at < staleBefore;
      if (row && !stale) return row;
      if (await store.reserveIdempotencyKey(trx, { livemode, key, fingerprint, now: now.toISOString(), staleBefore })) return undefined;
      // Another server process reserved the key after the read above: its reservation decides
      // (gone again only if that process failed and freed it just now: worth a retry).
      const winner = await store.findIdempotencyKey(trx, livemode, key);
      if (!winner) throw inUse(key);
      return winner;
    }, { durable: false, lockKey });
    if (existing) {
      if (existing.fingerprint !== fingerprint) throw reused(key);
      if (existing.state === "in_flight") throw inUse(key);
      // The stored response may come from a commit whose log sync is still under way.
      await this.#writes.synced();
      return { status: existing.status_code!, body: JSON.parse(existing.response_body!), replayed: true };
    }
    try {
      const response = await this.#writes.run(async (trx) => {
        const result = await respond(trx, operation);
        await store.completeIdempotencyKey(trx, livemode, key, result);
        return result;
      }, { lockKey });
      return { ...response, replayed: false };
    } catch (error) {
      // An unexpected failure wrote nothing; free the key so the client's retry can run.
      await this.#writes.run((trx) => store.releaseIdempotencyKey(trx, livemode, key), { lockKey });
      throw error;
    }
  }

  async purgeExpired(now = Date.now()): Promise<number> {
    return this.#writes.run((trx) => store.purgeIdempotencyKeys(trx, new Date(now - KEY_RETENTION_MS).toISOString()));
  }
}
