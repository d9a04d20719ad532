// `badgebench serve`: the command's options and what it does, shared by the full command line
// (cli.ts, run through tsx) and the production entry (serve-main.ts, built to dist/ by esbuild so
// the running server loads no TypeScript loader and none of the simulator or rig).
import fs from "node:fs";
import { fileURLToPath } from "node:url";
import type { Argv } from "yargs";
import { resolveDatabaseUrl, resolveDataDir, startServer } from "../server/main.ts";
import { createApiKey, SCOPES } from "../server/services/api-keys.ts";
import { importSchool } from "../server/services/school-import.ts";
import { StoreError, type PostgresSettings, type Store, type SyncMode } from "../server/store/database.ts";
import { countStudents } from "../server/store/school-store.ts";
import { webhookConfigFromEnv } from "../server/webhooks/webhook-config.ts";

// One folder below the project root both in scripts/ and in the bundle in dist/.
const DEMO_SCHOOL = fileURLToPath(new URL("../fixtures/demo-school.json", import.meta.url));

async function loadDemo(store: Store, log: (message: string) => void) {
  if ((await countStudents(store.db, 0)) > 0) return;
  const school = JSON.parse(fs.readFileSync(DEMO_SCHOOL, "utf8")) as unknown;
  const summary = await importSchool(store.db, school, { mode: "test", source: DEMO_SCHOOL });
  const key = await createApiKey(store.db, { mode: "test", scopes: Object.keys(SCOPES), name: "demo" });
  log(
    `loaded the demo school into test mode: ${summary.students} students, ${summary.courses} courses, ${summary.sessions_added} sessions this week\n` +
      `demo API key (test mode, every scope; shown once): ${key.secret}`,
  );
}

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

/** PostgreSQL's pool size and statement timeout from the environment (the configuration table). */
export function postgresSettingsFromEnv(env = process.env): Partial<PostgresSettings> {
  const positive = (name: string): number | undefined => {
    const text = env[name];
    if (text === undefined || text === "") return undefined;
    const value = Number(text);
    if (!Number.isInteger(value) || value < 1) throw new StoreError(`${name} must be a whole number of at least 1, got '${text}'`);
    return value;
  };
  const settings: Partial<PostgresSettings> = {};
  const poolSize = positive("DATABASE_POOL_SIZE");
  const statementTimeoutMs = positive("DATABASE_STATEMENT_TIMEOUT_MS");
  if (poolSize !== undefined) settings.poolSize = poolSize;
  if (statementTimeoutMs !== undefined) settings.statementTimeoutMs = statementTimeoutMs;
  return settings;
}

export const SERVE_HELP = {
  port: "port (0 picks a free one)",
  data: "data directory (default $BADGEBENCH_DATA or ./var)",
  database: "PostgreSQL URL postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE instead of SQLite in the data directory (default $DATABASE_URL)",
  demo: "load the demo school into an empty data directory",
};

/** The options of `badgebench serve` in the full command line. */
export const serveOptions = (y: Argv) => {
  const defaults = serveDefaults();
  return y
    .option("port", { type: "number", default: defaults.port, describe: SERVE_HELP.port })
    .option("host", { type: "string", default: defaults.host })
    .option("data", { type: "string", describe: SERVE_HELP.data })
    .option("database", { type: "string", describe: SERVE_HELP.database })
    .option("demo", { type: "boolean", default: false, describe: SERVE_HELP.demo })
    .option("sync", { choices: SYNC_MODES, default: defaults.sync });
};

/** Starts the server, prints `listening on URL`, and stops it on SIGINT or SIGTERM. */
export async function serve(args: ServeArgs): Promise<void> {
  const server = await startServer({
    dataDir: resolveDataDir(args.data),
    databaseUrl: resolveDatabaseUrl(args.database),
    postgres: postgresSettingsFromEnv(),
    port: args.port,
    host: args.host,
    sync: args.sync,
    webhooks: webhookConfigFromEnv(),
    prepare: args.demo ? (store) => loadDemo(store, (m) => process.stderr.write(`${m}\n`)) : undefined,
  });
  process.stdout.write(`listening on ${server.url}\n`);
  const stop = () => {
    server.close().then(() => process.exit(0), () => process.exit(1));
  };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
}
