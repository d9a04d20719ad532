// Firmware releases under /v1: the list (each with its canary and the canary's last report) and
// promote. Promote runs the same promoteRelease as `badgebench release promote`: refused with
// the reason until the canary reported ok, unless forced with a reason. A key lists and promotes
// its own mode's releases only: a test key never reaches the releases live badges are offered.
import { Router } from "express";
import type { Kysely } from "kysely";
import { z } from "zod";
import { ApiError, releaseStoreBusy } from "../errors.ts";
import { principalOf, requireScope } from "../http/auth-middleware.ts";
import { requireIdempotencyKey, sendIdempotent } from "../http/idempotent-write.ts";
import { parseInput } from "../http/validation.ts";
import { PROMOTE_REASON_MAX_CHARS, promoteRelease, PublishRefusal } from "../releases/publishing.ts";
import { ReleaseLockedError, type ReleaseStores } from "../releases/release-store.ts";
import type { IdempotencyGate } from "../services/idempotency.ts";
import { listReleases } from "../services/releases.ts";
import type { Database } from "../store/schema.ts";

export const listQuery = z.strictObject({});

export const promoteBody = z.strictObject({
  force: z.boolean().optional().default(false),
  reason: z.string().min(1).max(PROMOTE_REASON_MAX_CHARS).optional(),
});

/** A refusal as the API states it: an unknown release is 404, a bad reason 400, the rest 409. */
function refusalError(refusal: PublishRefusal): ApiError {
  const first = refusal.reasons[0]!;
  const message = `Cannot promote: ${first.message}.`;
  if (first.code === "release_unknown") return new ApiError(404, "invalid_request_error", first.code, message, { param: "version" });
  if (first.code === "reason_missing" || first.code === "reason_invalid") {
    return new ApiError(400, "invalid_request_error", first.code, message, { param: "reason" });
  }
  return new ApiError(409, "invalid_request_error", first.code, message);
}

export function releasesRoutes(deps: { db: Kysely<Database>; gate: IdempotencyGate; releases: ReleaseStores }): Router {
  const router = Router();

  router.get("/releases", requireScope("releases:read"), async (req, res) => {
    parseInput(listQuery, req.query, "query");
    const livemode = principalOf(req).livemode;
    const manifest = await deps.releases[livemode].read();
    res.json({
      object: "list",
      livemode: livemode === 1,
      has_more: false,
      next_cursor: null,
      fleet: manifest.fleet,
      data: await listReleases(deps.db, livemode, manifest),
    });
  });

  router.post("/releases/:version/promote", requireScope("releases:write"), async (req, res) => {
    const key = requireIdempotencyKey(req);
    const { force, reason } = parseInput(promoteBody, req.body ?? {}, "body");
    const version = String(req.params.version);
    const livemode = principalOf(req).livemode;
    const releases = deps.releases[livemode];
    await sendIdempotent(req, res, deps.gate, key, async (trx) => {
      try {
        await promoteRelease(trx, releases, version, { force, reason });
      } catch (error) {
        if (error instanceof PublishRefusal) throw refusalError(error);
        if (error instanceof ReleaseLockedError) throw releaseStoreBusy();
        throw error;
      }
      const view = (await listReleases(trx, livemode, await releases.read(trx))).find((r) => r.version === version);
      return { status: 200, body: view };
    });
  });

  return router;
}
