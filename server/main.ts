// The composition root: opens the store in the data directory, builds the app, listens.
import http from "node:http";
import type { AddressInfo } from "node:net";
import { pino, type Logger } from "pino";
import { createApp } from "./app.ts";
import type { AuthFailureBudget } from "./http/auth-failures.ts";
import { CONNECTION_LIMITS, TIMEOUT_CHECK_INTERVAL_MS, type ConnectionLimits } from "./http/connection-limits.ts";
import { openReleaseStores } from "./releases/open-release-store.ts";
import { ROLLOUT_EVALUATION_INTERVAL_MS, type Clock } from "./services/rollouts.ts";
import type { ReleaseStoreKind } from "./releases/release-store.ts";
import type { DownloadLimits } from "./services/load-shaping.ts";
import { openStore, type Store, type StoreOptions, type SyncMode } from "./store/database.ts";
import { DeliveryWorker } from "./webhooks/delivery-worker.ts";
import { ServerLoad } from "./webhooks/server-load.ts";
import { resolveWebhookConfig, type WebhookConfig } from "./webhooks/webhook-config.ts";
import { WebhookSender } from "./webhooks/webhook-sender.ts";

export interface ServerOptions {
  dataDir: string;
  /** a `postgres://` URL: serve from that PostgreSQL database instead of SQLite in `dataDir` */
  databaseUrl?: string;
  /** PostgreSQL pool size and timeouts (store/database.ts) */
  postgres?: StoreOptions["postgres"];
  port: number;
  host: string;
  sync?: SyncMode;
  logger?: Logger;
  /** Runs on the opened store before the server accepts requests (the demo loader uses it). */
  prepare?: (store: Store, logger: Logger) => Promise<void>;
  /** Where releases live: by default in the database on PostgreSQL, as files in the data directory on SQLite. */
  releases?: ReleaseStoreKind;
  /** webhook delivery tunables (defaults in webhooks/webhook-config.ts) */
  webhooks?: Partial<WebhookConfig>;
  /** false: no hot routes, every request through Express (tests compare the two; see app.ts) */
  hotRoutes?: boolean;
  /** timeouts and the connection cap (defaults and their reasons in http/connection-limits.ts) */
  connections?: Partial<ConnectionLimits>;
  /** failed authentications allowed per client address (defaults and reasons in http/auth-failures.ts) */
  authFailures?: Partial<AuthFailureBudget>;
  /** browser origins besides the server's own that may call /api/mcp (default: none; `badgebench serve` reads $BADGEBENCH_MCP_ALLOWED_ORIGINS) */
  mcpAllowedOrigins?: string[];
  /** staged rollouts: the clock they, badge syncs and downloads go by (default: the system's; AppDeps.clock) and how often the server evaluates them (0: never on its own; default ROLLOUT_EVALUATION_INTERVAL_MS) */
  rollouts?: { clock?: Clock; evaluateEveryMs?: number };
  /** the cap of downloads in flight and the Retry-After over it (defaults and reasons in services/load-shaping.ts) */
  downloads?: Partial<DownloadLimits>;
}

export interface RunningServer {
  url: string;
  store: Store;
  /** evaluates open staged rollouts now (what the server's timer runs) */
  evaluateRollouts(): Promise<void>;
  /** resolves once the badge checks answered so far are recorded (a check is answered before its record commits) */
  checksRecorded(): Promise<void>;
  close(): Promise<void>;
}

const PURGE_INTERVAL_MS = 60 * 60 * 1000;

/** The server could not listen (port in use, not permitted, address not on this machine). */
export class ListenError extends Error {
  override name = "ListenError";
}

export function createLogger(env = process.env): Logger {
  return pino({ level: env.LOG_LEVEL ?? "info" }, pino.destination(2));
}

export async function startServer(options: ServerOptions): Promise<RunningServer> {
  const logger = options.logger ?? createLogger();
  const webhookConfig = resolveWebhookConfig(options.webhooks);
  const store = await openStore({
    dataDir: options.dataDir,
    databaseUrl: options.databaseUrl,
    postgres: options.postgres,
    sync: options.sync,
    serving: { onCheckpointError: (message) => logger.error({ message }, "WAL checkpoint failed") },
  });
  await options.prepare?.(store, logger);
  const sender = new WebhookSender({
    resolve: webhookConfig.resolve,
    timeoutMs: webhookConfig.timeoutMs,
    ca: webhookConfig.ca,
    maxSocketsPerOrigin: webhookConfig.perEndpointConcurrency,
  });
  const load = new ServerLoad();
  const worker = new DeliveryWorker({ db: store.db, sender, config: webhookConfig, logger, load });
  const webhooks = { sender, config: webhookConfig, wake: worker.wake };
  const { handler, gate, rollouts, checksRecorded } = await createApp({
    store,
    releases: openReleaseStores(store.db, options.dataDir, options.releases, store.changes),
    logger,
    webhooks,
    hotRoutes: options.hotRoutes,
    authFailures: options.authFailures,
    downloads: options.downloads,
    mcpAllowedOrigins: options.mcpAllowedOrigins,
    clock: options.rollouts?.clock,
  });
  await gate.purgeExpired();

  const limits = { ...CONNECTION_LIMITS, ...options.connections };
  const server = http.createServer(
    { headersTimeout: limits.headersTimeoutMs, requestTimeout: limits.requestTimeoutMs, connectionsCheckingInterval: TIMEOUT_CHECK_INTERVAL_MS },
    (req, res) => {
      load.noteRequest();
      handler(req, res);
    },
  );
  server.keepAliveTimeout = limits.keepAliveTimeoutMs;
  server.timeout = limits.idleTimeoutMs;
  server.maxConnections = limits.maxConnections;
  try {
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(options.port, options.host, () => {
        server.off("error", reject);
        resolve();
      });
    });
  } catch (error) {
    await store.close();
    throw new ListenError(`cannot listen on ${options.host}:${options.port}: ${(error as Error).message}`, { cause: error });
  }
  const purge = setInterval(() => {
    gate.purgeExpired().catch((err: unknown) => logger.error({ err }, "idempotency key purge failed"));
  }, PURGE_INTERVAL_MS);
  purge.unref();
  const evaluateEveryMs = options.rollouts?.evaluateEveryMs ?? ROLLOUT_EVALUATION_INTERVAL_MS;
  const evaluation =
    evaluateEveryMs > 0
      ? setInterval(() => rollouts.evaluateAll().catch((err: unknown) => logger.error({ err }, "rollout evaluation failed")), evaluateEveryMs)
      : undefined;
  evaluation?.unref();
  worker.start();
  const { port } = server.address() as AddressInfo;
  const host = options.host.includes(":") ? `[${options.host}]` : options.host;
  const url = `http://${host}:${port}`;
  logger.info({ url, dataDir: options.dataDir, store: store.kind }, "listening");

  return {
    url,
    store,
    evaluateRollouts: () => rollouts.evaluateAll(),
    checksRecorded,
    async close() {
      clearInterval(purge);
      clearInterval(evaluation);
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
      });
      await worker.stop();
      // The last checks were answered before their records committed: those records are written first.
      await checksRecorded();
      await store.close();
    },
  };
}
