// The badge endpoints under /api/badge: device-token auth, a plain-text body of at most
// MAX_REQUEST_BYTES (read whatever the Content-Type says: badges are not strict about it), and
// letter-line answers for errors too.
import express, { Router } from "express";
import type { Kysely } from "kysely";
import type { Logger } from "pino";
import { MAX_REQUEST_BYTES } from "../../firmware/index.ts";
import type { ReleaseStore } from "../releases/release-store.ts";
import type { Database } from "../store/schema.ts";
import type { WriteBatcher } from "../store/write-batcher.ts";
import { badgeErrorMiddleware, BadgeError, deviceAuth } from "./badge-http.ts";
import { otaCheck } from "./ota-check.ts";
import { otaDownload } from "./ota-download.ts";
import { badgeSync } from "./sync.ts";

export function badgeRoutes(deps: { db: Kysely<Database>; writes: WriteBatcher; releases: ReleaseStore; logger: Logger }): Router {
  const router = Router();
  const { writes } = deps;
  router.use(deviceAuth(deps.db));
  const textBody = express.text({ type: () => true, limit: MAX_REQUEST_BYTES, defaultCharset: "utf-8" });
  router.post("/ota/check", textBody, otaCheck(writes, deps.releases));
  router.get("/ota/download", otaDownload(writes, deps.releases, deps.logger));
  router.post("/sync", textBody, badgeSync(writes));
  router.use((req) => {
    throw new BadgeError(404, "route_unknown", `no badge endpoint ${req.method} ${req.path}`);
  });
  router.use(badgeErrorMiddleware(deps.logger));
  return router;
}
