// The options of `badgebench serve`, apart from the server itself (serve.ts), so the command line
// lists them without loading the server: shared by the full command line (cli.ts) and the
// production entry (serve-main.ts).
import type { Argv } from "yargs";
import type { SyncMode } from "../../server/store/database.ts";

export interface ServeArgs {
  port: number;
  host: string;
  data?: string;
  database?: string;
  demo: boolean;
  sync: SyncMode;
}

export const SYNC_MODES = ["full", "normal"] as const;

/** The defaults, from the environment where the configuration table says so. */
export const serveDefaults = (env = process.env) => ({
  port: Number(env.PORT ?? 3000),
  host: env.HOST ?? "127.0.0.1",
  sync: (env.BADGEBENCH_SQLITE_SYNC ?? "full") as SyncMode,
});

export const SERVE_HELP = {
  port: "port (0 picks a free one)",
  data: "data directory (default $BADGEBENCH_DATA or ./var)",
  database: "PostgreSQL URL postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE instead of SQLite in the data directory (default $DATABASE_URL)",
  demo: "load the demo school into an empty data directory; test webhook endpoints may reach loopback and private addresses (unless BADGEBENCH_WEBHOOK_LOCAL_TEST_TARGETS=0)",
  host: "address to listen on (default $HOST or 127.0.0.1; 0.0.0.0 for every interface)",
  sync: "SQLite durability: full keeps an acknowledged write through a power cut, normal through a killed process only (default $BADGEBENCH_SQLITE_SYNC or full)",
};

/** The options of `badgebench serve` in the full command line. */
export const serveOptions = (y: Argv) => {
  const defaults = serveDefaults();
  return y
    .option("port", { type: "number", default: defaults.port, describe: SERVE_HELP.port })
    .option("host", { type: "string", default: defaults.host, describe: SERVE_HELP.host })
    .option("data", { type: "string", describe: SERVE_HELP.data })
    .option("database", { type: "string", describe: SERVE_HELP.database })
    .option("demo", { type: "boolean", default: false, describe: SERVE_HELP.demo })
    .option("sync", { choices: SYNC_MODES, default: defaults.sync, describe: SERVE_HELP.sync });
};

