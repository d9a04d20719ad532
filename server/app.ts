// createApp wires the HTTP surface from its dependencies and never listens; the composition
// root (server/main.ts) opens the store and starts listening.
import { randomBytes } from "node:crypto";
import type { IncomingMessage, RequestListener, ServerResponse } from "node:http";
import express from "express";
import type { Logger } from "pino";
import { CursorCodec } from "./cursor.ts";
import { AuthFailureLimiter, shedFailedAuthentication, tooManyFailures, type AuthFailureBudget } from "./http/auth-failures.ts";
import { bearerAuth, bearerToken } from "./http/auth-middleware.ts";
import { errorMiddleware, notFoundRoute } from "./http/error-middleware.ts";
import { withHotRoutes, type HotRoute } from "./http/hot-routes.ts";
import { jsonBody } from "./http/request-body.ts";
import type { Step } from "./http/steps.ts";
import { BADGE_PATHS, BADGE_PREFIX } from "../firmware/index.ts";
import { badgeErrorMiddleware, tooManyBadgeFailures } from "./badge/badge-http.ts";
import { badgeRoutes } from "./badge/badge-routes.ts";
import { fleetPageRoutes } from "./fleet-page/fleet-page-routes.ts";
import { mcpErrorHandler, mcpRoutes } from "./mcp/mcp-routes.ts";
import type { ReleaseStores } from "./releases/release-store.ts";
import { attendanceRoutes, createRecordSteps } from "./routes/attendance-routes.ts";
import { devicesRoutes } from "./routes/devices-routes.ts";
import { releasesRoutes } from "./routes/releases-routes.ts";
import { rolloutsRoutes } from "./routes/rollouts-routes.ts";
import { eventsRoutes } from "./routes/events-routes.ts";
import { openApiRoutes } from "./routes/openapi-routes.ts";
import { webhookEndpointsRoutes } from "./routes/webhook-endpoints-routes.ts";
import { sessionsRoutes } from "./routes/sessions-routes.ts";
import { cachedAuthenticator, type Authenticate } from "./services/api-keys.ts";
import { cachedDeviceAuthenticator, type AuthenticateDevice } from "./services/devices.ts";
import { IdempotencyGate } from "./services/idempotency.ts";
import { cachedOpenRollout, RolloutEvaluator, type Clock } from "./services/rollouts.ts";
import { DOWNLOAD_LIMITS, DownloadGate, type DownloadLimits } from "./services/load-shaping.ts";
import type { WebhookContext } from "./services/webhook-endpoints.ts";
import type { Store } from "./store/database.ts";
import { getOrCreateSetting } from "./store/settings-store.ts";
import { WriteBatcher } from "./store/write-batcher.ts";

export const MAX_BODY_BYTES = 64 * 1024;

export interface AppDeps {
  store: Store;
  releases: ReleaseStores;
  logger: Logger;
  webhooks: WebhookContext;
  /** false: every request through Express, for tests that compare the hot routes with it (default true) */
  hotRoutes?: boolean;
  /** failed authentications allowed per client address (defaults in http/auth-failures.ts) */
  authFailures?: Partial<AuthFailureBudget>;
  /** browser origins besides the server's own that may call /api/mcp */
  mcpAllowedOrigins?: readonly string[];
  /**
   * The time badge syncs, downloads and staged rollouts go by (default: the system clock): a
   * rollout compares report and download times with its own, so they share one clock. Tests
   * move it instead of waiting.
   */
  clock?: Clock;
  /** the cap of downloads in flight and the Retry-After over it (defaults in services/load-shaping.ts) */
  downloads?: Partial<DownloadLimits>;
}

export interface App {
  /** the hot routes (http/hot-routes.ts) in front of the Express app */
  handler: RequestListener;
  gate: IdempotencyGate;
  /** what moves staged rollouts on their own; the server's timer calls evaluateAll */
  rollouts: RolloutEvaluator;
  /** resolves once the badge checks answered so far are recorded (a check is answered before its record commits) */
  checksRecorded(): Promise<void>;
}

export async function createApp({ store, releases, logger, webhooks, hotRoutes = true, authFailures, mcpAllowedOrigins = [], clock = () => new Date(), downloads }: AppDeps): Promise<App> {
  const cursorSecret = await getOrCreateSetting(store.db, "cursor_secret", () => randomBytes(32).toString("hex"));
  const codec = new CursorCodec(Buffer.from(cursorSecret, "hex"));
  const writes = new WriteBatcher(store.db, store.logSynced);
  const checksRecorded = () => writes.answeredAheadSettled();
  const gate = new IdempotencyGate(writes);
  const deps = { db: store.db, codec, gate };
  const rollouts = new RolloutEvaluator({ db: store.db, writes, releases, clock, logger });

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
  const appErrors = errorMiddleware(logger);
  const authenticate = cachedAuthenticator(store.db, store.changes);
  const authenticateDevice = cachedDeviceAuthenticator(store.db, store.changes);
  // One budget per address for API keys and device tokens alike.
  const failures = new AuthFailureLimiter(logger, authFailures);
  const auth = bearerAuth(authenticate, failures);
  // The steps every /v1 request and every sync passes before its router: Express mounts these
  // lists, and the hot routes (http/hot-routes.ts) start with the same lists, so a step added
  // here runs on both paths.
  const v1Entry: Step[] = [wakeDeliveryAfterWrite, auth, jsonBody(MAX_BODY_BYTES)];
  const syncEntry: Step[] = [wakeDeliveryAfterWrite];
  const v1 = express.Router();
  v1.use(attendanceRoutes(deps));
  v1.use(sessionsRoutes(deps));
  v1.use(devicesRoutes({ ...deps, releases, checksRecorded }));
  v1.use(webhookEndpointsRoutes({ ...deps, webhooks, logSynced: store.logSynced }));
  v1.use(eventsRoutes(deps));
  v1.use(releasesRoutes({ ...deps, releases }));
  v1.use(rolloutsRoutes({ ...deps, releases, clock }));
  v1.use(openApiRoutes());
  app.use("/v1", ...v1Entry, v1);
  app.use(BADGE_PATHS.sync, ...syncEntry);
  const downloadGate = new DownloadGate({ ...DOWNLOAD_LIMITS, ...downloads });
  const badge = badgeRoutes({ openRollout: cachedOpenRollout(store.db, store.changes), authenticateDevice, writes, releases, logger, failures, rollouts, clock, downloads: downloadGate }, appErrors);
  app.use(BADGE_PREFIX, badge.router);
  app.use("/api/mcp", mcpRoutes({ db: store.db, codec, logger, logSynced: store.logSynced, auth, allowedOrigins: mcpAllowedOrigins }));
  app.use("/fleet", fleetPageRoutes());

  app.use(notFoundRoute);
  app.use(appErrors);
  const shed = failedAuthenticationGate(failures, authenticate, authenticateDevice, logger, appErrors);
  if (!hotRoutes) return { handler: shedFailedAuthentication(shed, app), gate, rollouts, checksRecorded };
  // A hot route runs what Express runs for its path: the entry list above, then the router's
  // own steps (the same arrays its router mounts). test/server/hot-routes.test.ts compares the answers.
  const create: HotRoute = { method: "POST", path: "/v1/attendance", steps: [...v1Entry, ...createRecordSteps(deps)], onError: [appErrors] };
  const sync: HotRoute = { ...badge.sync, steps: [...syncEntry, ...badge.sync.steps] };
  return { handler: shedFailedAuthentication(shed, withHotRoutes([create, badge.check, sync], app)), gate, rollouts, checksRecorded };
}

const noNext = () => {};

/** What a client past its failed-authentication budget is checked against, and refused with, on each authenticated path. */
function failedAuthenticationGate(
  limiter: AuthFailureLimiter,
  authenticate: Authenticate,
  authenticateDevice: AuthenticateDevice,
  logger: Logger,
  appErrors: ReturnType<typeof errorMiddleware>,
) {
  const badgeErrors = badgeErrorMiddleware(logger);
  const mcpErrors = mcpErrorHandler(logger);
  // Express matches paths without regard to case; so does this.
  const pathOf = (req: IncomingMessage) => (req.url ?? "").toLowerCase();
  return {
    limiter,
    credentialIsValid(req: IncomingMessage): Promise<boolean> | undefined {
      const path = pathOf(req);
      const token = bearerToken(req);
      if (path.startsWith(BADGE_PREFIX)) return token === undefined ? Promise.resolve(false) : authenticateDevice(token).then((device) => device !== undefined);
      if (path.startsWith("/v1") || path.startsWith("/api/mcp")) return token === undefined ? Promise.resolve(false) : authenticate(token).then((principal) => principal !== undefined);
      return undefined;
    },
    refuse(req: IncomingMessage, res: ServerResponse, retryAfterS: number) {
      const path = pathOf(req);
      if (path.startsWith(BADGE_PREFIX)) badgeErrors(tooManyBadgeFailures(retryAfterS), req, res, noNext);
      else if (path.startsWith("/api/mcp")) mcpErrors(tooManyFailures(retryAfterS), req, res);
      else appErrors(tooManyFailures(retryAfterS), req, res, noNext);
    },
  };
}
