// /v1/events (scope events:read): the outbox as a list, so an integrator can catch up on what
// a webhook outage made it miss. Oldest first; `since` (ISO 8601) starts the walk at a time.
import { Router } from "express";
import type { Kysely } from "kysely";
import { z } from "zod";
import { filterFingerprint, toPage, type CursorCodec } from "../cursor.ts";
import { notFound } from "../errors.ts";
import { principalOf, requireScope } from "../http/auth-middleware.ts";
import { limitParam, parseInput, pathId } from "../http/validation.ts";
import { EVENT_TYPES } from "../services/webhook-endpoints.ts";
import type { Database } from "../store/schema.ts";
import { findEvent, listEvents } from "../store/webhooks-store.ts";

const listQuery = z.strictObject({
  type: z.enum(EVENT_TYPES).optional(),
  since: z.iso.datetime({ offset: true, message: "must be an ISO 8601 date-time such as 2026-11-25T08:00:00Z" }).optional(),
  limit: limitParam,
  cursor: z.string().min(1).max(2000).optional(),
});

export function eventsRoutes(deps: { db: Kysely<Database>; codec: CursorCodec }): Router {
  const router = Router();
  const scope = requireScope("events:read");

  router.get("/events", scope, async (req, res) => {
    const { limit, cursor, ...filterParams } = parseInput(listQuery, req.query, "query");
    const filters = filterFingerprint("events", filterParams);
    const position = cursor === undefined ? undefined : deps.codec.decode(cursor, filters);
    const since = filterParams.since === undefined ? undefined : new Date(filterParams.since).toISOString();
    const rows = await listEvents(deps.db, { livemode: principalOf(req).livemode, type: filterParams.type, since, after: position?.after, limit: limit + 1 });
    res.json(toPage(rows, limit, { codec: deps.codec, filters, keyOf: (row) => [row.created_at, row.id], view: (row) => JSON.parse(row.payload) as unknown }));
  });

  router.get("/events/:id", scope, async (req, res) => {
    const id = pathId(req.params);
    const event = await findEvent(deps.db, principalOf(req).livemode, id);
    if (!event) throw notFound("event", id);
    res.json(JSON.parse(event.payload));
  });

  return router;
}
