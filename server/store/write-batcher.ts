// Group commit for the server's writes (the badge endpoints' and the /v1 creates and corrections
// with their Idempotency-Key reservations). With `--sync full` every acknowledged write costs a
// sync of the log; requests that arrive together (a fleet checking in, many downloads ending,
// integrators posting records) have their writes run in one transaction and pay one sync. A
// request is answered only after its own write committed and the log holding it is on disk, so
// nothing acknowledged can be lost.
import { CompiledQuery, type Kysely, type Transaction } from "kysely";
import { isLockConflict, isPostgres } from "./dialect.ts";
import type { Database } from "./schema.ts";

type Work<T> = (trx: Transaction<Database>) => Promise<T>;

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

/** Lock keys for `run`, one per kind of row a write locks first. */
export const lockKeys = {
  device: (deviceId: string) => `device:${deviceId}`,
  idempotencyKey: (livemode: number, key: string) => `idempotency:${livemode}:${key}`,
};

interface Pending {
  work: Work<unknown>;
  durable: boolean;
  lockKey: string | undefined;
  /** times it ran and lost a lock conflict */
  conflicts: number;
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
  /** idle: nothing queued; open: a group collects writes; writing: its transaction runs */
  #state: "idle" | "open" | "writing" = "idle";
  #openedAt = 0;

  /** `synced` resolves once what was committed before the call is durable (Store.logSynced). */
  constructor(db: Kysely<Database>, synced: () => Promise<void>) {
    this.#db = db;
    this.#synced = synced;
    this.#ordered = isPostgres(db);
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
    return new Promise<T>((resolve, reject) => {
      this.#pending.push({ work, durable, lockKey, conflicts: 0, resolve: resolve as (value: unknown) => void, reject });
      if (this.#state === "idle") {
        this.#state = "open";
        this.#openedAt = performance.now();
        // Let the requests already read from the sockets queue their writes first.
        setImmediate(() => this.#close());
      } else if (this.#state === "open" && performance.now() - this.#openedAt >= MAX_GROUP_WAIT_MS) {
        this.#close();
      }
    });
  }

  #close(): void {
    if (this.#state !== "open") return;
    this.#state = "writing";
    void this.#flush();
  }

  // A group is answered once the log holds its commit on disk; the next group's statements run
  // while that sync is under way.
  async #flush(): Promise<void> {
    while (this.#pending.length > 0) {
      const batch = this.#pending.splice(0);
      if (this.#ordered) batch.sort(byLockKey);
      let outcomes: Outcome[];
      try {
        outcomes = await this.#db.transaction().execute(async (trx) => {
          const out: Outcome[] = [];
          for (const item of batch) out.push(await settleInSavepoint(trx, () => item.work(trx)));
          return out;
        });
      } catch (error) {
        // The transaction itself failed (its commit, or SQLite ended it): nothing of the group
        // was written, and every write in it hears why.
        for (const item of batch) item.reject(error);
        continue;
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
    this.#state = "idle";
  }

  /** Resolves once everything committed so far is durable. */
  synced(): Promise<void> {
    return this.#synced();
  }
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
