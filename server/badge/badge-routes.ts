// The badge endpoints under /api/badge: device-token auth, a plain-text body of at most
// MAX_REQUEST_BYTES (read whatever the Content-Type says: badges are not strict about it), and
// letter-line answers for errors too.
import { Router } from "express";
import type { Logger } from "pino";
import { BADGE_PATHS, BADGE_PREFIX, MAX_REQUEST_BYTES } from "../../firmware/index.ts";
import type { AuthFailureLimiter } from "../http/auth-failures.ts";
import type { HotRoute } from "../http/hot-routes.ts";
import { textBody } from "../http/request-body.ts";
import type { ErrorStep, Step } from "../http/steps.ts";
import type { ReleaseStores } from "../releases/release-store.ts";
import type { AuthenticateDevice } from "../services/devices.ts";
import type { Clock, OpenRollout, RolloutEvaluator } from "../services/rollouts.ts";
import type { DownloadGate } from "../services/load-shaping.ts";
import type { WriteBatcher } from "../store/write-batcher.ts";
import { badgeErrorMiddleware, BadgeError, deviceAuth } from "./badge-http.ts";
import { otaCheck } from "./ota-check.ts";
import { otaDownload } from "./ota-download.ts";
import { badgeSync } from "./sync.ts";

/**
 * The router mounted at BADGE_PREFIX, and the OTA check and the sync as hot routes
 * (http/hot-routes.ts): the same device auth, body parser, handler and error middleware, in the
 * router's order. `appErrors` is the app's error middleware, where Express sends what the badge
 * one throws.
 */
export function badgeRoutes(
  deps: {
    /** each mode's open rollout, kept until the change feed moves (services/rollouts.ts) */
    openRollout: OpenRollout;
    authenticateDevice: AuthenticateDevice;
    writes: WriteBatcher;
    releases: ReleaseStores;
    logger: Logger;
    failures: AuthFailureLimiter;
    rollouts: RolloutEvaluator;
    clock: Clock;
    downloads: DownloadGate;
  },
  appErrors: ErrorStep,
): { router: Router; check: HotRoute; sync: HotRoute } {
  const router = Router();
  const { writes } = deps;
  // Every badge path passes `entry` first; the router mounts these same arrays, and the hot
  // routes are built from them, so the two paths cannot run different steps.
  const entry: Step[] = [deviceAuth(deps.authenticateDevice, deps.failures)];
  const text = textBody(MAX_REQUEST_BYTES);
  const checkSteps: Step[] = [text, otaCheck(deps.openRollout, writes, deps.releases, deps.logger)];
  const syncSteps: Step[] = [text, badgeSync(writes, deps.rollouts, deps.clock)];
  const errors = badgeErrorMiddleware(deps.logger);
  router.use(...entry);
  router.post(routerPath(BADGE_PATHS.check), ...checkSteps);
  router.get(routerPath(BADGE_PATHS.download), otaDownload(deps.openRollout, writes, deps.releases, deps.downloads, deps.logger, deps.clock));
  router.post(routerPath(BADGE_PATHS.sync), ...syncSteps);
  router.use((req) => {
    throw new BadgeError(404, "route_unknown", `no badge endpoint ${req.method} ${req.path}`);
  });
  router.use(errors);
  const onError = [errors, appErrors];
  return {
    router,
    check: { method: "POST", path: BADGE_PATHS.check, steps: [...entry, ...checkSteps], onError },
    sync: { method: "POST", path: BADGE_PATHS.sync, steps: [...entry, ...syncSteps], onError },
  };
}

/** A badge path as the router mounted at BADGE_PREFIX sees it. */
const routerPath = (path: string) => path.slice(BADGE_PREFIX.length);
