// The PostgreSQL databases of a benchmark run (bench-postgres.ts, bench-sim-fleet.ts): each
// created fresh on the server at a `postgres://` URL, and dropped however the run ends.
import { execFileSync } from "node:child_process";
import { createDatabase as createStoreDatabase, databaseUrl, dropDatabase, withAdminDatabase } from "../../server/store/postgres-admin.ts";

/** The default PostgreSQL server of the benchmarks' `--postgres` option. */
export const DEFAULT_BENCH_POSTGRES = "postgres://postgres@127.0.0.1:5432/postgres";

const createdDatabases = new Set<string>();

/** A new empty database `name` on `server`; its URL. */
export async function createDatabase(server: string, name: string): Promise<string> {
  await withAdminDatabase(databaseUrl(server, "postgres"), (admin) => createStoreDatabase(admin, name));
  createdDatabases.add(name);
  return databaseUrl(server, name);
}

/** Drops every database createDatabase made that is still there. */
export async function dropDatabases(server: string): Promise<void> {
  await withAdminDatabase(databaseUrl(server, "postgres"), async (admin) => {
    for (const name of createdDatabases) {
      await dropDatabase(admin, name); // forced: a server killed a moment ago may still hold a connection
      createdDatabases.delete(name);
    }
  });
}

/** On Ctrl-C withTempDir exits at once; the databases still there are dropped synchronously here. */
export function dropDatabasesOnExit(server: string): void {
  process.once("exit", () => {
    for (const name of createdDatabases) {
      execFileSync("dropdb", ["--if-exists", "--force", `--maintenance-db=${databaseUrl(server, "postgres")}`, name], { stdio: "ignore" });
    }
  });
}
