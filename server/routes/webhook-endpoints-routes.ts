// /v1/webhook_endpoints (scope webhooks:write): create, list, retrieve, update, delete, roll
// the secret, test delivery, resend one event, and the delivery log.
import { Router } from "express";
import type { Kysely } from "kysely";
import { z } from "zod";
import type { CursorCodec } from "../cursor.ts";
import { invalidParam } from "../errors.ts";
import { principalOf, requireScope } from "../http/auth-middleware.ts";
import { requireIdempotencyKey, sendIdempotent } from "../http/idempotent-write.ts";
import { idParam, limitParam, parseInput, pathId } from "../http/validation.ts";
import type { IdempotencyGate } from "../services/idempotency.ts";
import { EVENT_TYPES, type EventType } from "../services/outbox.ts";
import * as webhooks from "../services/webhook-endpoints.ts";
import type { Database } from "../store/schema.ts";

const url = z.string().min(1, "must not be empty").max(webhooks.MAX_URL_LENGTH, `must be at most ${webhooks.MAX_URL_LENGTH} characters`);
const eventList = z.array(z.string().max(100)).min(1, "must list at least one event type, or '*' for all");
const description = z.string().max(500, "must be at most 500 characters");

export const createBody = z.strictObject({ url, enabled_events: eventList, description: description.optional() });
export const updateBody = z
  .strictObject({ url: url.optional(), enabled_events: eventList.optional(), description: description.nullable().optional(), disabled: z.boolean().optional() })
  .refine((body) => Object.keys(body).length > 0, { path: ["body"], message: "name at least one of url, enabled_events, description, disabled" });
export const testBody = z.strictObject({ type: z.string().max(100) });
export const resendBody = z.strictObject({ event: idParam("evt") });
export const listQuery = z.strictObject({ limit: limitParam, cursor: z.string().min(1).max(2000).optional() });
export const attemptsQuery = z.strictObject({ event: idParam("evt").optional(), limit: limitParam, cursor: z.string().min(1).max(2000).optional() });

const knownTypes: readonly string[] = EVENT_TYPES;

function checkEventTypes(types: string[]): string[] {
  for (const type of types) {
    if (type !== "*" && !knownTypes.includes(type)) {
      throw invalidParam("enabled_events", `Unknown event type '${type.slice(0, 100)}'. Known types: ${knownTypes.join(", ")}, or '*' for all.`, "event_type_unknown");
    }
  }
  return types.includes("*") ? ["*"] : [...new Set(types)];
}

/** `logSynced`: see Store.logSynced; a delete commits outside the group commit and is answered once it is on disk. */
export function webhookEndpointsRoutes(deps: {
  db: Kysely<Database>;
  codec: CursorCodec;
  gate: IdempotencyGate;
  webhooks: webhooks.WebhookContext;
  logSynced: () => Promise<void>;
}): Router {
  const router = Router();
  const scope = requireScope("webhooks:write");

  router.post("/webhook_endpoints", scope, async (req, res) => {
    const key = requireIdempotencyKey(req);
    const body = parseInput(createBody, req.body, "body");
    const { livemode } = principalOf(req);
    const input = { ...body, enabled_events: checkEventTypes(body.enabled_events), url: await webhooks.checkEndpointUrl(deps.webhooks, livemode, body.url) };
    await sendIdempotent(req, res, deps.gate, key, (trx) => webhooks.createEndpoint(trx, livemode, input));
  });

  router.get("/webhook_endpoints", scope, async (req, res) => {
    res.json(await webhooks.listEndpoints(deps.db, deps.codec, principalOf(req).livemode, parseInput(listQuery, req.query, "query")));
  });

  router.get("/webhook_endpoints/:id", scope, async (req, res) => {
    res.json(webhooks.endpointView(await webhooks.getEndpoint(deps.db, principalOf(req).livemode, pathId(req.params))));
  });

  router.patch("/webhook_endpoints/:id", scope, async (req, res) => {
    const key = requireIdempotencyKey(req);
    const body = parseInput(updateBody, req.body, "body");
    const { livemode } = principalOf(req);
    const input = {
      ...body,
      enabled_events: body.enabled_events === undefined ? undefined : checkEventTypes(body.enabled_events),
      url: body.url === undefined ? undefined : await webhooks.checkEndpointUrl(deps.webhooks, livemode, body.url),
    };
    await sendIdempotent(req, res, deps.gate, key, (trx) => webhooks.updateEndpoint(trx, livemode, pathId(req.params), input));
  });

  router.delete("/webhook_endpoints/:id", scope, async (req, res) => {
    const deleted = await webhooks.deleteEndpoint(deps.db, principalOf(req).livemode, pathId(req.params));
    await deps.logSynced();
    res.json(deleted);
  });

  router.post("/webhook_endpoints/:id/roll_secret", scope, async (req, res) => {
    const key = requireIdempotencyKey(req);
    if (req.body !== undefined && Object.keys(req.body as object).length > 0) parseInput(z.strictObject({}), req.body, "body");
    await sendIdempotent(req, res, deps.gate, key, (trx) => webhooks.rollSecret(trx, deps.webhooks, principalOf(req).livemode, pathId(req.params)));
  });

  // A test delivery stores no state but its log line, so it takes no Idempotency-Key: each call sends anew.
  router.post("/webhook_endpoints/:id/test", scope, async (req, res) => {
    const { livemode } = principalOf(req);
    const { type } = parseInput(testBody, req.body, "body");
    if (!knownTypes.includes(type)) {
      throw invalidParam("type", `Unknown event type '${type}'. Test deliveries exist for: ${knownTypes.join(", ")}.`, "event_type_unknown");
    }
    res.json(await webhooks.sendTestDelivery(deps.db, deps.webhooks, livemode, pathId(req.params), type as EventType));
  });

  router.post("/webhook_endpoints/:id/resend", scope, async (req, res) => {
    const key = requireIdempotencyKey(req);
    const { event } = parseInput(resendBody, req.body, "body");
    await sendIdempotent(req, res, deps.gate, key, (trx) => webhooks.resendEvent(trx, principalOf(req).livemode, pathId(req.params), event));
  });

  router.get("/webhook_endpoints/:id/attempts", scope, async (req, res) => {
    const { limit, cursor, event } = parseInput(attemptsQuery, req.query, "query");
    res.json(await webhooks.listAttempts(deps.db, deps.codec, principalOf(req).livemode, pathId(req.params), { limit, cursor, event }));
  });

  return router;
}
