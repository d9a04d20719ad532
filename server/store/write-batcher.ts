// Group commit for the badge endpoints' small writes. With synchronous=FULL every commit costs
// an fsync; requests that arrive together (a fleet checking in, many downloads ending) have
// their writes run in one transaction and pay one fsync between them. A request is answered
// only after its own write committed, so nothing acknowledged can be lost.
import type { Kysely, Transaction } from "kysely";
import type { Database } from "./schema.ts";

type Work<T> = (trx: Transaction<Database>) => Promise<T>;

interface Pending {
  work: Work<unknown>;
  resolve(value: unknown): void;
  reject(error: unknown): void;
}

export class WriteBatcher {
  readonly #db: Kysely<Database>;
  #pending: Pending[] = [];
  #flushing = false;

  constructor(db: Kysely<Database>) {
    this.#db = db;
  }

  /** Runs `work` in a transaction shared with the writes queued alongside it; resolves after commit. */
  run<T>(work: Work<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.#pending.push({ work, resolve: resolve as (value: unknown) => void, reject });
      if (!this.#flushing) {
        this.#flushing = true;
        // Let the requests already read from the sockets queue their writes first.
        setImmediate(() => void this.#flush());
      }
    });
  }

  async #flush(): Promise<void> {
    while (this.#pending.length > 0) {
      const batch = this.#pending.splice(0);
      try {
        const results = await this.#db.transaction().execute(async (trx) => {
          const out: unknown[] = [];
          for (const item of batch) out.push(await item.work(trx));
          return out;
        });
        batch.forEach((item, i) => item.resolve(results[i]));
      } catch {
        // One failing write must not fail its neighbours: the batch was rolled back, so each
        // runs again on its own and only the failing one sees its error.
        for (const item of batch) {
          await this.#db.transaction().execute(item.work).then(item.resolve, item.reject);
        }
      }
    }
    this.#flushing = false;
  }
}
