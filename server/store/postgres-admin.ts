// Creating and dropping whole PostgreSQL databases, for the tests and benchmarks that want a fresh
// one: statements on the server's administrative database (`postgres`), not on a badgebench store,
// so they take a Kysely of their own that knows only the `pg_database` catalog (and
// `pg_stat_activity`, which the PostgreSQL benchmark samples).
import { Kysely, PostgresDialect, sql } from "kysely";
import pg from "pg";

interface AdminCatalog {
  pg_database: { datname: string };
  pg_stat_activity: { datname: string | null; pid: number; state: string | null; application_name: string };
}

export type AdminDb = Kysely<AdminCatalog>;

/** Runs `run` on one connection of its own to the administrative database at `adminUrl` (10 s to connect). */
export async function withAdminDatabase<T>(adminUrl: string, run: (db: AdminDb) => Promise<T>): Promise<T> {
  const db = new Kysely<AdminCatalog>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: adminUrl, max: 1, connectionTimeoutMillis: 10_000 }) }) });
  try {
    return await run(db);
  } finally {
    await db.destroy();
  }
}

/** The URL of database `name` on the server `serverUrl` reaches (its user, host and options kept). */
export function databaseUrl(serverUrl: string, name: string): string {
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

export async function createDatabase(db: AdminDb, name: string): Promise<void> {
  await sql`create database ${sql.id(name)}`.execute(db);
}

/** Drops `name` if it exists, ending the connections still on it (a server a test killed may leave some behind for a moment). */
export async function dropDatabase(db: AdminDb, name: string): Promise<void> {
  await sql`drop database if exists ${sql.id(name)} with (force)`.execute(db);
}

/** The databases whose names start with `prefix`. */
export async function databasesNamed(db: AdminDb, prefix: string): Promise<string[]> {
  const rows = await db
    .selectFrom("pg_database")
    .select("datname")
    .where((eb) => eb.fn<boolean>("starts_with", ["datname", eb.val(prefix)]))
    .execute();
  return rows.map((row) => row.datname);
}

/**
 * How many connections to database `name` are busy now (running a statement, or inside a
 * transaction), apart from this one and the instances' change listeners: what a benchmark samples
 * to size the pool.
 */
export async function busyConnections(db: AdminDb, name: string): Promise<number> {
  const row = await db
    .selectFrom("pg_stat_activity")
    .select((eb) => eb.fn.countAll<number>().as("n"))
    .where("datname", "=", name)
    .where("state", "in", ["active", "idle in transaction"])
    .where("application_name", "<>", "badgebench-changes")
    .where("pid", "<>", sql<number>`pg_backend_pid()`)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

/**
 * The PostgreSQL server's processes working for database `name` now: the backends of its
 * connections, and the server's own background processes (WAL writer, checkpointer, autovacuum
 * launcher), whose CPU a benchmark counts as the database's; not the backends of other databases.
 */
export async function processesOf(db: AdminDb, name: string): Promise<number[]> {
  const rows = await db
    .selectFrom("pg_stat_activity")
    .select("pid")
    .where((eb) => eb.or([eb("datname", "=", name), eb("datname", "is", null)]))
    .execute();
  return rows.map((row) => row.pid);
}
