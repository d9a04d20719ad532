// Transactions whose statements go out as soon as they are made. Kysely runs a transaction's
// statements one at a time (each waits for the one before it to be answered), so the steps a
// write sends together (`together` in write-batcher.ts: a badge sync's devices UPDATE beside its
// reads) cost a round trip each all the same. On
// PostgreSQL the pool's connections run in pg's pipeline mode (database.ts), which writes a
// statement as soon as it is made and hands the answers back in order: the write batcher's group
// transactions run here, on a connection whose statements no Kysely queue makes wait for the
// answers before them (database.ts still holds back BEGIN and the savepoints to go with the next).
import { CompiledQuery, Transaction, type DatabaseConnection, type Dialect, type Kysely } from "kysely";
import type { Database } from "./schema.ts";

const pipelined = new WeakMap<Kysely<Database>, { dialect: Dialect; driver: ReturnType<Dialect["createDriver"]> }>();

/** Marks `db` (opened with `dialect`, whose connections take statements while others are answered) as running `transaction` pipelined. */
export function pipelineTransactionsOf(db: Kysely<Database>, dialect: Dialect): void {
  // The driver is what a Transaction's props must name; a Transaction never uses it.
  pipelined.set(db, { dialect, driver: dialect.createDriver() });
}

const BEGIN = CompiledQuery.raw("begin");
const COMMIT = CompiledQuery.raw("commit");
const ROLLBACK = CompiledQuery.raw("rollback");

/**
 * `db.transaction().execute(work)`, with the statements `work` runs at once sent at once where
 * `db` allows it (PostgreSQL). As Kysely's: committed if `work` resolves, rolled back if it
 * throws (a failed commit is rolled back too, and the error passes on).
 */
export async function transaction<T>(db: Kysely<Database>, work: (trx: Transaction<Database>) => Promise<T>): Promise<T> {
  const props = pipelined.get(db);
  if (props === undefined) return db.transaction().execute(work);
  const executor = db.getExecutor();
  // The pool's connection for the transaction, released once it ended; its statements are not
  // queued one after the other as Kysely's single-connection provider queues them.
  return executor.provideConnection(async (connection: DatabaseConnection) => {
    const trx = new Transaction<Database>({
      config: { dialect: props.dialect },
      ...props,
      executor: executor.withConnectionProvider({ provideConnection: (consume) => consume(connection) }),
    });
    let begun = false;
    try {
      await connection.executeQuery(BEGIN);
      begun = true;
      const result = await work(trx);
      await connection.executeQuery(COMMIT);
      return result;
    } catch (error) {
      if (begun) await connection.executeQuery(ROLLBACK);
      throw error;
    }
  });
}
