// The PostgreSQL server the tests create their databases on, reached as an administrator. Kept
// apart from test/server/test-database.ts because test/server/postgres-setup.ts (vitest's globalSetup) may not import
// vitest itself.
import { databasesNamed, dropDatabase, withAdminDatabase } from "../../server/store/postgres-admin.ts";

/** Where the tests connect as an administrator to create and drop their databases. */
export const TEST_POSTGRES_URL = process.env.BADGEBENCH_TEST_POSTGRES || "postgres://postgres@127.0.0.1:5432/postgres";

/**
 * Names of the databases of one run: each is dropped by its harness, and what a test file that
 * died left behind by the run's teardown (postgres-setup.ts). Other runs on the same server (other
 * worktrees) keep theirs.
 */
export const testDatabasePrefix = (run: string) => `badgebench_test_${run}_`;

/** Drops every database of the run `run` still there (a test file that died before its harness closed). */
export async function dropTestDatabases(run: string): Promise<void> {
  await withAdminDatabase(TEST_POSTGRES_URL, async (db) => {
    for (const name of await databasesNamed(db, testDatabasePrefix(run))) await dropDatabase(db, name);
  });
}

