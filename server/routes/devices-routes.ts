// The fleet as administrators see it: GET /v1/devices (each badge with its firmware state; filters,
// sorts, pages and counts per state for the fleet page) and
// GET /v1/device_taps (card taps as received, the rejected ones kept for review).
import { Router } from "express";
import type { Kysely } from "kysely";
import { z } from "zod";
import { filterFingerprint, toPage, type CursorCodec } from "../cursor.ts";
import { notFound } from "../errors.ts";
import { principalOf, requireScope } from "../http/auth-middleware.ts";
import { idParam, limitParam, parseInput, pathId } from "../http/validation.ts";
import type { ReleaseStore } from "../releases/release-store.ts";
import { FIRMWARE_STATES, FLEET_SORTS, fleetViewOf, listFleet } from "../services/devices.ts";
import { findDevice } from "../store/devices-store.ts";
import type { Database, DeviceTapsTable } from "../store/schema.ts";
import { listTaps } from "../store/taps-store.ts";

const devicesQuery = z.strictObject({
  state: z.enum(FIRMWARE_STATES).optional(),
  room: z.string().min(1).max(100).optional(),
  model: z.string().min(1).max(100).optional(),
  sort: z.enum(FLEET_SORTS).optional().default("created"),
  order: z.enum(["asc", "desc"]).optional().default("asc"),
  limit: limitParam,
  cursor: z.string().min(1).max(2000).optional(),
});

const tapsQuery = z.strictObject({
  result: z.enum(["accepted", "rejected"]).optional(),
  device_id: idParam("dev").optional(),
  limit: limitParam,
  cursor: z.string().min(1).max(2000).optional(),
});

function tapView(row: DeviceTapsTable) {
  return {
    id: row.id,
    object: "device_tap",
    livemode: row.livemode === 1,
    device: { id: row.device_id },
    card_uid: row.card_uid,
    tapped_at: row.tapped_at,
    received_at: row.received_at,
    result: row.result,
    reason: row.reason,
    session: row.session_id === null ? null : { id: row.session_id },
    student: row.student_id === null ? null : { id: row.student_id },
    record: row.record_id === null ? null : { id: row.record_id },
  };
}

export function devicesRoutes(deps: { db: Kysely<Database>; codec: CursorCodec; releases: ReleaseStore }): Router {
  const router = Router();

  router.get("/devices", requireScope("devices:read"), async (req, res) => {
    const { limit, cursor, ...filterParams } = parseInput(devicesQuery, req.query, "query");
    const filters = filterFingerprint("devices", filterParams);
    const position = cursor === undefined ? undefined : deps.codec.decode(cursor, filters);
    const fleet = await listFleet(deps.db, await deps.releases.read(), new Date(), {
      livemode: principalOf(req).livemode,
      ...filterParams,
      after: position?.after,
      limit,
    });
    const last = fleet.keys.at(-1);
    res.json({
      object: "list",
      has_more: fleet.has_more,
      next_cursor: fleet.has_more && last ? deps.codec.encode({ after: last, filters }) : null,
      total_count: fleet.total_count,
      state_counts: fleet.state_counts,
      data: fleet.devices,
    });
  });

  router.get("/devices/:id", requireScope("devices:read"), async (req, res) => {
    const id = pathId(req.params);
    const device = await findDevice(deps.db, id, principalOf(req).livemode);
    if (!device) throw notFound("device", id);
    res.json(await fleetViewOf(deps.db, device, await deps.releases.read(), new Date()));
  });

  router.get("/device_taps", requireScope("devices:read"), async (req, res) => {
    const { limit, cursor, ...filterParams } = parseInput(tapsQuery, req.query, "query");
    const filters = filterFingerprint("device_taps", filterParams);
    const position = cursor === undefined ? undefined : deps.codec.decode(cursor, filters);
    const rows = await listTaps(deps.db, { livemode: principalOf(req).livemode, ...filterParams, after: position?.after, limit: limit + 1 });
    res.json(toPage(rows, limit, { codec: deps.codec, filters, keyOf: (row) => [row.received_at, row.id], view: tapView }));
  });

  return router;
}
