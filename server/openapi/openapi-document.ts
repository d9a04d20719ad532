// The OpenAPI 3.1 document of /v1, built from the zod schemas the routes validate requests
// with (exported by server/routes/*) and those of their answers (api-objects.ts), through
// zod's own JSON Schema output: a parameter, field or answer changed in code changes the
// document. Served at GET /v1/openapi.json and written by `badgebench openapi`.
import { z } from "zod";
import { SCOPES, type Scope } from "../services/api-keys.ts";
import { EVENT_TYPES } from "../services/outbox.ts";
import { SESSION_ACTIONS } from "../services/sessions.ts";
import * as attendance from "../routes/attendance-routes.ts";
import * as devices from "../routes/devices-routes.ts";
import * as events from "../routes/events-routes.ts";
import * as releases from "../routes/releases-routes.ts";
import * as rollouts from "../routes/rollouts-routes.ts";
import { ROLLOUT_ACTIONS } from "../services/rollouts.ts";
import * as sessions from "../routes/sessions-routes.ts";
import * as endpoints from "../routes/webhook-endpoints-routes.ts";
import * as objects from "./api-objects.ts";

type JsonSchema = Record<string, unknown>;

interface Operation {
  method: "get" | "post" | "patch" | "delete";
  /** OpenAPI path template under /v1, e.g. /attendance/{id} */
  path: string;
  summary: string;
  /** null: any valid key */
  scope: Scope | null;
  query?: z.ZodType;
  body?: z.ZodType;
  /** the body may be left out (roll_secret, promote) */
  bodyOptional?: boolean;
  idempotencyKey?: boolean;
  responses: Record<number, z.ZodType | "any">;
}

const sessionActions = (Object.keys(SESSION_ACTIONS) as (keyof typeof SESSION_ACTIONS)[]).map(
  (action): Operation => ({
    method: "post",
    path: `/sessions/{id}/${action}`,
    summary: `${action} a session (${SESSION_ACTIONS[action].from} -> ${SESSION_ACTIONS[action].to})`,
    scope: "sessions:write",
    idempotencyKey: true,
    responses: { 200: objects.session },
  }),
);

const ROLLOUT_ACTION_SUMMARIES = {
  advance: "open the next stage now (past the last, promote the release to the fleet); refused unless active",
  pause: "offer the release to no one new until resumed",
  resume: "resume a paused or halted rollout; resuming a halt accepts the failures it stopped for",
  abort: "end the rollout; the fleet stays on the previous release, badges already on the new one stay on it",
} satisfies Record<(typeof ROLLOUT_ACTIONS)[number], string>;

const rolloutActions = ROLLOUT_ACTIONS.map(
  (action): Operation => ({
    method: "post",
    path: `/rollouts/{id}/${action}`,
    summary: ROLLOUT_ACTION_SUMMARIES[action],
    scope: "releases:write",
    body: rollouts.actionBody,
    bodyOptional: true,
    idempotencyKey: true,
    responses: { 200: objects.rollout },
  }),
);

const OPERATIONS: Operation[] = [
  { method: "get", path: "/openapi.json", summary: "this document", scope: null, responses: { 200: "any" } },
  { method: "get", path: "/attendance", summary: "list attendance records", scope: "attendance:read", query: attendance.listQuery, responses: { 200: objects.listOf(objects.recordListItem) } },
  { method: "post", path: "/attendance", summary: "create an attendance record", scope: "attendance:write", body: attendance.createBody, idempotencyKey: true, responses: { 201: objects.recordDetail } },
  { method: "get", path: "/attendance/{id}", summary: "retrieve a record with its history", scope: "attendance:read", responses: { 200: objects.recordDetail } },
  { method: "patch", path: "/attendance/{id}", summary: "correct a record (status and reason)", scope: "attendance:write", body: attendance.correctBody, idempotencyKey: true, responses: { 200: objects.recordDetail } },
  { method: "get", path: "/sessions", summary: "list sessions", scope: "attendance:read", query: sessions.listQuery, responses: { 200: objects.listOf(objects.session) } },
  { method: "get", path: "/sessions/{id}", summary: "retrieve a session", scope: "attendance:read", responses: { 200: objects.session } },
  { method: "get", path: "/sessions/{id}/roll", summary: "a session's roll", scope: "attendance:read", responses: { 200: objects.roll } },
  ...sessionActions,
  { method: "get", path: "/devices", summary: "the fleet: badges with their firmware state", scope: "devices:read", query: devices.devicesQuery, responses: { 200: objects.fleetList } },
  { method: "post", path: "/devices", summary: "add a badge; its token is shown once", scope: "devices:write", body: devices.createBody, idempotencyKey: true, responses: { 201: objects.newDevice } },
  { method: "get", path: "/devices/{id}", summary: "retrieve a badge with its firmware state", scope: "devices:read", responses: { 200: objects.fleetDevice } },
  { method: "post", path: "/devices/{id}/revoke", summary: "withdraw a badge's token", scope: "devices:write", responses: { 200: objects.device } },
  { method: "get", path: "/device_taps", summary: "card taps as badges sent them, with their verdicts", scope: "devices:read", query: devices.tapsQuery, responses: { 200: objects.listOf(objects.deviceTap) } },
  { method: "get", path: "/events", summary: "list events, oldest first", scope: "events:read", query: events.listQuery, responses: { 200: objects.listOf(objects.event) } },
  { method: "get", path: "/events/{id}", summary: "retrieve an event", scope: "events:read", responses: { 200: objects.event } },
  { method: "get", path: "/releases", summary: "firmware releases, newest first", scope: "releases:read", query: releases.listQuery, responses: { 200: objects.releaseList } },
  { method: "post", path: "/releases/{version}/promote", summary: "promote a canary release to the fleet", scope: "releases:write", body: releases.promoteBody, bodyOptional: true, idempotencyKey: true, responses: { 200: objects.release } },
  { method: "get", path: "/rollouts", summary: "the key's mode's staged rollouts, newest first", scope: "releases:read", query: rollouts.listQuery, responses: { 200: objects.listOf(objects.rollout, { livemode: z.boolean() }) } },
  { method: "post", path: "/rollouts", summary: "start a staged rollout of a canary release whose canary reported ok", scope: "releases:write", body: rollouts.createBody, idempotencyKey: true, responses: { 201: objects.rollout } },
  { method: "get", path: "/rollouts/{id}", summary: "a staged rollout: its stage, counts per stage, failures, halt and history", scope: "releases:read", responses: { 200: objects.rollout } },
  ...rolloutActions,
  { method: "post", path: "/webhook_endpoints", summary: "create a webhook endpoint; its secret is shown once", scope: "webhooks:write", body: endpoints.createBody, idempotencyKey: true, responses: { 201: objects.webhookEndpointWithSecret } },
  { method: "get", path: "/webhook_endpoints", summary: "list webhook endpoints", scope: "webhooks:write", query: endpoints.listQuery, responses: { 200: objects.listOf(objects.webhookEndpoint) } },
  { method: "get", path: "/webhook_endpoints/{id}", summary: "retrieve a webhook endpoint", scope: "webhooks:write", responses: { 200: objects.webhookEndpoint } },
  { method: "patch", path: "/webhook_endpoints/{id}", summary: "update, disable or re-enable a webhook endpoint", scope: "webhooks:write", body: endpoints.updateBody, idempotencyKey: true, responses: { 200: objects.webhookEndpoint } },
  { method: "delete", path: "/webhook_endpoints/{id}", summary: "delete a webhook endpoint, its deliveries and log", scope: "webhooks:write", responses: { 200: objects.deletedEndpoint } },
  { method: "post", path: "/webhook_endpoints/{id}/roll_secret", summary: "roll the signing secret (the old one signs for 24 h more)", scope: "webhooks:write", body: z.strictObject({}), bodyOptional: true, idempotencyKey: true, responses: { 200: objects.webhookEndpointWithSecret } },
  { method: "post", path: "/webhook_endpoints/{id}/test", summary: "send a synthetic test event now (test-mode keys)", scope: "webhooks:write", body: endpoints.testBody, responses: { 200: objects.testDelivery } },
  { method: "post", path: "/webhook_endpoints/{id}/resend", summary: "queue one event for this endpoint again", scope: "webhooks:write", body: endpoints.resendBody, idempotencyKey: true, responses: { 202: objects.queuedDelivery } },
  { method: "get", path: "/webhook_endpoints/{id}/attempts", summary: "the delivery log, newest first", scope: "webhooks:write", query: endpoints.attemptsQuery, responses: { 200: objects.listOf(objects.webhookAttempt) } },
];

function jsonSchema(schema: z.ZodType, io: "input" | "output"): JsonSchema {
  // Refinements (a real calendar date, one of two fields) and transforms have no JSON Schema:
  // the document states the shape, the server's 400 states the rest.
  const { $schema: _dialect, ...rest } = z.toJSONSchema(schema, {
    io,
    unrepresentable: "any",
    target: "draft-2020-12",
    // zod names startsWith a format no validator knows; its pattern says the same.
    override: ({ jsonSchema }) => {
      if (jsonSchema.format === "starts_with") delete jsonSchema.format;
    },
  }) as JsonSchema;
  return rest;
}

const LIST_PARAMETERS: Record<string, string> = {
  limit: "page size (default 50)",
  cursor: "the previous page's next_cursor, with the same filters; a forged or reused cursor is 400 cursor_invalid",
};

const header = (name: string, description: string) => ({ name, in: "header", required: true, description, schema: { type: "string" } });

/** What every delivery carries beside its body (server/README.md, Webhooks). */
const DELIVERY_HEADERS = [
  header("X-Service-Signature", "SPEC 5: t=<unix s>,v1=<hex HMAC-SHA256 of '<t>.<body>' keyed with the whole secret>[,v1=...]"),
  header("webhook-id", "Standard Webhooks: the event id, the same on every retry"),
  header("webhook-timestamp", "Standard Webhooks: unix seconds of the attempt"),
  header("webhook-signature", "Standard Webhooks: v1,<base64 HMAC-SHA256 of '<id>.<timestamp>.<body>'>, space-separated during a secret roll"),
];

function parametersOf(operation: Operation): JsonSchema[] {
  const path = [...operation.path.matchAll(/\{(\w+)\}/g)].map(([, name]) => ({ name, in: "path", required: true, schema: { type: "string" } }));
  const query: JsonSchema[] = [];
  if (operation.query) {
    const schema = jsonSchema(operation.query, "input") as { properties?: Record<string, JsonSchema>; required?: string[] };
    for (const [name, property] of Object.entries(schema.properties ?? {})) {
      query.push({ name, in: "query", required: schema.required?.includes(name) ?? false, ...(name in LIST_PARAMETERS && { description: LIST_PARAMETERS[name] }), schema: property });
    }
  }
  const idempotency = operation.idempotencyKey
    ? [{ name: "Idempotency-Key", in: "header", required: true, description: "1-255 characters; the first answer is replayed for the same key", schema: { type: "string", minLength: 1, maxLength: 255 } }]
    : [];
  return [...path, ...query, ...idempotency];
}

const errorResponse = { $ref: "#/components/responses/Error" };

function operationObject(operation: Operation): JsonSchema {
  const responses: Record<string, JsonSchema> = {};
  for (const [status, schema] of Object.entries(operation.responses)) {
    responses[status] = { description: operation.summary, content: { "application/json": { schema: schema === "any" ? { type: "object" } : jsonSchema(schema, "output") } } };
  }
  return {
    operationId: `${operation.method}${operation.path.replace(/\{(\w+)\}/g, "by_$1").replace(/[^A-Za-z0-9]+(.)?/g, (_, c: string | undefined) => (c ?? "").toUpperCase())}`,
    summary: operation.summary,
    security: [{ bearerAuth: operation.scope === null ? [] : [operation.scope] }],
    parameters: parametersOf(operation),
    ...(operation.body && {
      requestBody: { required: !operation.bodyOptional, content: { "application/json": { schema: jsonSchema(operation.body, "input") } } },
    }),
    responses: { ...responses, "4XX": errorResponse, "5XX": errorResponse },
  };
}

function buildDocument(): JsonSchema {
  const paths: Record<string, Record<string, JsonSchema>> = {};
  for (const operation of OPERATIONS) (paths[`/v1${operation.path}`] ??= {})[operation.method] = operationObject(operation);
  const webhooks = Object.fromEntries(
    EVENT_TYPES.map((type) => [
      type,
      {
        post: {
          summary: `the ${type} event, signed with X-Service-Signature and the Standard Webhooks headers`,
          parameters: DELIVERY_HEADERS,
          requestBody: { required: true, content: { "application/json": { schema: jsonSchema(objects.eventPayloads[type], "output") } } },
          responses: { "2XX": { description: "received; any other answer is retried" } },
        },
      },
    ]),
  );
  return {
    openapi: "3.1.1",
    info: {
      title: "badgebench API",
      version: "1",
      description:
        "Attendance records, sessions, badges, releases, events and webhook endpoints. Lists share one envelope " +
        "(`object: list`, `has_more`, `next_cursor`, `data`); pass `next_cursor` as `cursor` with the same filters. " +
        "Every error has the one shape under components.responses.Error. Security scopes name the key scope an operation needs.",
    },
    servers: [{ url: "/" }],
    security: [{ bearerAuth: [] }],
    paths,
    webhooks,
    components: {
      securitySchemes: {
        bearerAuth: { type: "http", scheme: "bearer", description: `API key (sk_test_... or sk_live_...). Scopes: ${Object.entries(SCOPES).map(([scope, what]) => `${scope}: ${what}`).join("; ")}` },
      },
      schemas: { Error: jsonSchema(objects.errorBody, "output") },
      responses: { Error: { description: "the one error shape", content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } } } },
    },
  };
}

let built: JsonSchema | undefined;

/** The document, built once per process (the schemas are fixed at load). */
export function openApiDocument(): JsonSchema {
  built ??= buildDocument();
  return built;
}
