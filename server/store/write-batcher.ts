// Group commit for the server's writes (the badge endpoints' and the /v1 creates and corrections
// with their Idempotency-Key reservations). With `--sync full` every acknowledged write costs a
// sync of the log; requests that arrive together (a fleet checking in, many downloads ending,
// integrators posting records) have their writes run in one transaction and pay one sync. A
// request is answered only after its own write committed and the log holding it is on disk, so
// nothing acknowledged can be lost. The one write answered ahead of its commit is a badge check's
// record of the badge's status (services/ota-offer.ts): nothing is acknowledged by it.
import { CompiledQuery, type Kysely, type Transaction } from "kysely";
import { noteCommitted } from "./change-feed.ts";
import { isLockConflict, isPostgres, isRefusedAfterFailure } from "./dialect.ts";
import { transaction } from "./pipelined-transaction.ts";
import type { Database, Db } from "./schema.ts";

type Work<T> = (trx: Transaction<Database>) => Promise<T>;

/**
 * A write of a kind whose writes a group on PostgreSQL runs together as one multi-row statement
 * (a fleet's checks: one UPDATE of every badge's devices row; Idempotency-Key reservations: one
 * INSERT; attendance creates: reads, then one statement writing records, events and keys'
 * answers). `many` gets the group's arguments in lock-key order, answers each one's result in
 * that order, and must be atomic by itself (one statement, with reads before or after it). A
 * write it could not decide it answers RUN_ALONE: that write runs again as `one`, in a
 * transaction of its own.
 */
export interface CombinableWrite<A, R = void> {
  one(db: Db, args: A): Promise<R>;
  many(db: Db, args: readonly A[]): Promise<(R | RunAlone)[]>;
}

/** `CombinableWrite.many`'s answer for a write it leaves to `one`. */
export const RUN_ALONE: unique symbol = Symbol("run alone");
export type RunAlone = typeof RUN_ALONE;

/**
 * The longest a write waits for neighbours to join its group. A group normally closes once the
 * event loop has read every request that is ready (setImmediate); when a thousand requests are
 * ready at once, reading them all takes longer than anyone should wait, so the group closes as
 * soon as its first write has waited this long, and the rest form the next group.
 */
export const MAX_GROUP_WAIT_MS = 5;

/**
 * How many times a write that lost a lock conflict runs again before its request hears of it (as
 * a 503). On PostgreSQL, two instances' groups can take the same rows in different orders (the
 * same badges checking in on both); PostgreSQL then ends one statement with `deadlock detected`.
 */
export const LOCK_CONFLICT_RETRIES = 5;

/**
 * Groups written at once on PostgreSQL, each a transaction on a connection of its own. A group's
 * statements are network round trips, each waiting on PostgreSQL: with one group at a time an
 * instance waited on latency with its CPU and PostgreSQL's idle (issue 14's figures). Groups
 * take rows in lock-key order like every instance's, so they do not deadlock on the rows locked
 * first, and what they still conflict on is retried. SQLite has one writer: one group at a time.
 */
export const POSTGRES_CONCURRENT_GROUPS = 4;

/** Lock keys for `run`, one per kind of row a write locks first. */
export const lockKeys = {
  device: (deviceId: string) => `device:${deviceId}`,
  idempotencyKey: (livemode: number, apiKeyId: string, key: string) => `idempotency:${livemode}:${apiKeyId}:${key}`,
};

interface Pending {
  work: Work<unknown>;
  durable: boolean;
  lockKey: string | undefined;
  /** times it ran and lost a lock conflict */
  conflicts: number;
  /** a write that may run combined with its kind's others; dropped once a combined statement failed */
  combinable?: { write: CombinableWrite<unknown, unknown>; args: unknown };
  resolve(value: unknown): void;
  reject(error: unknown): void;
}

type Outcome = { value: unknown } | { error: unknown };

export class WriteBatcher {
  readonly #db: Kysely<Database>;
  readonly #synced: () => Promise<void>;
  /** on PostgreSQL, where other instances lock rows too, a group runs in lock-key order */
  readonly #ordered: boolean;
  #pending: Pending[] = [];
  /** the groups whose transaction (or combined statement) runs now, at most #maxGroups */
  #writing = 0;
  readonly #maxGroups: number;
  /** the group collecting writes, if one is: when its first write arrived */
  #collecting: { openedAt: number } | undefined;
  /** the lock keys of the groups being written now (a key is in one group at most: #writeReady) */
  readonly #keysWriting = new Set<string>();
  /** the writes queued with `answeredAhead`, until each settles */
  readonly #answeredAhead = new Set<Promise<unknown>>();

  /** `synced` resolves once what was committed before the call is durable (Store.logSynced). */
  constructor(db: Kysely<Database>, synced: () => Promise<void>) {
    this.#db = db;
    this.#synced = synced;
    this.#ordered = isPostgres(db);
    this.#maxGroups = this.#ordered ? POSTGRES_CONCURRENT_GROUPS : 1;
  }

  /**
   * Runs `work` in a transaction shared with the writes queued alongside it; resolves once the
   * commit is durable. If `work` throws, what it wrote is undone (its neighbours' writes stay)
   * and the promise rejects with that error once the group has committed. `{ durable: false }`
   * resolves at the commit itself, for a write nobody is told about (an Idempotency-Key
   * reservation: other processes see it from the commit on, and losing it in a power cut loses
   * no acknowledged write). `lockKey` names the row `work` locks first (a device, an
   * Idempotency-Key); see `byLockKey`.
   */
  run<T>(work: Work<T>, { durable = true, lockKey }: { durable?: boolean; lockKey?: string } = {}): Promise<T> {
    return this.#queue({ work, durable, lockKey, conflicts: 0 }) as Promise<T>;
  }

  /**
   * `write.one(args)` as `run` runs it, except that on PostgreSQL the writes of this kind in a
   * group run as one statement (`write.many`) outside any transaction: one round trip for them,
   * no BEGIN, savepoints or COMMIT, since a single statement is atomic already (the group's other
   * writes run in its transaction). If that statement fails for another reason than a lock
   * conflict, its writes run again one by one, so each hears only of its own failure.
   */
  runCombinable<A, R>(
    write: CombinableWrite<A, R>,
    args: A,
    { lockKey, durable = true, answeredAhead = false }: { lockKey?: string; durable?: boolean; answeredAhead?: boolean } = {},
  ): Promise<R> {
    const combinable = { write: write as CombinableWrite<unknown, unknown>, args };
    const written = this.#queue({ work: (trx) => write.one(trx, args), durable, lockKey, conflicts: 0, combinable }) as Promise<R>;
    if (answeredAhead) {
      this.#answeredAhead.add(written);
      const settle = () => void this.#answeredAhead.delete(written);
      written.then(settle, settle);
    }
    return written;
  }

  /**
   * Resolves once every write queued with `answeredAhead` (its caller answered before the write
   * committed: a badge's check) before the call has settled. A read on this instance awaits it
   * first, so it sees what was answered before it; on another instance a read may see it one
   * group commit later.
   */
  answeredAheadSettled(): Promise<void> {
    if (this.#answeredAhead.size === 0) return Promise.resolve();
    return Promise.allSettled([...this.#answeredAhead]).then(() => undefined);
  }

  #queue(item: Omit<Pending, "resolve" | "reject">): Promise<unknown> {
    return new Promise((resolve, reject) => {
      this.#pending.push({ ...item, resolve, reject });
      const collecting = this.#collecting;
      if (collecting) {
        if (performance.now() - collecting.openedAt >= MAX_GROUP_WAIT_MS) this.#close(collecting);
      } else if (this.#writing < this.#maxGroups) {
        const opened = { openedAt: performance.now() };
        this.#collecting = opened;
        // Let the requests already read from the sockets queue their writes first.
        setImmediate(() => this.#close(opened));
      }
      // Otherwise every group slot is writing: the first to finish takes what waits.
    });
  }

  #close(group: { openedAt: number }): void {
    if (this.#collecting !== group) return;
    this.#collecting = undefined;
    this.#writeReady();
  }

  /**
   * Starts a group of the pending writes whose lock key no group being written holds. A write of
   * a badge (or Idempotency-Key) another group of this instance is writing waits for that group
   * to end instead of joining a group of its own that would wait on PostgreSQL for the row's lock,
   * holding its connection and the locks of its other writes meanwhile: the same badge syncing
   * twice at once made every group wait on the one before it (issue 27's profile: most of a
   * sync's time was its devices UPDATE waiting for another group's commit).
   */
  #writeReady(): void {
    const ready: Pending[] = [];
    const held: Pending[] = [];
    for (const item of this.#pending) (item.lockKey !== undefined && this.#keysWriting.has(item.lockKey) ? held : ready).push(item);
    this.#pending = held;
    if (ready.length === 0) return;
    for (const part of splitByLockKey(ready, Math.max(1, this.#maxGroups - this.#writing))) void this.#write(part);
  }

  // A group is answered once the log holds its commit on disk; the next group's statements run
  // while that sync is under way. A group that ends takes the writes that waited for a slot or
  // for its lock keys.
  async #write(batch: Pending[]): Promise<void> {
    this.#writing += 1;
    const keys = [...new Set(batch.map((item) => item.lockKey).filter((key) => key !== undefined))];
    for (const key of keys) this.#keysWriting.add(key);
    try {
      await this.#flushGroup(batch);
    } finally {
      this.#writing -= 1;
      for (const key of keys) this.#keysWriting.delete(key);
    }
    if (this.#pending.length > 0 && this.#collecting === undefined) this.#writeReady();
  }

  async #flushGroup(batch: Pending[]): Promise<void> {
    if (this.#ordered) {
      batch.sort(byLockKey);
      batch = await this.#runCombined(batch);
      if (batch.length === 0) return;
    }
    let outcomes: Outcome[];
    let group: Transaction<Database> | undefined;
    try {
      outcomes = await transaction(this.#db, async (trx) => {
        group = trx;
        const out: Outcome[] = [];
        for (const item of batch) out.push(await settleInSavepoint(trx, () => item.work(trx)));
        return out;
      });
    } catch (error) {
      if (batch.length > 1 && isPipelinedFailure(error)) {
        // One write left the transaction failed where its release went out with a neighbour's
        // statement, so which write failed is not known: each runs again in a transaction of
        // its own, and only that write hears of its failure.
        for (const item of batch) await this.#flushGroup([item]);
        return;
      }
      // The transaction itself failed (its commit, or SQLite ended it): nothing of the group
      // was written, and every write in it hears why.
      for (const item of batch) item.reject(error);
      return;
    } finally {
      // Before any write of the group is answered: no cache of this process keeps a row read
      // before the commit of a change announced in the group (a rollout moved, a badge revoked).
      if (group) noteCommitted(group);
    }
    const synced = batch.some((item, i) => item.durable && "value" in outcomes[i]!) ? this.#synced() : undefined;
    batch.forEach((item, i) => {
      const outcome = outcomes[i]!;
      if ("error" in outcome && isLockConflict(outcome.error) && item.conflicts < LOCK_CONFLICT_RETRIES) {
        // Its savepoint is rolled back and its locks released; it runs again in the next
        // group, a new transaction, once the transaction it lost to has gone on.
        item.conflicts += 1;
        this.#pending.push(item);
        return;
      }
      // A failed write wrote nothing, so it waits for no sync.
      if ("error" in outcome) item.reject(outcome.error);
      else if (!item.durable) item.resolve(outcome.value);
      else synced!.then(() => item.resolve(outcome.value), item.reject);
    });
  }

  /**
   * Runs each kind of combinable write of the group as its one statement (PostgreSQL, where a
   * commit is durable when it returns); returns the writes left for the group's transaction: the
   * others, and a combinable write whose lock key one of those has (one key's writes keep their
   * order). A group of creates and the reservations of the next requests, arriving together,
   * was a transaction of a dozen statements a write; it is a statement per kind.
   */
  async #runCombined(batch: Pending[]): Promise<Pending[]> {
    const keysInTransaction = new Set(batch.filter((item) => item.combinable === undefined).map((item) => item.lockKey));
    const kinds = new Map<CombinableWrite<unknown, unknown>, Pending[]>();
    const rest: Pending[] = [];
    for (const item of batch) {
      const write = item.combinable?.write;
      if (write === undefined || keysInTransaction.has(item.lockKey)) rest.push(item);
      else if (kinds.has(write)) kinds.get(write)!.push(item);
      else kinds.set(write, [item]);
    }
    // Each kind's statement on a connection of its own, at once: they take different rows (a
    // key's reservation and the write it reserved for are never in one group).
    await Promise.all([...kinds].map(([write, items]) => this.#runKind(write, items)));
    return rest;
  }

  /**
   * One kind's writes as its one statement. A statement that failed otherwise than by a lock
   * conflict puts its writes back to run one by one, as does a write the statement left to `one`.
   */
  async #runKind(write: CombinableWrite<unknown, unknown>, items: Pending[]): Promise<void> {
    let results: unknown[];
    try {
      results = await write.many(this.#db, items.map((item) => item.combinable!.args));
    } catch (error) {
      if (isLockConflict(error)) {
        for (const item of items) {
          if (item.conflicts++ < LOCK_CONFLICT_RETRIES) this.#pending.push(item);
          else item.reject(error);
        }
      } else {
        for (const item of items) item.combinable = undefined;
        this.#pending.unshift(...items);
      }
      return;
    }
    const alone: Pending[] = [];
    items.forEach((item, i) => {
      if (results[i] !== RUN_ALONE) return item.resolve(results[i]);
      item.combinable = undefined;
      alone.push(item);
    });
    this.#pending.unshift(...alone);
  }

  /** Whether a group's combinable writes run as one statement per kind (`many`, PostgreSQL) rather than as `one`. */
  get combinesKinds(): boolean {
    return this.#ordered;
  }

  /** Resolves once everything committed so far is durable. */
  synced(): Promise<void> {
    return this.#synced();
  }
}

/**
 * A group's writes as at most `parts` groups written at once (PostgreSQL): the writes of one lock
 * key in one part, the transaction writes' keys spread over the parts in arrival order, and the
 * rest (combinable writes of keys no transaction write has, writes without a key) in the first,
 * so each kind of combinable write stays one statement. A group's transaction runs its writes
 * one after the other, each several round trips: ten badges syncing at once in one group waited
 * for each other's round trips where they touch no common row.
 */
function splitByLockKey(batch: Pending[], parts: number): Pending[][] {
  if (parts <= 1) return [batch];
  const transactionKeys = new Set(batch.flatMap((item) => (item.combinable === undefined && item.lockKey !== undefined ? [item.lockKey] : [])));
  const partOfKey = new Map<string, number>();
  const split: Pending[][] = Array.from({ length: parts }, () => []);
  for (const item of batch) {
    const key = item.lockKey;
    if (key === undefined || !transactionKeys.has(key)) {
      split[0]!.push(item);
      continue;
    }
    let part = partOfKey.get(key);
    if (part === undefined) partOfKey.set(key, (part = partOfKey.size % parts));
    split[part]!.push(item);
  }
  return split.filter((part) => part.length > 0);
}

/**
 * The order a group's writes run in on PostgreSQL: those without a lock key first, in arrival
 * order, then by lock key. (SQLite has no row locks and one writer; there a group runs in arrival
 * order, which keeps an event written after an endpoint's creation in the same group after it.)
 * Every server process orders its groups alike, so two instances' transactions take the
 * rows that requests lock first (the same badges checking in on both) in the same order and do
 * not deadlock on them; a conflict over rows taken later is retried (LOCK_CONFLICT_RETRIES). The
 * sort is stable: one key's writes keep their arrival order.
 */
function byLockKey(a: Pending, b: Pending): number {
  if (a.lockKey === b.lockKey) return 0;
  if (a.lockKey === undefined) return -1;
  if (b.lockKey === undefined) return 1;
  return a.lockKey < b.lockKey ? -1 : 1;
}

const SAVEPOINT = {
  open: CompiledQuery.raw("savepoint batched_work"),
  release: CompiledQuery.raw("release batched_work"),
  rollback: CompiledQuery.raw("rollback to batched_work"),
};

/**
 * The statements that on PostgreSQL go out with the statement after them instead of costing a
 * round trip each (database.ts): opening and releasing a write's savepoint, which cannot fail in
 * a transaction still healthy. Rolling back to it follows a failure and is sent at once.
 */
export const PIPELINED_STATEMENTS: ReadonlySet<string> = new Set([SAVEPOINT.open.sql, SAVEPOINT.release.sql]);

const pipelinedFailures = new WeakSet<object>();

/** Marks `error` as a pipelined savepoint statement's (database.ts); returns it. */
export function markPipelinedFailure(error: unknown): unknown {
  if (typeof error === "object" && error !== null) pipelinedFailures.add(error);
  return error;
}

/** Whether a group's transaction failed on a savepoint statement sent with a later write's. */
const isPipelinedFailure = (error: unknown): boolean => typeof error === "object" && error !== null && pipelinedFailures.has(error);

/**
 * Steps of one write run at once, so their statements go out together (pipelined on PostgreSQL:
 * one round trip where they were one each). Every step is waited for before a failure passes on:
 * a step still running must not send a statement after the write's savepoint was rolled back.
 * The failure passed on is the one that failed the transaction: a step listed earlier may have
 * sent a statement after it, which PostgreSQL refused for that, and its error would hide a lock
 * conflict (retried) or a timeout (a 503) behind a refusal (a 500).
 */
export async function together<T extends readonly unknown[]>(...steps: { [K in keyof T]: Promise<T[K]> }): Promise<T> {
  const outcomes = await Promise.allSettled(steps);
  const failures = outcomes.flatMap((outcome) => (outcome.status === "rejected" ? [outcome.reason as unknown] : []));
  if (failures.length > 0) throw failures.find((error) => !isRefusedAfterFailure(error)) ?? failures[0];
  return outcomes.map((outcome) => (outcome as PromiseFulfilledResult<unknown>).value) as unknown as T;
}

/**
 * Runs `work` under a savepoint of the shared transaction: if it throws, its own changes are
 * undone and the error passes on, while the writes of its neighbours in the group stay.
 */
export async function inSavepoint<T>(trx: Transaction<Database>, work: () => Promise<T>): Promise<T> {
  const outcome = await settleInSavepoint(trx, work);
  if ("error" in outcome) throw outcome.error;
  return outcome.value as T;
}

/**
 * `work` under a savepoint: what it returned, or what it threw with its changes undone. Throws
 * only when the savepoint cannot be rolled back, that is when SQLite has ended the transaction
 * (a full disk, an I/O error): the failure is then the whole transaction's, not this work's.
 */
async function settleInSavepoint(trx: Transaction<Database>, work: () => Promise<unknown>): Promise<Outcome> {
  await trx.executeQuery(SAVEPOINT.open);
  try {
    const value = await work();
    await trx.executeQuery(SAVEPOINT.release);
    return { value };
  } catch (error) {
    await trx.executeQuery(SAVEPOINT.rollback);
    await trx.executeQuery(SAVEPOINT.release);
    return { error };
  }
}
