// Where a command's store lives: the data directory and the PostgreSQL URL, from flag or
// environment. Apart from main.ts so the command line resolves them without loading the server.
import path from "node:path";

/** The PostgreSQL database URL: the flag, else DATABASE_URL; undefined (SQLite) when neither is set. */
export function resolveDatabaseUrl(flag: string | undefined, env = process.env): string | undefined {
  return flag ?? (env.DATABASE_URL || undefined);
}

/** The data directory: the flag, else BADGEBENCH_DATA, else ./var. */
export function resolveDataDir(flag: string | undefined, env = process.env): string {
  return path.resolve(flag ?? env.BADGEBENCH_DATA ?? "var");
}
