// A fresh PostgreSQL database for one test file, created on the tests' PostgreSQL server
// (postgres-admin.ts) under the caller's prefix and a random part (a test passes its run's
// testDatabasePrefix, so what a file that died left is dropped with the run) and dropped
// afterwards, with the migrations applied, and any number of Kysely clients on it, each over a
// pool of its own as another server instance would have: for the suites that test a store's
// queries from several clients at once.
import { randomBytes } from "node:crypto";
import { Kysely, PostgresDialect, type KyselyConfig } from "kysely";
import pg from "pg";
import { migrateToLatest } from "../../server/store/migrations.ts";
import type { Database } from "../../server/store/schema.ts";
import { createDatabase, databaseUrl, dropDatabase, withAdminDatabase } from "../../server/store/postgres-admin.ts";
import { TEST_POSTGRES_URL } from "./postgres-admin.ts";

export interface MultiClientDatabase {
  name: string;
  url: string;
  /** A new Kysely over its own pool: each one is a separate client, as another server instance would be. */
  connect(config?: Pick<KyselyConfig, "log">): Kysely<Database>;
  /** Closes every connection opened with connect() and drops the database. */
  drop(): Promise<void>;
}

export async function createMultiClientDatabase(namePrefix: string): Promise<MultiClientDatabase> {
  const name = `${namePrefix}${randomBytes(6).toString("hex")}`;
  await withAdminDatabase(TEST_POSTGRES_URL, (db) => createDatabase(db, name));
  const url = databaseUrl(TEST_POSTGRES_URL, name);
  const opened: Kysely<Database>[] = [];
  const connect = (config: Pick<KyselyConfig, "log"> = {}) => {
    const pool = new pg.Pool({ connectionString: url, max: 4 });
    // An idle client whose connection the server ends (drop's `with (force)` while the pool is
    // still closing) is an 'error' event on the pool, which would be an uncaught exception without
    // a listener; the pool discards that client, and the tests see every failure through queries.
    pool.on("error", () => undefined);
    const db = new Kysely<Database>({ ...config, dialect: new PostgresDialect({ pool }) });
    opened.push(db);
    return db;
  };
  const first = connect();
  await migrateToLatest(first);
  return {
    name,
    url,
    connect,
    async drop() {
      await Promise.all(opened.map((db) => db.destroy()));
      await withAdminDatabase(TEST_POSTGRES_URL, (db) => dropDatabase(db, name));
    },
  };
}
