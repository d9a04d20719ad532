// `badgebench serve`: what the command does (its options are in serve-options.ts), shared by the
// full command line (cli.ts) and the production entry (serve-main.ts, built to dist/ by esbuild so
// the running server loads no TypeScript loader and none of the simulator or rig).
import { resolveDatabaseUrl, resolveDataDir } from "../../server/data-dir.ts";
import { startServer } from "../../server/main.ts";
import { DownloadLimitsError, downloadLimitsFromEnv } from "../../server/services/load-shaping.ts";
import type { PostgresSettings } from "../../server/store/database.ts";
import { WebhookConfigError, webhookConfigFromEnv } from "../../server/webhooks/webhook-config.ts";
import { loadDemo } from "./demo-school.ts";
import type { ServeArgs } from "./serve-options.ts";

/** A PostgreSQL setting in the environment that cannot be used. */
export class DatabaseSettingError extends Error {
  override name = "DatabaseSettingError";
}

/**
 * A setting from the environment (the configuration table) that cannot be used: the server does
 * not start, and the command exits 2 as for any input that cannot be used.
 */
export function isSettingError(error: Error): boolean {
  return error instanceof DatabaseSettingError || error instanceof WebhookConfigError || error instanceof DownloadLimitsError;
}

/** PostgreSQL's pool size, statement timeout and change check interval from the environment (the configuration table). */
export function postgresSettingsFromEnv(env = process.env): Partial<PostgresSettings> {
  const positive = (name: string): number | undefined => {
    const text = env[name];
    if (text === undefined || text === "") return undefined;
    const value = Number(text);
    if (!Number.isInteger(value) || value < 1) throw new DatabaseSettingError(`${name} must be a whole number of at least 1, got '${text}'`);
    return value;
  };
  const settings: Partial<PostgresSettings> = {};
  const poolSize = positive("DATABASE_POOL_SIZE");
  const statementTimeoutMs = positive("DATABASE_STATEMENT_TIMEOUT_MS");
  const changeCheckMs = positive("DATABASE_CHANGE_CHECK_MS");
  if (poolSize !== undefined) settings.poolSize = poolSize;
  if (statementTimeoutMs !== undefined) settings.statementTimeoutMs = statementTimeoutMs;
  if (changeCheckMs !== undefined) settings.changeCheckMs = changeCheckMs;
  return settings;
}

/** Browser origins besides the server's own that may call /api/mcp: $BADGEBENCH_MCP_ALLOWED_ORIGINS, comma-separated. */
export function mcpAllowedOriginsFromEnv(env = process.env): string[] {
  return (env.BADGEBENCH_MCP_ALLOWED_ORIGINS ?? "").split(",").map((origin) => origin.trim()).filter(Boolean);
}

/** Starts the server, prints `listening on URL`, and stops it on SIGINT or SIGTERM. */
export async function serve(args: ServeArgs): Promise<void> {
  const dataDir = resolveDataDir(args.data);
  let playDemoBadges: ((url: string) => Promise<void>) | undefined;
  const server = await startServer({
    dataDir,
    databaseUrl: resolveDatabaseUrl(args.database),
    postgres: postgresSettingsFromEnv(),
    downloads: downloadLimitsFromEnv(),
    mcpAllowedOrigins: mcpAllowedOriginsFromEnv(),
    port: args.port,
    host: args.host,
    sync: args.sync,
    // The demo is for trying things on this machine: its test endpoints may reach a local receiver.
    webhooks: { ...(args.demo ? { localTestTargets: true } : {}), ...webhookConfigFromEnv() },
    prepare: args.demo
      ? async (store) => {
          playDemoBadges = await loadDemo(store, dataDir, (m) => process.stderr.write(`${m}\n`));
        }
      : undefined,
  });
  // The demo badges talk HTTP to this server, so they play once it listens, before it says so.
  await playDemoBadges?.(server.url);
  process.stdout.write(`listening on ${server.url}\n`);
  const stop = () => {
    server.close().then(() => process.exit(0), () => process.exit(1));
  };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
}
