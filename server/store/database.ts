// Opens the store: SQLite through better-sqlite3 in WAL mode, behind Kysely so the same
// queries can later run on PostgreSQL. Migrations are applied before the store is returned.
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
import { CompiledQuery, Kysely, SqliteDialect, SqliteDriver, type DatabaseConnection } from "kysely";
import { FALLBACK_AUTOCHECKPOINT_PAGES, startCheckpointer } from "./checkpointer.ts";
import { migrateToLatest } from "./migrations.ts";
import type { Database } from "./schema.ts";

export type SyncMode = "full" | "normal";

export interface StoreOptions {
  dataDir: string;
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

export interface Store {
  db: Kysely<Database>;
  file: string;
  /**
   * Resolves once every transaction committed before the call is on disk as `sync` promises;
   * acknowledge a write only after it. Immediate except for a serving store under `full`.
   */
  logSynced(): Promise<void>;
  close(): Promise<void>;
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
// are kept by their text (bounded, oldest dropped first).
function withStatementCache(sqlite: SQLite.Database) {
  const cache = new Map<string, SQLite.Statement>();
  return {
    close: () => sqlite.close(),
    prepare(sql: string) {
      let statement = cache.get(sql);
      if (!statement) {
        statement = sqlite.prepare(sql);
        if (cache.size >= STATEMENT_CACHE_SIZE) cache.delete(cache.keys().next().value!);
        cache.set(sql, statement);
      }
      return statement;
    },
  };
}

export async function openStore(options: StoreOptions): Promise<Store> {
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
  try {
    await migrateToLatest(db);
  } catch (error) {
    await db.destroy();
    throw error;
  }
  const synced = () => Promise.resolve();
  if (!options.serving) return { db, file, logSynced: synced, close: () => db.destroy() };
  sqlite.pragma(`wal_autocheckpoint = ${FALLBACK_AUTOCHECKPOINT_PAGES}`);
  const checkpointer = startCheckpointer(file, sync, options.serving.onCheckpointError);
  // The log exists from the migrations on and, while this connection is open, is never deleted:
  // SQLite restarts it from its start after a checkpoint, in the same file.
  const log = syncsLogItself ? await fs.promises.open(`${file}-wal`, "r") : undefined;
  return {
    db,
    file,
    logSynced: log === undefined ? synced : () => log.datasync(),
    async close() {
      await checkpointer.stop();
      await db.destroy();
      await log?.close();
    },
  };
}
