// createApp wires the HTTP surface from its dependencies and never listens; the composition
// root (server/main.ts) opens the store and starts listening.
import { randomBytes } from "node:crypto";
import type { RequestListener } from "node:http";
import express from "express";
import type { Logger } from "pino";
import { CursorCodec } from "./cursor.ts";
import { bearerAuth } from "./http/auth-middleware.ts";
import { errorMiddleware, notFoundRoute } from "./http/error-middleware.ts";
import { withHotRoutes, type HotRoute, type Step } from "./http/hot-routes.ts";
import { jsonBody } from "./http/request-body.ts";
import { BADGE_PREFIX, badgeRoutes } from "./badge/badge-routes.ts";
import { fleetPageRoutes } from "./fleet-page/fleet-page-routes.ts";
import { mcpRoutes } from "./mcp/mcp-routes.ts";
import type { ReleaseStore } from "./releases/release-store.ts";
import { attendanceRoutes, createRecordSteps } from "./routes/attendance-routes.ts";
import { devicesRoutes } from "./routes/devices-routes.ts";
import { releasesRoutes } from "./routes/releases-routes.ts";
import { eventsRoutes } from "./routes/events-routes.ts";
import { webhookEndpointsRoutes } from "./routes/webhook-endpoints-routes.ts";
import { sessionsRoutes } from "./routes/sessions-routes.ts";
import { cachedAuthenticator } from "./services/api-keys.ts";
import { IdempotencyGate } from "./services/idempotency.ts";
import type { WebhookContext } from "./services/webhook-endpoints.ts";
import type { Store } from "./store/database.ts";
import { getOrCreateSetting } from "./store/settings-store.ts";
import { WriteBatcher } from "./store/write-batcher.ts";

export const MAX_BODY_BYTES = 64 * 1024;

export interface AppDeps {
  store: Store;
  releases: ReleaseStore;
  logger: Logger;
  webhooks: WebhookContext;
  /** false: every request through Express, for tests that compare the hot routes with it (default true) */
  hotRoutes?: boolean;
}

export interface App {
  /** the hot routes (http/hot-routes.ts) in front of the Express app */
  handler: RequestListener;
  gate: IdempotencyGate;
}

export async function createApp({ store, releases, logger, webhooks, hotRoutes = true }: AppDeps): Promise<App> {
  const cursorSecret = await getOrCreateSetting(store.db, "cursor_secret", () => randomBytes(32).toString("hex"));
  const codec = new CursorCodec(Buffer.from(cursorSecret, "hex"));
  const writes = new WriteBatcher(store.db, store.logSynced);
  const gate = new IdempotencyGate(writes);
  const deps = { db: store.db, codec, gate };

  const app = express();
  app.disable("x-powered-by");
  app.set("etag", false);
  // Events are written by /v1 writes and badge syncs only, committed before the response is
  // sent: the delivery worker is woken then. A check or download writes none, so a fleet's
  // check-ins cost the worker no tick.
  const wakeDeliveryAfterWrite: Step = (req, res, next) => {
    if (req.method !== "GET" && req.method !== "HEAD") res.once("finish", webhooks.wake);
    next();
  };
  app.use("/v1", wakeDeliveryAfterWrite);
  app.use("/api/badge/sync", wakeDeliveryAfterWrite);

  const appErrors = errorMiddleware(logger);
  const authenticate = cachedAuthenticator(store.db, store.kind === "sqlite" ? store.dataVersion : undefined);
  const auth = bearerAuth(authenticate);
  const json = jsonBody(MAX_BODY_BYTES);
  const v1 = express.Router();
  v1.use(auth);
  v1.use(json);
  v1.use(attendanceRoutes(deps));
  v1.use(sessionsRoutes(deps));
  v1.use(devicesRoutes({ ...deps, releases }));
  v1.use(webhookEndpointsRoutes({ ...deps, webhooks, logSynced: store.logSynced }));
  v1.use(eventsRoutes(deps));
  v1.use(releasesRoutes({ ...deps, releases }));
  app.use("/v1", v1);
  const badge = badgeRoutes({ db: store.db, writes, releases, logger }, appErrors);
  app.use(BADGE_PREFIX, badge.router);
  app.use("/api/mcp", mcpRoutes({ db: store.db, codec, logger, logSynced: store.logSynced, authenticate }));
  app.use("/fleet", fleetPageRoutes());

  app.use(notFoundRoute);
  app.use(appErrors);
  if (!hotRoutes) return { handler: app, gate };
  // The hot routes run what Express runs for their paths: a middleware added on the way there
  // (an app.use above, a v1.use before attendanceRoutes, the badge router's use before
  // /ota/check) belongs in their steps too. test/server/hot-routes.test.ts compares the answers.
  const create: HotRoute = {
    method: "POST",
    path: "/v1/attendance",
    steps: [wakeDeliveryAfterWrite, auth, json, ...createRecordSteps(deps)],
    onError: [appErrors],
  };
  const sync: HotRoute = { ...badge.sync, steps: [wakeDeliveryAfterWrite, ...badge.sync.steps] };
  return { handler: withHotRoutes([create, badge.check, sync], app), gate };
}
