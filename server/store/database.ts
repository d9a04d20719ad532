// Opens the store: SQLite through better-sqlite3 in WAL mode, behind Kysely so the same
// queries can later run on PostgreSQL. Migrations are applied before the store is returned.
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
   * Checkpoint the write-ahead log in a worker thread (checkpointer.ts) instead of in the commit
   * that fills it; the server sets it, short-lived admin commands do not need it. Called with
   * the message of a checkpoint that failed.
   */
  backgroundCheckpoints?: { onError(message: string): void };
}

export interface Store {
  db: Kysely<Database>;
  file: string;
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
  sqlite.pragma(`synchronous = ${sync.toUpperCase()}`);
  sqlite.pragma("busy_timeout = 5000");
  sqlite.pragma("foreign_keys = ON");
  const db = new Kysely<Database>({ dialect: new ImmediateSqliteDialect({ database: withStatementCache(sqlite) }) });
  try {
    await migrateToLatest(db);
  } catch (error) {
    await db.destroy();
    throw error;
  }
  const { backgroundCheckpoints } = options;
  if (!backgroundCheckpoints) return { db, file, close: () => db.destroy() };
  sqlite.pragma(`wal_autocheckpoint = ${FALLBACK_AUTOCHECKPOINT_PAGES}`);
  const checkpointer = startCheckpointer(file, sync, backgroundCheckpoints.onError);
  return {
    db,
    file,
    async close() {
      await checkpointer.stop();
      await db.destroy();
    },
  };
}
