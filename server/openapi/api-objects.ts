// What /v1 answers, as zod schemas: the objects the services return, the list envelope and the
// one error shape. They exist for the OpenAPI document (openapi-document.ts), which the HTTP
// tests hold every /v1 answer to, so an object that gains, loses or retypes a field fails the
// suite until it is written down here. Objects are strict: a field not listed is a mismatch.
import { z } from "zod";
import { releaseEntrySchema } from "../../firmware/manifest.ts";
import { ERROR_TYPES } from "../errors.ts";
import { EVENT_TYPES } from "../services/outbox.ts";
import { RECORD_STATUSES } from "../services/attendance.ts";
import { FIRMWARE_STATES } from "../services/devices.ts";
import { SESSION_STATUSES } from "../services/sessions.ts";

const isoTime = z.string().describe("ISO 8601 UTC date-time");
const calendarDate = z.string().describe("UTC calendar date YYYY-MM-DD");
const id = (prefix: string) => z.string().startsWith(`${prefix}_`);
const unixSeconds = z.number().int().describe("unix seconds");

export const errorBody = z
  .strictObject({
    error: z.strictObject({
      type: z.enum(ERROR_TYPES),
      code: z.string().describe("stable machine code, e.g. parameter_invalid, resource_missing"),
      message: z.string().describe("what went wrong and what to do, for a person"),
      param: z.string().nullable().describe("the parameter or field at fault, when one is"),
    }),
  })
;

/** The list envelope: `next_cursor` is opaque; pass it as `cursor` with the same filters for the next page. */
export function listOf<T extends z.ZodType>(item: T, extra: z.core.$ZodLooseShape = {}) {
  return z.strictObject({
    object: z.literal("list"),
    has_more: z.boolean(),
    next_cursor: z.string().nullable().describe("opaque; give it as `cursor` (with the same filters) for the next page, null on the last"),
    ...extra,
    data: z.array(item),
  });
}

const actor = z.strictObject({ type: z.enum(["user", "device"]), id: z.string(), name: z.string() });
const recordStatus = z.enum(RECORD_STATUSES);

export const recordListItem = z.strictObject({
  id: id("att"),
  object: z.literal("attendance_record"),
  livemode: z.boolean(),
  status: recordStatus,
  recorded_at: isoTime,
  method: z.string(),
  student: z.strictObject({ id: id("stu"), external_id: z.string() }),
  session: z.strictObject({ id: id("ses"), course_code: z.string() }),
});

export const recordDetail = recordListItem.extend({
  student: z.strictObject({ id: id("stu"), external_id: z.string(), name: z.string() }),
  session: z.strictObject({ id: id("ses"), course_code: z.string(), room: z.string() }),
  device: z.strictObject({ id: id("dev"), model: z.string() }).nullable(),
  reason: z.string().nullable(),
  created_at: isoTime,
  updated_at: isoTime,
  history: z.array(z.strictObject({ at: isoTime, from: recordStatus, to: recordStatus, reason: z.string(), actor })),
});

const sessionStatus = z.enum(SESSION_STATUSES);
const sessionTimes = { course_code: z.string(), room: z.string(), date: calendarDate, starts_at: isoTime, ends_at: isoTime, status: sessionStatus };

export const session = z.strictObject({ id: id("ses"), object: z.literal("session"), livemode: z.boolean(), ...sessionTimes });

export const roll = z.strictObject({
  object: z.literal("roll"),
  livemode: z.boolean(),
  session: z.strictObject({ id: id("ses"), ...sessionTimes }),
  roll: z.array(
    z.strictObject({ external_id: z.string(), student_id: id("stu"), name: z.string(), status: recordStatus.nullable(), record_id: id("att").nullable() }),
  ),
});

const report = z.strictObject({ version: z.string(), outcome: z.enum(["ok", "err"]), message: z.string().nullable(), received_at: isoTime });

export const device = z.strictObject({
  id: id("dev"),
  object: z.literal("device"),
  livemode: z.boolean(),
  name: z.string(),
  room: z.string(),
  model: z.string(),
  token_hint: z.string().nullable(),
  created_at: isoTime,
  revoked_at: isoTime.nullable(),
});

export const newDevice = device.extend({
  token: z
    .string()
    .regex(/^dtk_(test|live)_/)
    .nullable()
    .describe("the badge's device token, shown in this answer only; null in a replay of it (Idempotent-Withheld: token), which never holds the token"),
});

export const fleetDevice = device.extend({
  firmware: z.strictObject({
    state: z.enum(FIRMWARE_STATES),
    installed: z.strictObject({ version: z.string(), display: z.string().nullable() }).nullable(),
    target_version: z.string().nullable(),
    last_fetch: z
      .strictObject({ version: z.string(), outcome: z.string(), bytes_sent: z.number().int(), size: z.number().int(), started_at: isoTime, ended_at: isoTime.nullable() })
      .nullable(),
    last_report: report.nullable(),
  }),
  battery: z.strictObject({ volts: z.number().nullable(), charging: z.boolean().nullable() }),
  last_check_at: isoTime.nullable(),
  last_sync_at: isoTime.nullable(),
});

export const fleetList = listOf(fleetDevice, {
  total_count: z.number().int().describe("badges matching every filter"),
  state_counts: z.strictObject(Object.fromEntries(FIRMWARE_STATES.map((state) => [state, z.number().int()]))).describe("badges per state over the room and model filters only"),
});

const ref = (prefix: string) => z.strictObject({ id: id(prefix) }).nullable();

export const deviceTap = z.strictObject({
  id: z.string(),
  object: z.literal("device_tap"),
  livemode: z.boolean(),
  device: z.strictObject({ id: id("dev") }),
  card_uid: z.string(),
  tapped_at: isoTime,
  received_at: isoTime,
  result: z.enum(["accepted", "rejected"]),
  reason: z.string().nullable(),
  session: ref("ses"),
  student: ref("stu"),
  record: ref("att"),
});

const refusal = z.strictObject({ code: z.string(), message: z.string() });

export const release = z.strictObject({
  object: z.literal("release"),
  livemode: z.boolean().describe("the mode the release belongs to: a key sees only its own mode's releases"),
  version: z.string(),
  display: z.string(),
  size: z.number().int(),
  md5: z.string(),
  notes: z.array(z.string()),
  published_at: isoTime,
  role: z.enum(["fleet", "canary", "past"]),
  canary: z
    .strictObject({ id: id("dev"), name: z.string().nullable(), room: z.string().nullable(), model: z.string().nullable(), last_report: report.nullable() })
    .nullable(),
  promoted: releaseEntrySchema.shape.promoted,
  promotion: z.strictObject({ allowed: z.boolean(), refusal: refusal.nullable() }).nullable(),
});

export const releaseList = listOf(release, {
  livemode: z.boolean().describe("the mode of the key that asked, whose releases these are"),
  fleet: z.string().nullable().describe("the fleet's release version"),
});

const rolloutFailure = z.strictObject({ device_id: id("dev"), name: z.string(), reason: z.string(), at: isoTime });

/** A staged rollout (services/rollouts.ts): its stage, its counts per stage, its halt and history. */
export const rollout = z.strictObject({
  object: z.literal("release_rollout"),
  id: id("rol"),
  livemode: z.boolean(),
  version: z.string(),
  previous_version: z.string().nullable().describe("the fleet's release when the rollout began; badges outside the stage keep being told they run it"),
  status: z.enum(["active", "paused", "halted", "aborted", "completed"]),
  stages: z.array(z.number().int()),
  stage: z.strictObject({ index: z.number().int(), percent: z.number().int(), started_at: isoTime }),
  settings: z.strictObject({
    min_stage_seconds: z.number().int(),
    min_ok_share: z.number(),
    halt_failures: z.number().int(),
    halt_failure_share: z.number(),
    report_timeout_seconds: z.number().int(),
  }),
  counts: z.strictObject({
    badges: z.number().int(),
    downloaded: z.number().int(),
    ok: z.number().int().describe("badges that reported ota=ok for the version: they run it, whatever the rollout's status"),
    failed: z.number().int(),
    stages: z.array(
      z.strictObject({ percent: z.number().int(), open: z.boolean(), badges: z.number().int(), downloaded: z.number().int(), ok: z.number().int(), failed: z.number().int() }),
    ),
  }),
  failures: z.array(rolloutFailure).describe("failing badges no resume has accepted yet, oldest first"),
  halt: z.strictObject({ at: isoTime, why: z.string(), failures: z.array(rolloutFailure) }).nullable(),
  history: z.array(
    z.strictObject({
      at: isoTime,
      action: z.enum(["created", "advance", "pause", "resume", "abort", "halted", "completed"]),
      stage: z.number().int(),
      by: z.enum(["operator", "rules"]),
      note: z.string().nullable(),
    }),
  ),
  created_at: isoTime,
  updated_at: isoTime,
  ended_at: isoTime.nullable(),
});

export const webhookEndpoint = z.strictObject({
  id: id("whe"),
  object: z.literal("webhook_endpoint"),
  livemode: z.boolean(),
  url: z.string(),
  description: z.string().nullable(),
  enabled_events: z.array(z.string()),
  status: z.enum(["enabled", "disabled"]),
  disabled_reason: z.string().nullable(),
  previous_secret_expires_at: isoTime.nullable(),
  created: unixSeconds,
});

export const webhookEndpointWithSecret = webhookEndpoint.extend({
  secret: z
    .string()
    .startsWith("whsec_")
    .nullable()
    .describe("the signing secret, shown in this answer only; null in a replay of it (Idempotent-Withheld: secret), which never holds the secret"),
});

export const deletedEndpoint = z.strictObject({ id: id("whe"), object: z.literal("webhook_endpoint"), deleted: z.literal(true) });

export const webhookAttempt = z.strictObject({
  id: z.string(),
  object: z.literal("webhook_attempt"),
  endpoint: id("whe"),
  event: id("evt"),
  event_type: z.string(),
  kind: z.enum(["delivery", "test"]),
  attempted_at: isoTime,
  duration_ms: z.number().int(),
  status_code: z.number().int().nullable(),
  error: z.string().nullable(),
  response_body_excerpt: z.string().nullable(),
  outcome: z.string(),
  next_attempt_at: isoTime.nullable(),
});

export const queuedDelivery = z.strictObject({
  object: z.literal("webhook_delivery"),
  endpoint: id("whe"),
  event: id("evt"),
  state: z.literal("pending"),
  attempts: z.number().int(),
  next_attempt_at: isoTime,
});

const otaReport = z.strictObject({
  id: z.string(),
  object: z.literal("ota_report"),
  device: z.strictObject({ id: id("dev"), name: z.string(), room: z.string() }),
  version: z.string(),
  outcome: z.enum(["ok", "err"]),
  message: z.string().nullable(),
  received_at: isoTime,
});

/** Each event type's `data`, as the outbox writes it (services/outbox.ts) and webhooks deliver it. */
export const eventData = {
  "attendance.recorded": z.strictObject({ object: recordDetail, actor }),
  "attendance.updated": z.strictObject({
    object: recordDetail,
    actor,
    from: recordStatus,
    to: recordStatus,
    previous_attributes: z.strictObject({ status: recordStatus }),
    reason: z.string(),
  }),
  "badge.ota_reported": z.strictObject({ object: otaReport }),
  "release.rollout_advanced": z.strictObject({ object: rollout }),
  "release.rollout_halted": z.strictObject({ object: rollout }),
  "release.rollout_completed": z.strictObject({ object: rollout }),
} satisfies Record<(typeof EVENT_TYPES)[number], z.ZodType>;

const eventOf = <T extends keyof typeof eventData>(type: T) =>
  z.strictObject({
    id: id("evt"),
    object: z.literal("event"),
    type: z.literal(type),
    created: unixSeconds,
    livemode: z.boolean(),
    test_delivery: z.literal(true).optional().describe("present on test deliveries only"),
    data: eventData[type],
  });

export const eventPayloads = Object.fromEntries(EVENT_TYPES.map((type) => [type, eventOf(type)])) as { [T in keyof typeof eventData]: ReturnType<typeof eventOf<T>> };

export const event = z.union(EVENT_TYPES.map((type) => eventPayloads[type]));

export const testDelivery = z.strictObject({
  object: z.literal("webhook_test_delivery"),
  endpoint: id("whe"),
  event,
  delivered: z.boolean(),
  status_code: z.number().int().nullable(),
  error: z.string().nullable(),
  duration_ms: z.number().int(),
  response_body_excerpt: z.string().nullable(),
});
