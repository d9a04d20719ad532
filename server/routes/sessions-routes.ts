import { Router } from "express";
import type { Kysely } from "kysely";
import { z } from "zod";
import type { CursorCodec } from "../cursor.ts";
import { principalOf, requireScope } from "../http/auth-middleware.ts";
import { requireIdempotencyKey, sendIdempotent } from "../http/idempotent-write.ts";
import { limitParam, parseInput, pathId } from "../http/validation.ts";
import { isoDate } from "../iso-date.ts";
import type { IdempotencyGate } from "../services/idempotency.ts";
import * as sessions from "../services/sessions.ts";
import { SESSION_STATUSES } from "../services/sessions.ts";
import type { Database } from "../store/schema.ts";

export const listQuery = z.strictObject({
  date: isoDate.optional(),
  course_code: z.string().min(1).max(100).optional(),
  status: z.enum(SESSION_STATUSES).optional(),
  limit: limitParam,
  cursor: z.string().min(1).max(2000).optional(),
});

export function sessionsRoutes(deps: { db: Kysely<Database>; codec: CursorCodec; gate: IdempotencyGate }): Router {
  const router = Router();

  router.get("/sessions", requireScope("attendance:read"), async (req, res) => {
    const query = parseInput(listQuery, req.query, "query");
    res.json(await sessions.listSessions(deps.db, deps.codec, principalOf(req).livemode, query));
  });

  router.get("/sessions/:id", requireScope("attendance:read"), async (req, res) => {
    res.json(await sessions.getSession(deps.db, principalOf(req).livemode, pathId(req.params)));
  });

  router.get("/sessions/:id/roll", requireScope("attendance:read"), async (req, res) => {
    res.json(await sessions.getRoll(deps.db, principalOf(req).livemode, pathId(req.params)));
  });

  for (const action of Object.keys(sessions.SESSION_ACTIONS) as sessions.SessionAction[]) {
    router.post(`/sessions/:id/${action}`, requireScope("sessions:write"), async (req, res) => {
      const key = requireIdempotencyKey(req);
      const livemode = principalOf(req).livemode;
      await sendIdempotent(req, res, deps.gate, key, async (trx) => ({
        status: 200,
        body: await sessions.transitionSession(trx, pathId(req.params), action, livemode),
      }));
    });
  }

  return router;
}
