// The badge endpoints under /api/badge: device-token auth, a plain-text body of at most
// MAX_REQUEST_BYTES (read whatever the Content-Type says: badges are not strict about it), and
// letter-line answers for errors too.
import { Router } from "express";
import type { Kysely } from "kysely";
import type { Logger } from "pino";
import { MAX_REQUEST_BYTES } from "../../firmware/index.ts";
import type { ErrorStep, HotRoute } from "../http/hot-routes.ts";
import { textBody } from "../http/request-body.ts";
import type { ReleaseStore } from "../releases/release-store.ts";
import type { Database } from "../store/schema.ts";
import type { WriteBatcher } from "../store/write-batcher.ts";
import { badgeErrorMiddleware, BadgeError, deviceAuth } from "./badge-http.ts";
import { otaCheck } from "./ota-check.ts";
import { otaDownload } from "./ota-download.ts";
import { badgeSync } from "./sync.ts";

export const BADGE_PREFIX = "/api/badge";

/**
 * The router mounted at BADGE_PREFIX, and the OTA check and the sync as hot routes
 * (http/hot-routes.ts): the same device auth, body parser, handler and error middleware, in the
 * router's order. `appErrors` is the app's error middleware, where Express sends what the badge
 * one throws.
 */
export function badgeRoutes(
  deps: { db: Kysely<Database>; writes: WriteBatcher; releases: ReleaseStore; logger: Logger },
  appErrors: ErrorStep,
): { router: Router; check: HotRoute; sync: HotRoute } {
  const router = Router();
  const { writes } = deps;
  const auth = deviceAuth(deps.db);
  const text = textBody(MAX_REQUEST_BYTES);
  const check = otaCheck(writes, deps.releases);
  const errors = badgeErrorMiddleware(deps.logger);
  router.use(auth);
  router.post("/ota/check", text, check);
  router.get("/ota/download", otaDownload(writes, deps.releases, deps.logger));
  const sync = badgeSync(writes);
  router.post("/sync", text, sync);
  router.use((req) => {
    throw new BadgeError(404, "route_unknown", `no badge endpoint ${req.method} ${req.path}`);
  });
  router.use(errors);
  const onError = [errors, appErrors];
  return {
    router,
    check: { method: "POST", path: `${BADGE_PREFIX}/ota/check`, steps: [auth, text, check], onError },
    sync: { method: "POST", path: `${BADGE_PREFIX}/sync`, steps: [auth, text, sync], onError },
  };
}
