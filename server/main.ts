// The composition root: opens the store in the data directory, builds the app, listens.
import http from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";
import { pino, type Logger } from "pino";
import { createApp } from "./app.ts";
import { openReleaseStore } from "./releases/open-release-store.ts";
import type { ReleaseStoreKind } from "./releases/release-store.ts";
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
}

export interface RunningServer {
  url: string;
  store: Store;
  close(): Promise<void>;
}

const PURGE_INTERVAL_MS = 60 * 60 * 1000;

/** The server could not listen (port in use, not permitted, address not on this machine). */
export class ListenError extends Error {
  override name = "ListenError";
}

/** The PostgreSQL database URL: the flag, else DATABASE_URL; undefined (SQLite) when neither is set. */
export function resolveDatabaseUrl(flag: string | undefined, env = process.env): string | undefined {
  return flag ?? (env.DATABASE_URL || undefined);
}

/** The data directory: the flag, else BADGEBENCH_DATA, else ./var. */
export function resolveDataDir(flag: string | undefined, env = process.env): string {
  return path.resolve(flag ?? env.BADGEBENCH_DATA ?? "var");
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
  const { handler, gate } = await createApp({
    store,
    releases: openReleaseStore(store.db, options.dataDir, options.releases),
    logger,
    webhooks,
    hotRoutes: options.hotRoutes,
  });
  await gate.purgeExpired();

  const server = http.createServer((req, res) => {
    load.noteRequest();
    handler(req, res);
  });
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
  worker.start();
  const { port } = server.address() as AddressInfo;
  const host = options.host.includes(":") ? `[${options.host}]` : options.host;
  const url = `http://${host}:${port}`;
  logger.info({ url, dataDir: options.dataDir, store: store.kind }, "listening");

  return {
    url,
    store,
    async close() {
      clearInterval(purge);
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
      });
      await worker.stop();
      await store.close();
    },
  };
}
