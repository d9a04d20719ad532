// Picks where releases live for the store the server runs on.
import type { Kysely } from "kysely";
import { isPostgres } from "../store/dialect.ts";
import type { Database } from "../store/schema.ts";
import { DatabaseReleaseStore } from "./database-release-store.ts";
import { FileReleaseStore, type ReleaseStore, type ReleaseStoreKind } from "./release-store.ts";

/**
 * The release store for a database: in the database on PostgreSQL (instances on several
 * machines share no disk), as files under `dataDir` on SQLite, unless `kind` says otherwise.
 */
export function openReleaseStore(db: Kysely<Database>, dataDir: string, kind?: ReleaseStoreKind): ReleaseStore {
  const chosen = kind ?? (isPostgres(db) ? "database" : "files");
  return chosen === "database" ? new DatabaseReleaseStore(db) : new FileReleaseStore(dataDir);
}
