// Idempotent writes, Stripe-style: the first response for a key (status and body, business
// failures included) is stored in the same transaction as the write and replayed to every
// retry. Reusing a key with another request is refused (422). A key reserved by a request that
// is still running elsewhere (another server process) gets 409; within this process, a retry
// that arrives while the first attempt runs waits for it and gets the same response, so a
// burst of identical retries yields one write and identical answers.
// Keys belong to the API key that sent them (as Stripe scopes them to the credential): another
// API key sending the same value gets its own execution. A secret an answer shows once (a
// webhook signing secret, an API key, a device token) is not stored with it: a replay carries
// null in its place and names the field (`withheld`).
import { createHash } from "node:crypto";
import type { Transaction } from "kysely";
import { ApiError } from "../errors.ts";
import type { KeyAnswer } from "../store/attendance-store.ts";
import type { Database, Db } from "../store/schema.ts";
import * as store from "../store/idempotency-store.ts";
import type { KeyOwner } from "../store/idempotency-store.ts";
import { inSavepoint, lockKeys, type CombinableWrite, type RunAlone, type WriteBatcher } from "../store/write-batcher.ts";

export interface StoredResponse {
  status: number;
  body: unknown;
}

export interface IdempotentResult extends StoredResponse {
  replayed: boolean;
  /** fields of a replayed answer whose shown-once secret was withheld (null in the body) */
  withheld: string[];
}

export type Operation = (trx: Transaction<Database>) => Promise<StoredResponse>;

/** A reservation older than this belongs to a process that died mid-request; it may be taken over. */
export const STALE_RESERVATION_MS = 60_000;
/** How long a completed key is kept and replayed. */
export const KEY_RETENTION_MS = 24 * 60 * 60 * 1000;
export const MAX_KEY_LENGTH = 255;

/** The prefixes of the secrets an answer shows once (newSigningSecret, newSecret's callers). */
const SHOWN_ONCE = /^(whsec_|sk_(test|live)_|dtk_(test|live)_)/;

/** The answer as stored for replays: every top-level field holding a shown-once secret set to null. */
function withholdSecrets(response: StoredResponse): StoredResponse & { withheld: string[] } {
  const { body } = response;
  if (body === null || typeof body !== "object" || Array.isArray(body)) return { ...response, withheld: [] };
  const withheld = Object.entries(body).flatMap(([field, value]) => (typeof value === "string" && SHOWN_ONCE.test(value) ? [field] : []));
  if (withheld.length === 0) return { ...response, withheld };
  return { status: response.status, body: { ...body, ...Object.fromEntries(withheld.map((field) => [field, null])) }, withheld };
}

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

/** The response a refusal makes (a business failure is a response too, stored and replayed); any other error passes on. */
export function refusalResponse(error: unknown): StoredResponse {
  if (error instanceof ApiError && error.status < 500) return { status: error.status, body: error.toBody() };
  throw error;
}

/**
 * The operation's response: what it returns, or the refusal it throws, with whatever it wrote
 * before refusing undone.
 */
async function respond(trx: Transaction<Database>, operation: Operation): Promise<StoredResponse> {
  try {
    return await inSavepoint(trx, () => operation(trx));
  } catch (error) {
    return refusalResponse(error);
  }
}

/** A request of a grouped write: whose key, the key and its fingerprint, what it asks, and what its `prefetch` read. */
export interface KeyedRequest<I> {
  owner: KeyOwner;
  key: string;
  /** the request's fingerprint, as its reservation holds it */
  fingerprint: string;
  input: I;
  /** the grouped write's `prefetch` of this request, when it has one (PostgreSQL): undefined when its read failed; may reject */
  prefetched?: Promise<unknown>;
}

/**
 * A kind of write whose requests arriving together run on PostgreSQL as a few statements for the
 * whole group (attendance creates), instead of a transaction with a savepoint per request.
 * `operation` is one request's write, as `run` runs it (SQLite, or a group of mixed writes).
 * `many` answers a group's requests and must write each answer with its key (`keyAnswer`) in
 * the statement that writes what the answer reports, so a request is answered only with what
 * committed; a request it cannot decide alone (a record written meanwhile) it answers RUN_ALONE,
 * and that request runs again as `operation`, in a transaction of its own.
 */
export interface GroupedWrite<I> {
  operation(input: I): Operation;
  many(db: Db, requests: readonly KeyedRequest<I>[]): Promise<(StoredResponse | RunAlone)[]>;
  /**
   * A read `many` needs, run on PostgreSQL beside the request's Idempotency-Key reservation
   * instead of after it (the requests arriving together read as one statement): one round trip
   * less for each request. Read outside any transaction, as `many` would read it.
   */
  prefetch?: CombinableWrite<I, unknown>;
}

/** A grouped write as the write batcher runs it: with the read it may run beside the reservation. */
export type GroupedCombinable<I> = CombinableWrite<KeyedRequest<I>, StoredResponse> & { prefetch?: CombinableWrite<I, unknown> };

/** The operation's response, stored as its key's answer in the same transaction. */
async function answer(trx: Transaction<Database>, owner: KeyOwner, key: string, operation: Operation): Promise<StoredResponse> {
  const result = await respond(trx, operation);
  await store.completeIdempotencyKey(trx, owner, key, withholdSecrets(result));
  return result;
}

/** A grouped write as the write batcher runs it (IdempotencyGate.runGrouped): one request in the group's transaction, or the group's `many`. */
export function groupedWrite<I>(write: GroupedWrite<I>): GroupedCombinable<I> {
  return {
    one: (trx, request) => answer(trx as Transaction<Database>, request.owner, request.key, write.operation(request.input)),
    many: (db, requests) => write.many(db, requests),
    prefetch: write.prefetch && answeringFailures(write.prefetch),
  };
}

/**
 * A prefetch whose group statement answers `undefined` for each read when it fails, rather than
 * failing: the write batcher would run a failed statement's reads again one by one in a later
 * group's transaction, after that group's `many` statements, and a `many` there waiting for the
 * read (its request's, queued once the reservation was made) would wait forever, holding the
 * group. `many` reads for itself what it was not given.
 */
function answeringFailures<I>(prefetch: CombinableWrite<I, unknown>): CombinableWrite<I, unknown> {
  return { one: prefetch.one, many: (db, inputs) => prefetch.many(db, inputs).catch(() => inputs.map(() => undefined)) };
}

/** A key's answer as `many` stores it (the shown-once secrets withheld, as every stored answer); `recordId`: stored only if that record is. */
export function keyAnswer(request: KeyedRequest<unknown>, response: StoredResponse, recordId: string | null): KeyAnswer {
  const stored = withholdSecrets(response);
  return {
    livemode: request.owner.livemode,
    apiKeyId: request.owner.apiKeyId,
    key: request.key,
    fingerprint: request.fingerprint,
    statusCode: stored.status,
    responseBody: JSON.stringify(stored.body),
    withheld: stored.withheld.length > 0 ? JSON.stringify(stored.withheld) : null,
    recordId,
  };
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

  run(owner: KeyOwner, key: string, fingerprint: string, operation: Operation): Promise<IdempotentResult> {
    return this.#run(owner, key, fingerprint, (lockKey) => this.#writes.run((trx) => answer(trx, owner, key, operation), { lockKey }));
  }

  /** `run` for a grouped write's request (`groupedWrite`): on PostgreSQL, requests arriving together share its `many`. */
  runGrouped<I>(owner: KeyOwner, key: string, fingerprint: string, write: GroupedCombinable<I>, input: I): Promise<IdempotentResult> {
    const { prefetch } = write;
    // Only where `many` runs: elsewhere the request runs as its operation, which reads for itself.
    const read = prefetch && this.#writes.combinesKinds ? () => this.#writes.runCombinable(prefetch, input, { durable: false }) : undefined;
    return this.#run(owner, key, fingerprint, (lockKey, prefetched) => this.#writes.runCombinable(write, { owner, key, fingerprint, input, prefetched }, { lockKey }), read);
  }

  async #run(
    owner: KeyOwner,
    key: string,
    fingerprint: string,
    write: (lockKey: string, prefetched?: Promise<unknown>) => Promise<StoredResponse>,
    prefetch?: () => Promise<unknown>,
  ): Promise<IdempotentResult> {
    const slot = `${owner.livemode}:${owner.apiKeyId}:${key}`;
    const running = this.#running.get(slot);
    if (running) {
      if (running.fingerprint !== fingerprint) throw reused(key);
      return { ...withholdSecrets(await running.done), replayed: true };
    }
    let result: IdempotentResult | undefined;
    const done = this.#execute(owner, key, fingerprint, write, prefetch).then((executed) => {
      result = executed;
      return { status: executed.status, body: executed.body };
    });
    this.#running.set(slot, { fingerprint, done });
    try {
      await done;
      return result!;
    } finally {
      this.#running.delete(slot);
    }
  }

  // Two group-committed steps: the reservation commits first, so another server process sees
  // the key in flight (409) while the write runs; then the write, its response and the key's
  // completion commit together. Requests arriving together share each step's transaction. Only
  // the second waits for the disk: a reservation is visible from its commit on, and one lost in a
  // power cut had been acknowledged to nobody.
  async #execute(
    owner: KeyOwner,
    key: string,
    fingerprint: string,
    write: (lockKey: string, prefetched?: Promise<unknown>) => Promise<StoredResponse>,
    prefetch?: () => Promise<unknown>,
  ): Promise<IdempotentResult> {
    const now = new Date();
    const lockKey = lockKeys.idempotencyKey(owner.livemode, owner.apiKeyId, key);
    const staleBefore = new Date(now.getTime() - STALE_RESERVATION_MS).toISOString();
    const reservation = { owner, key, fingerprint, now: now.toISOString(), staleBefore };
    const prefetched = prefetch?.();
    // A replay or a refused key never reads it, and `many` handles its failure.
    prefetched?.catch(() => {});
    const existing = await this.#writes.runCombinable(store.reservations, reservation, { durable: false, lockKey });
    if (existing === "freed") throw inUse(key);
    if (existing) {
      if (existing.fingerprint !== fingerprint) throw reused(key);
      if (existing.state === "in_flight") throw inUse(key);
      // The stored response may come from a commit whose log sync is still under way.
      await this.#writes.synced();
      const withheld = existing.withheld === null ? [] : (JSON.parse(existing.withheld) as string[]);
      return { status: existing.status_code!, body: JSON.parse(existing.response_body!), replayed: true, withheld };
    }
    try {
      const response = await write(lockKey, prefetched);
      return { ...response, replayed: false, withheld: [] };
    } catch (error) {
      // An unexpected failure wrote nothing; free the key so the client's retry can run.
      await this.#writes.run((trx) => store.releaseIdempotencyKey(trx, owner, key), { lockKey });
      throw error;
    }
  }

  async purgeExpired(now = Date.now()): Promise<number> {
    return this.#writes.run((trx) => store.purgeIdempotencyKeys(trx, new Date(now - KEY_RETENTION_MS).toISOString()));
  }
}
