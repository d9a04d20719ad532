// Opens the store: SQLite through better-sqlite3 in WAL mode (the default, in the data
// directory), or PostgreSQL through pg when a database URL is given (several server instances
// may share it). Both sit behind Kysely and run the same queries; what is SQLite's alone (BEGIN
// IMMEDIATE, the statement cache, the checkpoint worker, syncing the log) stays in this file and
// checkpointer.ts. Migrations are applied before the store is returned.
//
// Durability of the server's writes under `full`: better-sqlite3 runs every statement on the
// event loop, so with synchronous=FULL each commit's fsync of the log stalled every request
// (in the create benchmark, commits took a third of the server's time, fsync being most of
// it). The serving connection therefore commits with synchronous=NORMAL (the log is written at
// commit, not synced) and the write batcher acknowledges a group only after fdatasync of the
// log, run on libuv's thread pool, has finished after that group's commit: the log holds the
// commit on disk before anyone hears of it, exactly what FULL guarantees, while the next group's
// statements already run. Checkpoints still sync the log before copying it (NORMAL does that).
import fs from "node:fs";
import path from "node:path";
import SQLite from "better-sqlite3";
import { CompiledQuery, Kysely, PostgresDialect, SqliteDialect, SqliteDriver, type DatabaseConnection } from "kysely";
import type pg from "pg";
import { FALLBACK_AUTOCHECKPOINT_PAGES, startCheckpointer } from "./checkpointer.ts";
import { isDatabaseUnavailable } from "./dialect.ts";
import { migrateToLatest } from "./migrations.ts";
import type { Database } from "./schema.ts";

export type SyncMode = "full" | "normal";

export type StoreKind = "sqlite" | "postgres";

export interface StoreOptions {
  /** the SQLite database's directory; unused on PostgreSQL */
  dataDir: string;
  /** a `postgres://` URL: the store is that PostgreSQL database instead of SQLite in `dataDir` */
  databaseUrl?: string;
  /** PostgreSQL connection pool and timeouts (defaults in POSTGRES_DEFAULTS) */
  postgres?: Partial<PostgresSettings>;
  /**
   * SQLite `synchronous` pragma. `full` (the default) fsyncs the WAL at every commit, so an
   * acknowledged write survives a power cut; `normal` survives a killed process only.
   */
  sync?: SyncMode;
  /**
   * The server's store (admin commands leave it out): the write-ahead log is checkpointed in a
   * worker thread (checkpointer.ts) instead of in the commit that fills it, and under `full` the
   * log is synced off the event loop (`logSynced`) instead of inside every commit. Called with
   * the message of a checkpoint that failed.
   */
  serving?: { onCheckpointError(message: string): void };
}

export interface PostgresSettings {
  /** connections per server process */
  poolSize: number;
  /** how long a request waits for a connection (opening one, or a free one of the pool) */
  connectTimeoutMs: number;
  /** the longest a statement may run before PostgreSQL cancels it */
  statementTimeoutMs: number;
}

export const POSTGRES_DEFAULTS: PostgresSettings = { poolSize: 10, connectTimeoutMs: 5000, statementTimeoutMs: 10_000 };

interface StoreBase {
  db: Kysely<Database>;
  /**
   * Resolves once every transaction committed before the call is on disk as `sync` promises;
   * acknowledge a write only after it. Immediate except for a serving SQLite store under `full`
   * (on PostgreSQL a commit is durable when it returns).
   */
  logSynced(): Promise<void>;
  close(): Promise<void>;
}

export type Store = (StoreBase & SqliteParts) | (StoreBase & { kind: "postgres"; file?: undefined });

interface SqliteParts {
  kind: "sqlite";
  file: string;
  /**
   * SQLite's `PRAGMA data_version` on the store's connection: it differs from the previous
   * call's value when another connection (an admin command, another process) has committed
   * since. PostgreSQL has no such signal: its other instances' commits leave no local trace.
   */
  dataVersion(): number;
}

/** The SQLite file of a store opened without a database URL (for the tools that read the file itself). */
export function sqliteFileOf(store: Store): string {
  if (store.kind !== "sqlite") throw new Error("this works on the SQLite store only; leave out the database URL");
  return store.file;
}

/** The store could not be opened for a reason the user can fix (a bad URL, a database that does not answer). */
export class StoreError extends Error {
  override name = "StoreError";
}

// Kysely opens SQLite transactions with a plain (deferred) BEGIN. A deferred transaction that
// reads and then writes fails at once with SQLITE_BUSY when another process (an admin command
// while the server runs) wrote in between, instead of waiting on busy_timeout. BEGIN IMMEDIATE
// takes the write lock up front, so concurrent writers queue instead.
class ImmediateSqliteDriver extends SqliteDriver {
  override async beginTransaction(connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw("begin immediate"));
  }
}

class ImmediateSqliteDialect extends SqliteDialect {
  readonly #config: ConstructorParameters<typeof SqliteDialect>[0];
  constructor(config: ConstructorParameters<typeof SqliteDialect>[0]) {
    super(config);
    this.#config = config;
  }
  override createDriver() {
    return new ImmediateSqliteDriver(this.#config);
  }
}

export const DATABASE_FILE = "badgebench.sqlite";

const STATEMENT_CACHE_SIZE = 500;

// Kysely prepares every query anew; preparing costs about as much as running these small
// statements. Kysely emits the same SQL text for the same query shape, so prepared statements
// are kept by their text, the least recently used dropped first: a list of values is one
// placeholder per value, so the hot queries come in many shapes (a sync's taps, cards, seconds),
// and the rare ones must not push them out.
function withStatementCache(sqlite: SQLite.Database) {
  // A Map iterates in insertion order: a statement used again is moved to the end.
  const cache = new Map<string, SQLite.Statement>();
  return {
    close: () => sqlite.close(),
    prepare(sql: string) {
      let statement = cache.get(sql);
      if (statement) {
        cache.delete(sql);
      } else {
        statement = sqlite.prepare(sql);
        if (cache.size >= STATEMENT_CACHE_SIZE) cache.delete(cache.keys().next().value!);
      }
      cache.set(sql, statement);
      return statement;
    },
  };
}

/** logSynced of a store whose commits are durable when they return. */
const synced = () => Promise.resolve();

export async function openStore(options: StoreOptions): Promise<Store> {
  return options.databaseUrl === undefined ? openSqliteStore(options) : openPostgresStore(options.databaseUrl, options.postgres);
}

async function migrated(db: Kysely<Database>): Promise<void> {
  try {
    await migrateToLatest(db);
  } catch (error) {
    await db.destroy();
    throw error;
  }
}

async function openSqliteStore(options: StoreOptions): Promise<Store> {
  fs.mkdirSync(options.dataDir, { recursive: true });
  const file = path.join(options.dataDir, DATABASE_FILE);
  const sqlite = new SQLite(file);
  sqlite.pragma("journal_mode = WAL");
  const sync = options.sync ?? "full";
  // A serving store under `full` syncs the log itself, after the commit, in logSynced.
  const syncsLogItself = options.serving !== undefined && sync === "full";
  sqlite.pragma(`synchronous = ${syncsLogItself ? "NORMAL" : sync.toUpperCase()}`);
  sqlite.pragma("busy_timeout = 5000");
  sqlite.pragma("foreign_keys = ON");
  const db = new Kysely<Database>({ dialect: new ImmediateSqliteDialect({ database: withStatementCache(sqlite) }) });
  await migrated(db);
  const dataVersionStatement = sqlite.prepare("pragma data_version").pluck();
  const dataVersion = () => dataVersionStatement.get() as number;
  if (!options.serving) return { kind: "sqlite", db, file, dataVersion, logSynced: synced, close: () => db.destroy() };
  sqlite.pragma(`wal_autocheckpoint = ${FALLBACK_AUTOCHECKPOINT_PAGES}`);
  // Each write of a group runs under a savepoint (write-batcher.ts), and SQLite copies every page
  // a write changes into the savepoint's journal; past 64 KiB that journal is a temporary file,
  // so a badge sync (about 40 pages) wrote 160 KiB to disk through pwrite before its commit did.
  // Kept in memory, the journal is a page copy each, freed when the savepoint is released. Other
  // temporary data of the serving connection is small: ORDER BY ... LIMIT keeps LIMIT rows.
  sqlite.pragma("temp_store = MEMORY");
  const checkpointer = startCheckpointer(file, sync, options.serving.onCheckpointError);
  // The log exists from the migrations on and, while this connection is open, is never deleted:
  // SQLite restarts it from its start after a checkpoint, in the same file.
  const log = syncsLogItself ? await fs.promises.open(`${file}-wal`, "r") : undefined;
  return {
    kind: "sqlite",
    db,
    file,
    dataVersion,
    logSynced: log === undefined ? synced : () => log.datasync(),
    async close() {
      await checkpointer.stop();
      await db.destroy();
      await log?.close();
    },
  };
}

/** The URL as it may be shown: without its password. */
function shownUrl(url: URL): string {
  const shown = new URL(url);
  if (shown.password) shown.password = "***";
  return shown.toString();
}

function parsePostgresUrl(text: string): URL {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new StoreError("the database URL is not a URL; give postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE");
  }
  if (url.protocol !== "postgres:" && url.protocol !== "postgresql:") {
    throw new StoreError(`the database URL must start with postgres:// (got ${url.protocol}//...); leave it out to use SQLite in the data directory`);
  }
  if (url.pathname.length <= 1) throw new StoreError(`the database URL ${shownUrl(url)} names no database; add /DATABASE`);
  return url;
}

// COUNT(*) is a bigint, which pg hands over as a string (it may exceed 2^53); every count here is
// far below that, and the callers expect numbers as SQLite gives them.
const countsAsNumbers = (types: typeof pg.types) => ({
  getTypeParser: ((oid: number, format?: "text" | "binary") =>
    oid === types.builtins.INT8 ? Number : types.getTypeParser(oid, format)) as typeof pg.types.getTypeParser,
});

async function openPostgresStore(urlText: string, settings: Partial<PostgresSettings> = {}): Promise<Store> {
  const url = parsePostgresUrl(urlText);
  const { poolSize, connectTimeoutMs, statementTimeoutMs } = { ...POSTGRES_DEFAULTS, ...settings };
  // Loaded only here: an SQLite server does not carry the PostgreSQL client in its memory.
  const { default: pg } = await import("pg");
  const pool = new pg.Pool({
    connectionString: urlText,
    max: poolSize,
    connectionTimeoutMillis: connectTimeoutMs,
    statement_timeout: statementTimeoutMs,
    // A transaction left open by a stalled request must not hold its locks for long.
    idle_in_transaction_session_timeout: statementTimeoutMs,
    // The server-side timeout cannot fire when the database host is gone without a word.
    query_timeout: statementTimeoutMs + connectTimeoutMs,
    keepAlive: true,
    types: countsAsNumbers(pg.types),
  });
  // A connection that breaks (the database restarted, a backend terminated) reports an error on
  // its client, checked out or idle; without a listener that would end the process. The query
  // running on it fails (a 503 for its request) and the pool replaces the connection.
  const ignoreBroken = () => {};
  pool.on("error", ignoreBroken);
  pool.on("connect", (client) => client.on("error", ignoreBroken));
  try {
    await pool.query("select 1");
  } catch (error) {
    await pool.end();
    throw new StoreError(`cannot connect to PostgreSQL at ${shownUrl(url)}: ${(error as Error).message || String(error)}`, { cause: error });
  }
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  try {
    await migrated(db);
  } catch (error) {
    const cause = error instanceof Error ? error.cause : undefined;
    if (!isDatabaseUnavailable(error) && !isDatabaseUnavailable(cause)) throw error;
    // The migrations run in one transaction: none of them is left half applied.
    throw new StoreError(
      `PostgreSQL at ${shownUrl(url)} stopped answering while the tables were migrated (${(cause as Error | undefined)?.message ?? (error as Error).message}); no migration was half applied, start again once it answers`,
      { cause: error },
    );
  }
  return { kind: "postgres", db, logSynced: synced, close: () => db.destroy() };
}
