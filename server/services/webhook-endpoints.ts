// Webhook endpoints (Stripe's shape), the events API, test deliveries, resends and the
// delivery log. Rules (server/README.md, "Webhooks"):
// - an endpoint belongs to the mode of the key that created it and receives that mode's events;
// - live URLs are https and resolve to public addresses only; test URLs may also be http, and
//   loopback or private when the operator allows local test targets (checked here at creation
//   and update, and again by the sender at every attempt);
// - the signing secret is returned once, at creation and at each roll; after a roll the old
//   secret keeps signing for the configured grace period;
// - a test delivery is test mode only, is not stored as an event, and answers with what the
//   receiver said.
import { randomBytes } from "node:crypto";
import type { Kysely, Transaction } from "kysely";
import { filterFingerprint, toPage, type CursorCodec } from "../cursor.ts";
import { ApiError, conflict, invalidParam, notFound } from "../errors.ts";
import { newId } from "../ids.ts";
import type { Database, Livemode } from "../store/schema.ts";
import * as store from "../store/webhooks-store.ts";
import { addressPolicy, attemptRow, shownResult, signingSecrets } from "../webhooks/delivery-worker.ts";
import { deliveryHeaders } from "../webhooks/standard-webhooks.ts";
import type { WebhookConfig } from "../webhooks/webhook-config.ts";
import type { WebhookSender } from "../webhooks/webhook-sender.ts";
import { UrlRefusedError } from "../webhooks/address-guard.ts";
import type { StoredResponse } from "./idempotency.ts";
import type { EventType } from "./outbox.ts";

export const MAX_URL_LENGTH = 2048;

export interface EndpointView {
  id: string;
  object: "webhook_endpoint";
  livemode: boolean;
  url: string;
  description: string | null;
  enabled_events: string[];
  status: "enabled" | "disabled";
  disabled_reason: string | null;
  previous_secret_expires_at: string | null;
  created: number;
  /** present only in the answers to create and roll_secret */
  secret?: string;
}

export function endpointView(row: store.EndpointRow, now = new Date()): EndpointView {
  const previousValid = row.previous_secret_expires_at !== null && row.previous_secret_expires_at > now.toISOString();
  return {
    id: row.id,
    object: "webhook_endpoint",
    livemode: row.livemode === 1,
    url: row.url,
    description: row.description,
    enabled_events: JSON.parse(row.enabled_events) as string[],
    status: row.status,
    disabled_reason: row.disabled_reason,
    previous_secret_expires_at: previousValid ? row.previous_secret_expires_at : null,
    created: Math.floor(Date.parse(row.created_at) / 1000),
  };
}

// Standard base64, as Standard Webhooks asks of the part after `whsec_` (server/README.md, Webhooks).
export const newSigningSecret = () => `whsec_${randomBytes(32).toString("base64")}`;

export interface WebhookContext {
  sender: WebhookSender;
  config: WebhookConfig;
  /** wakes the delivery worker (app.ts calls it after each /v1 write and badge sync) */
  wake: () => void;
}

/**
 * Parses and checks an endpoint URL for `livemode`: a URL, http(s) (https for live), no
 * refused address (resolving the name). Throws a 400 naming `url`.
 */
export async function checkEndpointUrl(ctx: WebhookContext, livemode: Livemode, value: string): Promise<string> {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw invalidParam("url", `Invalid url: '${value.slice(0, 100)}' is not an absolute URL.`, "url_invalid");
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    throw invalidParam("url", `Invalid url: the scheme must be https (got ${url.protocol.slice(0, -1)}).`, "url_invalid");
  }
  if (livemode === 1 && url.protocol !== "https:") {
    throw invalidParam("url", "Live endpoints must use https; http is allowed for test-mode endpoints only.", "url_not_https");
  }
  try {
    await ctx.sender.checkUrl(url, addressPolicy(livemode, ctx.config));
  } catch (error) {
    if (!(error instanceof UrlRefusedError)) throw error;
    const allowed =
      livemode === 1
        ? "live endpoints may reach public addresses only"
        : ctx.config.localTestTargets
          ? "test endpoints may reach public, loopback and private addresses only"
          : "test endpoints may reach public addresses only, unless the operator sets BADGEBENCH_WEBHOOK_LOCAL_TEST_TARGETS=1";
    throw invalidParam("url", `Refused url: ${error.message}; ${allowed}.`, "url_refused");
  }
  return url.href;
}

export interface CreateEndpointInput {
  url: string;
  enabled_events: string[];
  description?: string;
}

export async function createEndpoint(trx: Transaction<Database>, livemode: Livemode, input: CreateEndpointInput): Promise<StoredResponse> {
  // Before its enabled_at is taken: every event written as having no endpoint to go to is older.
  await store.lockEndpointMode(trx, livemode);
  const now = new Date().toISOString();
  const row: store.EndpointRow = {
    id: newId("whe"),
    livemode,
    url: input.url,
    description: input.description ?? null,
    enabled_events: JSON.stringify(input.enabled_events),
    status: "enabled",
    disabled_reason: null,
    secret: newSigningSecret(),
    previous_secret: null,
    previous_secret_expires_at: null,
    last_success_at: null,
    created_at: now,
    enabled_at: now,
    updated_at: now,
  };
  await store.insertEndpoint(trx, row);
  await store.refreshEndpointMode(trx, livemode);
  return { status: 201, body: { ...endpointView(row), secret: row.secret } };
}

export async function getEndpoint(db: Kysely<Database> | Transaction<Database>, livemode: Livemode, id: string): Promise<store.EndpointRow> {
  const row = await store.findEndpoint(db, livemode, id);
  if (!row) throw notFound("webhook endpoint", id);
  return row;
}

export interface UpdateEndpointInput {
  url?: string;
  enabled_events?: string[];
  description?: string | null;
  disabled?: boolean;
}

export async function updateEndpoint(trx: Transaction<Database>, livemode: Livemode, id: string, input: UpdateEndpointInput): Promise<StoredResponse> {
  // Before a re-enabled endpoint's enabled_at is taken, as createEndpoint.
  if (input.disabled !== undefined) await store.lockEndpointMode(trx, livemode);
  const endpoint = await getEndpoint(trx, livemode, id);
  const now = new Date().toISOString();
  const changes: Parameters<typeof store.updateEndpoint>[2] = { updated_at: now };
  if (input.url !== undefined) changes.url = input.url;
  if (input.enabled_events !== undefined) changes.enabled_events = JSON.stringify(input.enabled_events);
  if (input.description !== undefined) changes.description = input.description;
  if (input.disabled === true) Object.assign(changes, { status: "disabled", disabled_reason: "Disabled through the API." });
  // Re-enabled, it receives the events committed from now on, not those of while it was disabled.
  if (input.disabled === false && endpoint.status === "disabled") Object.assign(changes, { status: "enabled", disabled_reason: null, enabled_at: now });
  await store.updateEndpoint(trx, id, changes);
  if (input.disabled !== undefined) await store.refreshEndpointMode(trx, livemode);
  return { status: 200, body: endpointView((await store.findEndpoint(trx, livemode, id))!) };
}

export async function deleteEndpoint(db: Kysely<Database>, livemode: Livemode, id: string) {
  await db.transaction().execute(async (trx) => {
    await store.lockEndpointMode(trx, livemode);
    await getEndpoint(trx, livemode, id);
    await store.deleteEndpoint(trx, id);
    await store.refreshEndpointMode(trx, livemode);
  });
  return { id, object: "webhook_endpoint", deleted: true };
}

export async function rollSecret(trx: Transaction<Database>, ctx: WebhookContext, livemode: Livemode, id: string): Promise<StoredResponse> {
  const current = await getEndpoint(trx, livemode, id);
  const now = new Date();
  const secret = newSigningSecret();
  await store.updateEndpoint(trx, id, {
    secret,
    previous_secret: current.secret,
    previous_secret_expires_at: new Date(now.getTime() + ctx.config.secretGraceMs).toISOString(),
    updated_at: now.toISOString(),
  });
  return { status: 200, body: { ...endpointView((await store.findEndpoint(trx, livemode, id))!, now), secret } };
}

export async function resendEvent(trx: Transaction<Database>, livemode: Livemode, endpointId: string, eventId: string): Promise<StoredResponse> {
  const endpoint = await getEndpoint(trx, livemode, endpointId);
  if (endpoint.status === "disabled") {
    throw conflict("endpoint_disabled", `Webhook endpoint ${endpointId} is disabled (${endpoint.disabled_reason}); enable it with PATCH {"disabled": false} first.`);
  }
  const event = await store.findEvent(trx, livemode, eventId);
  if (!event) throw notFound("event", eventId, "event");
  const now = new Date().toISOString();
  await store.requeueDelivery(trx, endpointId, eventId, now);
  return { status: 202, body: { object: "webhook_delivery", endpoint: endpointId, event: eventId, state: "pending", attempts: 0, next_attempt_at: now } };
}

/** A rollout as the event of `type` would carry it: advanced to 25 %, halted there, or completed. */
function sampleRollout(type: EventType, at: string) {
  const halted = type === "release.rollout_halted";
  const completed = type === "release.rollout_completed";
  const failures = halted ? [{ device_id: "dev_test", name: "Test badge", reason: "ota=err: MD5 mismatch", at }] : [];
  const stageCounts = [5, 25, 50, 100].map((percent, i) => ({ percent, open: completed || i <= 1, badges: 10, downloaded: completed || i <= 1 ? 10 : 0, ok: completed || i <= 1 ? 10 - (halted && i === 1 ? 1 : 0) : 0, failed: halted && i === 1 ? 1 : 0 }));
  const sum = (field: "badges" | "downloaded" | "ok" | "failed") => stageCounts.reduce((total, stage) => total + stage[field], 0);
  return {
    object: "release_rollout",
    id: "rol_test",
    livemode: false,
    version: "1.5.0",
    previous_version: "1.4.0",
    status: halted ? "halted" : completed ? "completed" : "active",
    stages: [5, 25, 50, 100],
    stage: { index: completed ? 3 : 1, percent: completed ? 100 : 25, started_at: at },
    settings: { min_stage_seconds: 3600, min_ok_share: 0.5, halt_failures: 5, halt_failure_share: 0.05, report_timeout_seconds: 1800 },
    counts: { badges: sum("badges"), downloaded: sum("downloaded"), ok: sum("ok"), failed: sum("failed"), stages: stageCounts },
    failures,
    halt: halted ? { at, why: "1 of the stage's 20 badges failed (5.0 %), the limit is 5 %", failures } : null,
    history: [{ at, action: "created", stage: 5, by: "operator", note: null }],
    created_at: at,
    updated_at: at,
    ended_at: completed ? at : null,
  };
}

/** A plausible object of each type, with ids that say they are not real. */
function sampleObject(type: EventType, now: Date) {
  const at = now.toISOString();
  if (type === "badge.ota_reported") {
    return {
      object: { id: "rpt_test", object: "ota_report", device: { id: "dev_test", name: "Test badge", room: "R1" }, version: "1.4.0", outcome: "ok", message: null, received_at: at },
    };
  }
  if (type === "release.rollout_advanced" || type === "release.rollout_halted" || type === "release.rollout_completed") return { object: sampleRollout(type, at) };
  const record = {
    id: "att_test",
    object: "attendance_record",
    livemode: false,
    status: "present",
    recorded_at: at,
    method: "api",
    student: { id: "stu_test", external_id: "TEST-STUDENT", name: "Test Student" },
    session: { id: "ses_test", course_code: "TEST", room: "R1" },
    device: null,
    reason: null,
    created_at: at,
    updated_at: at,
    history: [] as unknown[],
  };
  const actor = { type: "user", id: "usr_test", name: "Test delivery" };
  if (type === "attendance.recorded") return { object: record, actor };
  const reason = "test delivery";
  return {
    object: { ...record, status: "late", history: [{ at, from: "present", to: "late", reason, actor }] },
    from: "present",
    to: "late",
    previous_attributes: { status: "present" },
    reason,
    actor,
  };
}

export async function sendTestDelivery(db: Kysely<Database>, ctx: WebhookContext, livemode: Livemode, endpointId: string, type: EventType) {
  if (livemode === 1) {
    throw new ApiError(403, "permission_error", "test_delivery_live_key", "Test deliveries take a test-mode key (sk_test_...); a live key sends real events only.");
  }
  const endpoint = await getEndpoint(db, livemode, endpointId);
  const now = new Date();
  const event = { id: newId("evt", now.getTime()), object: "event", type, created: Math.floor(now.getTime() / 1000), livemode: false, test_delivery: true, data: sampleObject(type, now) };
  const body = JSON.stringify(event);
  const headers = deliveryHeaders(event.id, body, signingSecrets(endpoint, now), event.created);
  const sent = await ctx.sender.send(endpoint.url, body, headers, addressPolicy(livemode, ctx.config));
  const result = shownResult(sent, endpoint, ctx.config);
  const attempt = attemptRow({ endpoint_id: endpoint.id, event_id: event.id, event_type: type }, "test", now, result, null);
  await db.transaction().execute(async (trx) => {
    if ((await store.existingEndpointIds(trx, [endpoint.id])).size > 0) await store.insertAttempts(trx, [attempt]);
  });
  return {
    object: "webhook_test_delivery",
    endpoint: endpoint.id,
    event,
    delivered: attempt.outcome === "succeeded",
    status_code: result.statusCode,
    error: result.error,
    duration_ms: result.durationMs,
    response_body_excerpt: result.responseExcerpt === null ? null : result.responseExcerpt.slice(0, 500),
  };
}

export function attemptView(row: store.AttemptRow) {
  return {
    id: row.id,
    object: "webhook_attempt",
    endpoint: row.endpoint_id,
    event: row.event_id,
    event_type: row.event_type,
    kind: row.kind,
    attempted_at: row.attempted_at,
    duration_ms: row.duration_ms,
    status_code: row.status_code,
    error: row.error,
    response_body_excerpt: row.response_excerpt,
    outcome: row.outcome,
    next_attempt_at: row.next_attempt_at,
  };
}

/** GET /v1/webhook_endpoints: the mode's endpoints, oldest first. */
export async function listEndpoints(db: Kysely<Database>, codec: CursorCodec, livemode: Livemode, query: { limit: number; cursor?: string }) {
  const { limit, cursor } = query;
  const filters = filterFingerprint("webhook_endpoints", {});
  const position = cursor === undefined ? undefined : codec.decode(cursor, filters);
  const rows = await store.listEndpoints(db, { livemode, after: position?.after, limit: limit + 1 });
  const now = new Date();
  return toPage(rows, limit, { codec, filters, keyOf: (row) => [row.created_at, row.id], view: (row) => endpointView(row, now) });
}

/** GET /v1/webhook_endpoints/:id/attempts: one endpoint's delivery attempts, newest first; 404 for an endpoint of another mode. */
export async function listAttempts(
  db: Kysely<Database>,
  codec: CursorCodec,
  livemode: Livemode,
  endpointId: string,
  query: { limit: number; cursor?: string; event?: string },
) {
  const { limit, cursor, event } = query;
  const endpoint = await getEndpoint(db, livemode, endpointId);
  const filters = filterFingerprint(`webhook_attempts:${endpoint.id}`, { event });
  const position = cursor === undefined ? undefined : codec.decode(cursor, filters);
  const rows = await store.listAttempts(db, { endpointId: endpoint.id, eventId: event, before: position?.after, limit: limit + 1 });
  return toPage(rows, limit, { codec, filters, keyOf: (row) => [row.attempted_at, row.id], view: attemptView });
}
