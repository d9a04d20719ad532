// Which store the server tests run on. `npm test` runs the store-touching suites twice
// (vitest.config.ts): once on SQLite, once with BADGEBENCH_TEST_STORE=postgres, where every
// harness gets a database of its own on the PostgreSQL server at BADGEBENCH_TEST_POSTGRES
// (default postgres://postgres@127.0.0.1:5432/postgres: the postgres superuser, which .ci/run
// lets connect over TCP from this machine), created with a random name and dropped at close.
import crypto from "node:crypto";
import { testDatabasePrefix, TEST_POSTGRES_URL } from "../../scripts/harness/postgres-admin.ts";
import { createDatabase, databaseUrl, dropDatabase, withAdminDatabase } from "../../server/store/postgres-admin.ts";

declare module "vitest" {
  export interface ProvidedContext {
    /** this run's part of the test databases' names (postgres-setup.ts) */
    postgresTestRun: string;
  }
}

export const TEST_STORE: "sqlite" | "postgres" = process.env.BADGEBENCH_TEST_STORE === "postgres" ? "postgres" : "sqlite";

export interface TestDatabase {
  url: string;
  drop(): Promise<void>;
}

/** A new empty PostgreSQL database (the URL a server or `openStore` takes) and how to drop it. */
export async function createPostgresDatabase(): Promise<TestDatabase> {
  // Imported here, not at the top: test/server/fuzz-http-run.ts runs the badge harness outside
  // vitest (on SQLite, never reaching this), where importing vitest throws.
  const { inject } = await import("vitest");
  const name = `${testDatabasePrefix(inject("postgresTestRun"))}${crypto.randomBytes(6).toString("hex")}`;
  await withAdminDatabase(TEST_POSTGRES_URL, (db) => createDatabase(db, name));
  return {
    url: databaseUrl(TEST_POSTGRES_URL, name),
    // FORCE: a server killed by a test may leave its connections behind for a moment.
    drop: () => withAdminDatabase(TEST_POSTGRES_URL, (db) => dropDatabase(db, name)),
  };
}

/** A database for one harness under the store this run tests: undefined on SQLite. */
export async function createTestDatabase(): Promise<TestDatabase | undefined> {
  return TEST_STORE === "postgres" ? createPostgresDatabase() : undefined;
}

export interface TestStore {
  /** what `openStore` takes for this store */
  options: { dataDir: string; databaseUrl?: string };
  /** the same for `badgebench serve` */
  serveArgs: string[];
  drop(): Promise<void>;
}

/** The store of a test that opens it itself (and starts `badgebench serve` on it): `dataDir`, and a fresh database on a PostgreSQL run. */
export async function createTestStore(dataDir: string): Promise<TestStore> {
  const database = await createTestDatabase();
  return {
    options: { dataDir, databaseUrl: database?.url },
    serveArgs: database ? ["--data", dataDir, "--database", database.url] : ["--data", dataDir],
    drop: async () => database?.drop(),
  };
}
