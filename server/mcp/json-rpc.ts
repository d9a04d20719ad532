// Reading one JSON-RPC 2.0 message from a request body, and the errors of the tool endpoint.
// The SDK's own checks answer some mistakes with tool results or Express HTML pages; every
// mistake is caught here first and answered with a defined JSON-RPC error.
import type { z } from "zod";
import { exceedsJsonDepth, MAX_JSON_DEPTH } from "../http/json-depth.ts";

export const JSON_RPC = {
  parseError: -32700,
  invalidRequest: -32600,
  methodNotFound: -32601,
  invalidParams: -32602,
  internalError: -32603,
  /** transport-level refusals (method, media type, protocol version), as the SDK numbers them */
  transport: -32000,
  /** authentication and permission (with HTTP 401 and 403) */
  unauthorized: -32001,
} as const;

export type RequestId = string | number;

/** A refusal: the HTTP status and the JSON-RPC error to answer with. */
export class JsonRpcFailure extends Error {
  override name = "JsonRpcFailure";
  constructor(
    readonly status: number,
    readonly code: number,
    message: string,
    readonly id: RequestId | null = null,
    readonly data?: Record<string, unknown>,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }

  toBody() {
    return {
      jsonrpc: "2.0" as const,
      id: this.id,
      error: { code: this.code, message: this.message, ...(this.data === undefined ? {} : { data: this.data }) },
    };
  }
}

export interface JsonRpcRequest {
  kind: "request";
  id: RequestId;
  method: string;
  params: Record<string, unknown>;
}

export interface JsonRpcNotification {
  kind: "notification";
  method: string;
  params: Record<string, unknown>;
}

const invalidRequest = (message: string, id: RequestId | null = null) => new JsonRpcFailure(400, JSON_RPC.invalidRequest, message, id);

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  return typeof value === "object" ? "an object" : `a ${typeof value}`;
}

/** Parses and checks the envelope of one message; throws a JsonRpcFailure for anything else. */
export function readMessage(body: Buffer): JsonRpcRequest | JsonRpcNotification {
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(body);
  } catch {
    throw new JsonRpcFailure(400, JSON_RPC.parseError, "Parse error: the request body is not valid UTF-8.");
  }
  let message: unknown;
  try {
    message = JSON.parse(text);
  } catch {
    throw new JsonRpcFailure(400, JSON_RPC.parseError, "Parse error: the request body is not valid JSON.");
  }
  if (exceedsJsonDepth(message)) {
    throw invalidRequest(`Invalid Request: the JSON is nested more than ${MAX_JSON_DEPTH} levels deep.`);
  }
  if (Array.isArray(message)) {
    throw invalidRequest("Invalid Request: batches are not supported (MCP removed JSON-RPC batching in 2025-06-18); send one message per request.");
  }
  if (!isPlainObject(message)) throw invalidRequest(`Invalid Request: the message must be a JSON object, not ${describe(message)}.`);
  const rawId = message.id;
  const id = typeof rawId === "string" || (typeof rawId === "number" && Number.isSafeInteger(rawId)) ? rawId : null;
  if (message.jsonrpc !== "2.0") {
    throw invalidRequest(`Invalid Request: jsonrpc must be "2.0" (got ${JSON.stringify(message.jsonrpc) ?? "nothing"}).`, id);
  }
  if (typeof message.method !== "string" || message.method.length === 0) {
    const hint = "result" in message || "error" in message ? " This server sends no requests, so it takes no responses." : "";
    throw invalidRequest(`Invalid Request: method must be a non-empty string.${hint}`, id);
  }
  const params = message.params ?? {};
  if (!isPlainObject(params)) throw invalidRequest(`Invalid Request: params must be an object, not ${describe(params)}.`, id);
  const isNotification = message.method.startsWith("notifications/");
  if (isNotification) {
    if ("id" in message) throw invalidRequest(`Invalid Request: ${message.method} is a notification and takes no id.`, id);
    return { kind: "notification", method: message.method, params };
  }
  if (!("id" in message)) {
    throw invalidRequest(`Invalid Request: id is required on a request (only notifications/* methods go without one).`);
  }
  if (id === null) {
    throw invalidRequest(`Invalid Request: id must be a string or an integer, not ${Number.isFinite(rawId) ? "a fraction" : describe(rawId)}.`);
  }
  return { kind: "request", id, method: message.method, params };
}

/** The first problem of a failed zod parse, as "field: what is wrong", and the field's path. */
export function firstIssue(error: z.ZodError, misspellings: Record<string, string> = {}): { field: string; message: string } {
  const issue = error.issues[0]!;
  const at = (path: PropertyKey[]) => path.map(String).join(".");
  if (issue.code === "unrecognized_keys") {
    const field = at([...issue.path, issue.keys[0]!]);
    const rename = misspellings[issue.keys[0]!];
    return { field, message: `${field}: unknown argument${rename ? ` (did you mean ${rename}?)` : ""}` };
  }
  const field = at(issue.path) || "arguments";
  if (issue.code === "invalid_type" && issue.input === undefined) return { field, message: `${field}: required` };
  const shown = typeof issue.input === "string" ? ` (got '${issue.input.slice(0, 60)}')` : "";
  return { field, message: `${field}: ${issue.message.replace(/\.$/, "")}${shown}` };
}
