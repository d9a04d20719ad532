// Group commit for the server's writes (the badge endpoints' and the /v1 creates and corrections
// with their Idempotency-Key reservations). With `--sync full` every acknowledged write costs a
// sync of the log; requests that arrive together (a fleet checking in, many downloads ending,
// integrators posting records) have their writes run in one transaction and pay one sync. A
// request is answered only after its own write committed and the log holding it is on disk, so
// nothing acknowledged can be lost.
import { CompiledQuery, type Kysely, type Transaction } from "kysely";
import type { Database } from "./schema.ts";

type Work<T> = (trx: Transaction<Database>) => Promise<T>;

interface Pending {
  work: Work<unknown>;
  durable: boolean;
  resolve(value: unknown): void;
  reject(error: unknown): void;
}

export class WriteBatcher {
  readonly #db: Kysely<Database>;
  readonly #synced: () => Promise<void>;
  #pending: Pending[] = [];
  #flushing = false;

  /** `synced` resolves once what was committed before the call is durable (Store.logSynced). */
  constructor(db: Kysely<Database>, synced: () => Promise<void>) {
    this.#db = db;
    this.#synced = synced;
  }

  /**
   * Runs `work` in a transaction shared with the writes queued alongside it; resolves once the
   * commit is durable. `{ durable: false }` resolves at the commit itself, for a write nobody is
   * told about (an Idempotency-Key reservation: other processes see it from the commit on, and
   * losing it in a power cut loses no acknowledged write).
   */
  run<T>(work: Work<T>, { durable = true }: { durable?: boolean } = {}): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.#pending.push({ work, durable, resolve: resolve as (value: unknown) => void, reject });
      if (!this.#flushing) {
        this.#flushing = true;
        // Let the requests already read from the sockets queue their writes first.
        setImmediate(() => void this.#flush());
      }
    });
  }

  // A group is answered once the log holds its commit on disk; the next group's statements run
  // while that sync is under way.
  async #flush(): Promise<void> {
    while (this.#pending.length > 0) {
      const batch = this.#pending.splice(0);
      try {
        const results = await this.#db.transaction().execute(async (trx) => {
          const out: unknown[] = [];
          for (const item of batch) out.push(await item.work(trx));
          return out;
        });
        batch.forEach((item, i) => {
          if (!item.durable) item.resolve(results[i]);
        });
        const durable = batch.filter((item) => item.durable);
        if (durable.length > 0) {
          this.#synced().then(
            () => batch.forEach((item, i) => item.durable && item.resolve(results[i])),
            (error: unknown) => durable.forEach((item) => item.reject(error)),
          );
        }
      } catch {
        // One failing write must not fail its neighbours: the batch was rolled back, so each
        // runs again on its own and only the failing one sees its error.
        for (const item of batch) {
          await this.#db
            .transaction()
            .execute(item.work)
            .then(async (result) => {
              if (item.durable) await this.#synced();
              item.resolve(result);
            }, item.reject)
            .catch(item.reject);
        }
      }
    }
    this.#flushing = false;
  }

  /** Resolves once everything committed so far is durable. */
  synced(): Promise<void> {
    return this.#synced();
  }
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
  await trx.executeQuery(SAVEPOINT.open);
  try {
    const result = await work();
    await trx.executeQuery(SAVEPOINT.release);
    return result;
  } catch (error) {
    await trx.executeQuery(SAVEPOINT.rollback);
    await trx.executeQuery(SAVEPOINT.release);
    throw error;
  }
}
