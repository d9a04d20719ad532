// The PostgreSQL server the tests create their databases on, reached as an administrator. Kept
// apart from test-database.ts because postgres-setup.ts (vitest's globalSetup) may not import
// vitest itself.
import pg from "pg";

/** Where the tests connect as an administrator to create and drop their databases. */
export const TEST_POSTGRES_URL = process.env.BADGEBENCH_TEST_POSTGRES || "postgres://postgres@127.0.0.1:5432/postgres";

/**
 * Names of the databases of one run: each is dropped by its harness, and what a test file that
 * died left behind by the run's teardown (postgres-setup.ts). Other runs on the same server (other
 * worktrees) keep theirs.
 */
export const testDatabasePrefix = (run: string) => `badgebench_test_${run}_`;

/** Runs `run` on a connection of its own to the administrative database. */
export async function admin<T>(run: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: TEST_POSTGRES_URL, connectionTimeoutMillis: 10_000 });
  await client.connect();
  try {
    return await run(client);
  } finally {
    await client.end();
  }
}

/** Drops every database of the run `run` still there (a test file that died before its harness closed). */
export async function dropTestDatabases(run: string): Promise<void> {
  await admin(async (client) => {
    const { rows } = await client.query<{ datname: string }>("select datname from pg_database where starts_with(datname, $1)", [testDatabasePrefix(run)]);
    for (const { datname } of rows) await client.query(`drop database if exists ${datname} with (force)`);
  });
}

