// What the admin commands share: --data, --database and --json, a store opened for one command,
// and printing one JSON object under --json or plain text. The store is
// imported when a command opens it, so --help does not load it (cli.ts).
import type { Argv } from "yargs";
import { resolveDatabaseUrl, resolveDataDir } from "../../../server/data-dir.ts";
import type { Store } from "../../../server/store/database.ts";

export interface AdminArgs {
  data?: string;
  database?: string;
  json: boolean;
}

export function print(args: AdminArgs, json: unknown, text: string) {
  process.stdout.write(args.json ? `${JSON.stringify(json)}\n` : `${text}\n`);
}

/** Each mode's release store beside the command's store (its database, or files in the data directory). */
export async function releaseStoresOf(store: Store, args: AdminArgs) {
  const { openReleaseStores } = await import("../../../server/releases/open-release-store.ts");
  return openReleaseStores(store.db, resolveDataDir(args.data));
}

export async function withStore<T>(args: AdminArgs, run: (store: Store) => Promise<T>): Promise<void> {
  // Only `serve` creates a store: a command given a directory without one refuses (exit 2).
  const { openStore } = await import("../../../server/store/database.ts");
  const store = await openStore({ dataDir: resolveDataDir(args.data), databaseUrl: resolveDatabaseUrl(args.database), create: false });
  try {
    await run(store);
  } finally {
    await store.close();
  }
}

export const adminOptions = (y: Argv) =>
  y
    .option("data", { type: "string", describe: "data directory (default $BADGEBENCH_DATA or ./var)" })
    .option("database", { type: "string", describe: "PostgreSQL URL instead of SQLite in the data directory (default $DATABASE_URL)" })
    .option("json", { type: "boolean", default: false, describe: "print exactly one JSON object" });
