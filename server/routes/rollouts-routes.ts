// Staged rollouts under /v1 (issue 24): create one for a canary release whose canary reported
// ok, list the mode's rollouts (newest first: the history of its rollouts), read one with its
// counts per stage and its halt, and the operator's actions. The rules are services/rollouts.ts's;
// a key reaches its own mode's rollouts only, so a test key never moves the live fleet.
import { Router } from "express";
import type { Kysely } from "kysely";
import { z } from "zod";
import { ApiError, releaseStoreBusy } from "../errors.ts";
import { principalOf, requireScope } from "../http/auth-middleware.ts";
import { requireIdempotencyKey, sendIdempotent } from "../http/idempotent-write.ts";
import { idParam, parseInput, pathId } from "../http/validation.ts";
import { PublishRefusal } from "../releases/publishing.ts";
import { ReleaseLockedError, type ReleaseStores } from "../releases/release-store.ts";
import type { IdempotencyGate } from "../services/idempotency.ts";
import { rolloutSettings } from "../services/rollout-rules.ts";
import { actOnRollout, createRollout, getRolloutView, listRolloutViews, ROLLOUT_ACTIONS, type Clock } from "../services/rollouts.ts";
import type { Database } from "../store/schema.ts";

export const createBody = rolloutSettings;
export const listQuery = z.strictObject({});
export const actionBody = z.strictObject({});
const rolloutId = idParam("rol");

/** What completing a rollout (promoting its release) may meet besides the rules' refusals. */
function releaseError(error: unknown): never {
  if (error instanceof PublishRefusal) {
    const first = error.reasons[0]!;
    throw new ApiError(409, "invalid_request_error", first.code, `Cannot complete the rollout: ${first.message}.`);
  }
  if (error instanceof ReleaseLockedError) throw releaseStoreBusy();
  throw error;
}

function checkedId(params: Record<string, string | string[] | undefined>): string {
  const id = pathId(params);
  const parsed = rolloutId.safeParse(id);
  if (!parsed.success) throw new ApiError(404, "invalid_request_error", "resource_missing", `No such rollout: '${id.slice(0, 60)}'.`, { param: "id" });
  return id;
}

export function rolloutsRoutes(deps: { db: Kysely<Database>; gate: IdempotencyGate; releases: ReleaseStores; clock: Clock }): Router {
  const router = Router();

  router.get("/rollouts", requireScope("releases:read"), async (req, res) => {
    parseInput(listQuery, req.query, "query");
    const livemode = principalOf(req).livemode;
    res.json({ object: "list", livemode: livemode === 1, has_more: false, next_cursor: null, data: await listRolloutViews(deps.db, livemode, deps.clock()) });
  });

  router.get("/rollouts/:id", requireScope("releases:read"), async (req, res) => {
    res.json(await getRolloutView(deps.db, principalOf(req).livemode, checkedId(req.params), deps.clock()));
  });

  router.post("/rollouts", requireScope("releases:write"), async (req, res) => {
    const key = requireIdempotencyKey(req);
    const settings = parseInput(createBody, req.body, "body");
    const releases = deps.releases[principalOf(req).livemode];
    await sendIdempotent(req, res, deps.gate, key, async (trx) => ({ status: 201, body: await createRollout(trx, releases, settings, deps.clock()) }));
  });

  for (const action of ROLLOUT_ACTIONS) {
    router.post(`/rollouts/:id/${action}`, requireScope("releases:write"), async (req, res) => {
      const key = requireIdempotencyKey(req);
      parseInput(actionBody, req.body ?? {}, "body");
      const id = checkedId(req.params);
      const releases = deps.releases[principalOf(req).livemode];
      await sendIdempotent(req, res, deps.gate, key, async (trx) => {
        try {
          return { status: 200, body: await actOnRollout(trx, releases, id, action, deps.clock()) };
        } catch (error) {
          return releaseError(error);
        }
      });
    });
  }

  return router;
}
