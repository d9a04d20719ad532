// /v1/events (scope events:read): the outbox as a list, so an integrator can catch up on what
// a webhook outage made it miss. Oldest first; `since` (ISO 8601) starts the walk at a time.
import { Router } from "express";
import type { Kysely } from "kysely";
import { z } from "zod";
import type { CursorCodec } from "../cursor.ts";
import { principalOf, requireScope } from "../http/auth-middleware.ts";
import { limitParam, parseInput, pathId } from "../http/validation.ts";
import { EVENT_TYPES, getEvent, listEvents } from "../services/outbox.ts";
import type { Database } from "../store/schema.ts";

export const listQuery = z.strictObject({
  type: z.enum(EVENT_TYPES).optional(),
  since: z.iso.datetime({ offset: true, message: "must be an ISO 8601 date-time such as 2026-11-25T08:00:00Z" }).optional(),
  limit: limitParam,
  cursor: z.string().min(1).max(2000).optional(),
});

export function eventsRoutes(deps: { db: Kysely<Database>; codec: CursorCodec }): Router {
  const router = Router();
  const scope = requireScope("events:read");

  router.get("/events", scope, async (req, res) => {
    res.json(await listEvents(deps.db, deps.codec, principalOf(req).livemode, parseInput(listQuery, req.query, "query")));
  });

  router.get("/events/:id", scope, async (req, res) => {
    res.json(await getEvent(deps.db, principalOf(req).livemode, pathId(req.params)));
  });

  return router;
}
