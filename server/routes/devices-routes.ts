// The fleet as administrators see it: GET /v1/devices (each badge with its firmware state; filters,
// sorts, pages and counts per state for the fleet page), POST /v1/devices and
// POST /v1/devices/{id}/revoke (a badge's token issued and withdrawn, as `badgebench devices
// add|revoke` do, so a simulation can set up on a server it cannot open), and
// GET /v1/device_taps (card taps as received, the rejected ones kept for review).
import { Router } from "express";
import type { Kysely } from "kysely";
import { z } from "zod";
import { hasControlCharacter } from "../../firmware/index.ts";
import { filterFingerprint, type CursorCodec } from "../cursor.ts";
import { principalOf, requireScope } from "../http/auth-middleware.ts";
import { requireIdempotencyKey, sendIdempotent } from "../http/idempotent-write.ts";
import { idParam, limitParam, parseInput, pathId } from "../http/validation.ts";
import type { ReleaseStores } from "../releases/release-store.ts";
import { addDevice, DEVICE_TEXT_MAX, deviceView, FIRMWARE_STATES, FLEET_SORTS, listDeviceTaps, listFleet, withdrawDevice } from "../services/devices.ts";
import type { IdempotencyGate } from "../services/idempotency.ts";
import type { Database } from "../store/schema.ts";

export const devicesQuery = z.strictObject({
  state: z.enum(FIRMWARE_STATES).optional(),
  room: z.string().min(1).max(100).optional(),
  model: z.string().min(1).max(100).optional(),
  sort: z.enum(FLEET_SORTS).optional().default("created"),
  order: z.enum(["asc", "desc"]).optional().default("asc"),
  limit: limitParam,
  cursor: z.string().min(1).max(2000).optional(),
});

const deviceText = z
  .string()
  .max(DEVICE_TEXT_MAX)
  .refine((value) => value.trim().length > 0 && !hasControlCharacter(value), `must be 1 to ${DEVICE_TEXT_MAX} printable characters`);

export const createBody = z.strictObject({ room: deviceText, model: deviceText, name: deviceText.optional() });

export const tapsQuery = z.strictObject({
  result: z.enum(["accepted", "rejected"]).optional(),
  device_id: idParam("dev").optional(),
  limit: limitParam,
  cursor: z.string().min(1).max(2000).optional(),
});


/**
 * `checksRecorded`: resolves once the checks answered so far on this instance are recorded (their
 * records are written after the answer, services/ota-offer.ts): a read awaits it, so it shows
 * every check answered before it.
 */
export function devicesRoutes(deps: { db: Kysely<Database>; codec: CursorCodec; releases: ReleaseStores; gate: IdempotencyGate; checksRecorded: () => Promise<void> }): Router {
  const router = Router();

  router.get("/devices", requireScope("devices:read"), async (req, res) => {
    const { limit, cursor, ...filterParams } = parseInput(devicesQuery, req.query, "query");
    const filters = filterFingerprint("devices", filterParams);
    const position = cursor === undefined ? undefined : deps.codec.decode(cursor, filters);
    const livemode = principalOf(req).livemode;
    await deps.checksRecorded();
    const fleet = await listFleet(deps.db, await deps.releases[livemode].read(), new Date(), {
      livemode,
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
    const livemode = principalOf(req).livemode;
    await deps.checksRecorded();
    res.json(await deviceView(deps.db, livemode, pathId(req.params), await deps.releases[livemode].read(), new Date()));
  });

  // A retry with the same Idempotency-Key adds no second badge. Its replay holds the token as
  // null (Idempotent-Withheld: token): a token is shown once and stored hashed only, so a caller
  // that lost the first answer revokes that device (the replay names it) and adds another.
  router.post("/devices", requireScope("devices:write"), async (req, res) => {
    const key = requireIdempotencyKey(req);
    const input = parseInput(createBody, req.body, "body");
    const { livemode } = principalOf(req);
    await sendIdempotent(req, res, deps.gate, key, async (trx) => ({ status: 201, body: await addDevice(trx, livemode, input) }));
  });

  router.post("/devices/:id/revoke", requireScope("devices:write"), async (req, res) => {
    res.json(await withdrawDevice(deps.db, principalOf(req).livemode, pathId(req.params)));
  });

  router.get("/device_taps", requireScope("devices:read"), async (req, res) => {
    res.json(await listDeviceTaps(deps.db, deps.codec, principalOf(req).livemode, parseInput(tapsQuery, req.query, "query")));
  });

  return router;
}
