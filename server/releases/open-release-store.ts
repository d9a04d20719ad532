// Picks where releases live for the store the server runs on, one store per mode.
import type { Kysely } from "kysely";
import type { ChangeFeed } from "../store/change-feed.ts";
import { isPostgres } from "../store/dialect.ts";
import type { Database } from "../store/schema.ts";
import { DatabaseReleaseStore } from "./database-release-store.ts";
import { FileReleaseStore, type ReleaseStoreKind, type ReleaseStores } from "./release-store.ts";

/**
 * Each mode's release store for a database: in the database on PostgreSQL (instances on several
 * machines share no disk), as files under `dataDir` on SQLite, unless `kind` says otherwise. A
 * server passes its store's change feed: the database stores then keep the manifest until it moves.
 */
export function openReleaseStores(db: Kysely<Database>, dataDir: string, kind?: ReleaseStoreKind, changes?: ChangeFeed): ReleaseStores {
  const chosen = kind ?? (isPostgres(db) ? "database" : "files");
  return chosen === "database"
    ? { 1: new DatabaseReleaseStore(db, 1, { changes }), 0: new DatabaseReleaseStore(db, 0, { changes }) }
    : { 1: new FileReleaseStore(dataDir, 1), 0: new FileReleaseStore(dataDir, 0) };
}
