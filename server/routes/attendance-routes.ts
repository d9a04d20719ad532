import { Router } from "express";
import type { Kysely } from "kysely";
import { z } from "zod";
import type { CursorCodec } from "../cursor.ts";
import { principalOf, requireScope } from "../http/auth-middleware.ts";
import type { Step } from "../http/steps.ts";
import { requireIdempotencyKey, sendIdempotent } from "../http/idempotent-write.ts";
import { idParam, limitParam, parseInput, pathId } from "../http/validation.ts";
import { isoDate } from "../iso-date.ts";
import * as attendance from "../services/attendance.ts";
import { RECORD_STATUSES } from "../services/attendance.ts";
import type { IdempotencyGate } from "../services/idempotency.ts";
import type { Database } from "../store/schema.ts";

const text = z.string().min(1, "must not be empty").max(100, "must be at most 100 characters");

export const listQuery = z.strictObject({
  from: isoDate.optional(),
  to: isoDate.optional(),
  course_code: text.optional(),
  session_id: idParam("ses").optional(),
  student_id: idParam("stu").optional(),
  external_id: text.optional(),
  status: z.enum(RECORD_STATUSES).optional(),
  limit: limitParam,
  cursor: z.string().min(1).max(2000).optional(),
});

export const createBody = z
  .strictObject({
    session_id: idParam("ses"),
    external_id: text.optional(),
    student_id: idParam("stu").optional(),
    status: z.enum(RECORD_STATUSES),
    reason: z.string().max(500, "must be at most 500 characters").optional(),
  })
  .refine((body) => (body.external_id === undefined) !== (body.student_id === undefined), {
    path: ["external_id"],
    message: "give exactly one of external_id or student_id",
  });

export const correctBody = z.strictObject({
  status: z.enum(RECORD_STATUSES),
  reason: z.string().trim().min(1, "must not be empty: every correction needs a reason").max(500, "must be at most 500 characters"),
});

/** After auth and the body parser: what `POST /v1/attendance` runs, under Express and as a hot route (http/hot-routes.ts). */
export function createRecordSteps(deps: { gate: IdempotencyGate }): Step[] {
  return [
    requireScope("attendance:write"),
    async (req, res) => {
      const key = requireIdempotencyKey(req);
      const body = parseInput(createBody, req.body, "body");
      await sendIdempotent(req, res, deps.gate, key, { grouped: attendance.createRecords, input: { principal: principalOf(req), input: body } });
    },
  ];
}

export function attendanceRoutes(deps: { db: Kysely<Database>; codec: CursorCodec; gate: IdempotencyGate }): Router {
  const router = Router();

  router.get("/attendance", requireScope("attendance:read"), async (req, res) => {
    const query = parseInput(listQuery, req.query, "query");
    res.json(await attendance.listRecords(deps.db, deps.codec, principalOf(req).livemode, query));
  });

  router.get("/attendance/:id", requireScope("attendance:read"), async (req, res) => {
    res.json(await attendance.getRecord(deps.db, principalOf(req).livemode, pathId(req.params)));
  });

  router.post("/attendance", ...createRecordSteps(deps));

  router.patch("/attendance/:id", requireScope("attendance:write"), async (req, res) => {
    const key = requireIdempotencyKey(req);
    const body = parseInput(correctBody, req.body, "body");
    await sendIdempotent(req, res, deps.gate, key, (trx) =>
      attendance.correctRecord(trx, principalOf(req), pathId(req.params), body),
    );
  });

  return router;
}
