// globalSetup of the postgres project (vitest.config.ts): gives the run a name for its test
// databases, checks that the PostgreSQL server answers (one clear message instead of every suite
// failing), and drops what the run left behind.
import crypto from "node:crypto";
import pg from "pg";
import type { TestProject } from "vitest/node";
import { dropTestDatabases, TEST_POSTGRES_URL } from "../../scripts/harness/postgres-admin.ts";

export default async function setup(project: TestProject) {
  const run = crypto.randomBytes(4).toString("hex");
  const client = new pg.Client({ connectionString: TEST_POSTGRES_URL, connectionTimeoutMillis: 10_000 });
  try {
    await client.connect();
  } catch (error) {
    throw new Error(`the PostgreSQL tests need a server at ${TEST_POSTGRES_URL} (set BADGEBENCH_TEST_POSTGRES; .ci/run starts one): ${(error as Error).message}`);
  } finally {
    await client.end().catch(() => {});
  }
  project.provide("postgresTestRun", run);
  return () => dropTestDatabases(run);
}
