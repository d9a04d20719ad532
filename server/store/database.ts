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
import type { Duplex } from "node:stream";
import SQLite from "better-sqlite3";
import { CompiledQuery, Kysely, PostgresDialect, SqliteDialect, SqliteDriver, type DatabaseConnection } from "kysely";
import type pg from "pg";
import { CHANGE_CHECK_INTERVAL_MS, PostgresChangeFeed, sqliteChangeFeed, type ChangeFeed } from "./change-feed.ts";
import { FALLBACK_AUTOCHECKPOINT_PAGES, startCheckpointer, type SyncMode } from "./checkpointer.ts";
import { preparedStatementName } from "./compiled-query.ts";
import { DATABASE_FILE, sqliteFileIn, StoreError, UnusableStoreError } from "./data-directory.ts";
import { isDatabaseUnavailable } from "./dialect.ts";
import { migrateToLatest, migrationsUnknownHere } from "./migrations.ts";
import { pipelineTransactionsOf } from "./pipelined-transaction.ts";
import { markPipelinedFailure, PIPELINED_STATEMENTS } from "./write-batcher.ts";
import type { Database } from "./schema.ts";

// The store's callers name the sync mode through this module; the checkpointer owns it.
export type { SyncMode } from "./checkpointer.ts";

export interface StoreOptions {
  /** the SQLite database's directory; unused on PostgreSQL */
  dataDir: string;
  /**
   * Whether a missing SQLite database (and its directory) is created: true for the server only
   * (the default, for tests and benchmarks); the admin commands open an existing store or refuse.
   */
  create?: boolean;
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
  /** the longest a serving instance's caches may miss a revocation or publish whose notification did not arrive (change-feed.ts) */
  changeCheckMs: number;
}

export const POSTGRES_DEFAULTS: PostgresSettings = { poolSize: 10, connectTimeoutMs: 5000, statementTimeoutMs: 10_000, changeCheckMs: CHANGE_CHECK_INTERVAL_MS };

interface StoreBase {
  db: Kysely<Database>;
  /** what the caches of principals and releases check before trusting what they hold (change-feed.ts) */
  changes: ChangeFeed;
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

export { DATABASE_FILE, StoreError, UnusableStoreError };

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
  return options.databaseUrl === undefined ? openSqliteStore(options) : openPostgresStore(options.databaseUrl, options.postgres, options.serving !== undefined);
}

/** Migrates to this code's schema, after refusing (and changing nothing in) a database a newer badgebench wrote. */
async function migrated(db: Kysely<Database>, where: string): Promise<void> {
  try {
    const unknown = await migrationsUnknownHere(db);
    if (unknown.length > 0) {
      throw new UnusableStoreError(
        `${where} holds a database of a newer badgebench (its schema has ${unknown.join(", ")}, which this version does not know); run the newer badgebench, nothing was changed`,
      );
    }
    await migrateToLatest(db);
  } catch (error) {
    await db.destroy();
    throw error;
  }
}

async function openSqliteStore(options: StoreOptions): Promise<Store> {
  const file = sqliteFileIn(options.dataDir, options.create ?? true);
  const sqlite = new SQLite(file);
  try {
    sqlite.pragma("journal_mode = WAL");
  } catch (error) {
    sqlite.close();
    // SQLITE_NOTADB, SQLITE_CORRUPT: a file of another kind, or a damaged database.
    throw new UnusableStoreError(`${file} is not a badgebench database (${(error as Error).message}); move it away or give --data another directory`, { cause: error });
  }
  const sync = options.sync ?? "full";
  // A serving store under `full` syncs the log itself, after the commit, in logSynced.
  const syncsLogItself = options.serving !== undefined && sync === "full";
  sqlite.pragma(`synchronous = ${syncsLogItself ? "NORMAL" : sync.toUpperCase()}`);
  sqlite.pragma("busy_timeout = 5000");
  sqlite.pragma("foreign_keys = ON");
  const db = new Kysely<Database>({ dialect: new ImmediateSqliteDialect({ database: withStatementCache(sqlite) }) });
  await migrated(db, file);
  const dataVersionStatement = sqlite.prepare("pragma data_version").pluck();
  const dataVersion = () => dataVersionStatement.get() as number;
  const changes = sqliteChangeFeed(dataVersion);
  if (!options.serving) return { kind: "sqlite", db, file, dataVersion, changes, logSynced: synced, close: () => db.destroy() };
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
    changes,
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

let queriesSent = 0;
let writesSent = 0;

/** Statements this process has sent to PostgreSQL (for the benchmark's breakdown of a request). */
export const postgresQueriesSent = (): number => queriesSent;

/** Writes of statements to PostgreSQL this process has made: each a round trip, the statements of one turn of the event loop on one connection going out in one (writingTogether). */
export const postgresWritesSent = (): number => writesSent;

/** The statements held back to go out with the next one: see preparingHotStatements. */
const HELD_BACK: ReadonlySet<string> = new Set(["begin", ...PIPELINED_STATEMENTS]);

/**
 * Holds what is written to `stream` until the current turn of the event loop ends, then sends it
 * in one write. pg writes each statement (and each held-back BEGIN or savepoint) with a system
 * call of its own; the statements a request sends together (`together` in write-batcher.ts) and
 * the held-back ones before them were 3-5 writes a round trip, each also a wake-up of the
 * backend reading them.
 */
function writingTogether(stream: Duplex): () => void {
  let corked = false;
  const release = () => {
    corked = false;
    stream.uncork();
  };
  return () => {
    if (corked) return;
    corked = true;
    writesSent += 1;
    stream.cork();
    process.nextTick(release);
  };
}

/**
 * A pool client whose hot statements (compiled-query.ts) run as named prepared statements: parsed
 * and planned once per connection instead of on every call. A transaction's BEGIN, and a group
 * commit's savepoints and their releases (`PIPELINED_STATEMENTS`), wait for the statement that
 * follows them and go out with it, pipelined (the client runs in pg's pipeline mode), so they
 * cost no round trip of their own (a badge sync's transaction was 6 round trips, with its BEGIN).
 * Such a statement fails only in a transaction already failed (a write that caught its own
 * statement's error, a defect) or on a broken connection; Kysely is answered at once, and
 * if it failed all the same, every statement after it fails with its error (marked
 * `pipelinedFailure`) until the transaction is rolled back: the write batcher then runs the
 * group's writes again one transaction each (write-batcher.ts), and a COMMIT after a failed
 * RELEASE, which PostgreSQL turns into a ROLLBACK without an error, fails rather than reporting
 * the group committed. Every round trip is counted.
 */
function preparingHotStatements(client: pg.PoolClient): void {
  const query = client.query.bind(client) as (...args: unknown[]) => Promise<pg.QueryResult>;
  const writeTogether = writingTogether((client as unknown as { connection: { stream: Duplex } }).connection.stream);
  let waiting: string[] = [];
  let failed: { error: unknown } | undefined;
  client.query = ((config: unknown, values?: unknown, callback?: unknown) => {
    const endsTransaction = config === "rollback";
    if (failed !== undefined && !endsTransaction) return Promise.reject(failed.error);
    failed = undefined;
    if (typeof config === "string" && HELD_BACK.has(config) && callback === undefined) {
      waiting.push(config);
      return Promise.resolve({ command: config.split(" ")[0]!.toUpperCase(), rowCount: null, rows: [], fields: [], oid: 0 });
    }
    queriesSent += 1;
    writeTogether();
    // Written to the connection in this order, before any answer comes back.
    const before = waiting.map((text) => query(text));
    waiting = [];
    const name = typeof config === "string" ? preparedStatementName(config) : undefined;
    const sent = name === undefined || typeof values === "function" ? query(config, values, callback) : query({ name, text: config, values }, callback);
    if (before.length === 0) return sent;
    return Promise.allSettled([...before, sent]).then((outcomes) => {
      const last = outcomes.at(-1)!;
      const refused = outcomes.slice(0, -1).find((outcome) => outcome.status === "rejected");
      if (refused !== undefined && !endsTransaction) {
        failed = { error: markPipelinedFailure(refused.reason) };
        throw refused.reason;
      }
      if (last.status === "rejected") throw last.reason;
      return last.value;
    });
  }) as typeof client.query;
}

async function openPostgresStore(urlText: string, settings: Partial<PostgresSettings> = {}, serving = false): Promise<Store> {
  const url = parsePostgresUrl(urlText);
  const { poolSize, connectTimeoutMs, statementTimeoutMs, changeCheckMs } = { ...POSTGRES_DEFAULTS, ...settings };
  // Loaded only here: an SQLite server does not carry the PostgreSQL client in its memory.
  const { default: pg } = await import("pg");
  const pool = new pg.Pool({
    connectionString: urlText,
    max: poolSize,
    // Connections stay open once made (at most poolSize): one the pool's default closed after 10 s
    // idle came back as a new backend, paying its start, its caches and the planning of every
    // prepared statement again, at the first burst of requests after a lull.
    idleTimeoutMillis: 0,
    connectionTimeoutMillis: connectTimeoutMs,
    statement_timeout: statementTimeoutMs,
    // A transaction left open by a stalled request must not hold its locks for long.
    idle_in_transaction_session_timeout: statementTimeoutMs,
    // The server-side timeout cannot fire when the database host is gone without a word.
    query_timeout: statementTimeoutMs + connectTimeoutMs,
    keepAlive: true,
    types: countsAsNumbers(pg.types),
    // A statement goes out while those before it wait for their answers: the held-back ones with
    // the statement after them (preparingHotStatements), and the steps of a group's write sent
    // together (pipelined-transaction.ts; elsewhere Kysely still runs a connection's one at a time).
    pipeline: true,
  });
  // A connection that breaks (the database restarted, a backend terminated) reports an error on
  // its client, checked out or idle; without a listener that would end the process. The query
  // running on it fails (a 503 for its request) and the pool replaces the connection.
  const ignoreBroken = () => {};
  pool.on("error", ignoreBroken);
  pool.on("connect", (client) => {
    client.on("error", ignoreBroken);
    preparingHotStatements(client);
  });
  try {
    await pool.query("select 1");
  } catch (error) {
    await pool.end();
    throw new StoreError(`cannot connect to PostgreSQL at ${shownUrl(url)}: ${(error as Error).message || String(error)}`, { cause: error });
  }
  const dialect = new PostgresDialect({ pool });
  const db = new Kysely<Database>({ dialect });
  pipelineTransactionsOf(db, dialect);
  try {
    await migrated(db, `PostgreSQL at ${shownUrl(url)}`);
  } catch (error) {
    if (error instanceof UnusableStoreError) throw error;
    const cause = error instanceof Error ? error.cause : undefined;
    if (!isDatabaseUnavailable(error) && !isDatabaseUnavailable(cause)) throw error;
    // The migrations run in one transaction: none of them is left half applied.
    throw new StoreError(
      `PostgreSQL at ${shownUrl(url)} stopped answering while the tables were migrated (${(cause as Error | undefined)?.message ?? (error as Error).message}); no migration was half applied, start again once it answers`,
      { cause: error },
    );
  }
  // A serving instance listens for other instances' changes; an admin command reads the version row whenever asked.
  const changes = new PostgresChangeFeed({
    db,
    listen: serving,
    checkIntervalMs: serving ? changeCheckMs : 0,
    async connect() {
      const client = new pg.Client({ connectionString: urlText, connectionTimeoutMillis: connectTimeoutMs, keepAlive: true, application_name: "badgebench-changes" });
      client.on("error", ignoreBroken);
      await client.connect();
      return client;
    },
  });
  if (serving) {
    try {
      await changes.start();
    } catch (error) {
      await changes.close();
      await db.destroy();
      throw new StoreError(`PostgreSQL at ${shownUrl(url)} stopped answering while the server started: ${(error as Error).message}`, { cause: error });
    }
  }
  return {
    kind: "postgres",
    db,
    changes,
    logSynced: synced,
    async close() {
      await changes.close();
      await db.destroy();
    },
  };
}
