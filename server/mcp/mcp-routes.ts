// POST /api/mcp: MCP over Streamable HTTP in the SDK's stateless mode, with JSON answers.
// Before the SDK sees a message this route checks what the SDK would answer differently from
// what our clients need (api-conventions.md, MCP part): it serves a client whose Accept names
// only application/json (a plain curl), answers unknown tools with JSON-RPC -32602 and bad
// arguments with -32602 naming the field (an isError result for 2025-11-25 clients, as that
// revision asks: mcp-revisions.ts), refuses foreign browser origins, and answers every malformed
// body with a JSON-RPC error rather than Express's HTML page. Notifications get 202 at once.
// GET and DELETE (with a valid key, like every request) are 405: the server keeps no sessions
// and pushes nothing.
import type { IncomingMessage, ServerResponse } from "node:http";
import { Router, type NextFunction, type Request, type Response } from "express";
import type { Kysely } from "kysely";
import type { Logger } from "pino";
import { z } from "zod";
import type { CursorCodec } from "../cursor.ts";
import { ApiError } from "../errors.ts";
import { principalOf } from "../http/auth-middleware.ts";
import type { Step } from "../http/steps.ts";
import { clientMistakeOf, databaseUnavailableOf } from "../http/error-middleware.ts";
import { closeIfBodyUnread, rawBody } from "../http/request-body.ts";
import { sendJson } from "../http/send-json.ts";
import type { Principal, Scope } from "../services/api-keys.ts";
import type { Database } from "../store/schema.ts";
import { firstIssue, JSON_RPC, JsonRpcFailure, readMessage, type JsonRpcRequest } from "./json-rpc.ts";
import { buildMcpServer } from "./mcp-server.ts";
import { checkOrigin, inputErrorsAsResults, revisionOf } from "./mcp-revisions.ts";
import { pipelineTools, type PipelineTool } from "./pipeline-tools.ts";
import { loadMcpSdk } from "./sdk.ts";

export const MCP_MAX_BODY_BYTES = 1024 * 1024;

const READ_SCOPE: Scope = "pipelines:read";

// SPEC 4.7 names only protocolVersion and capabilities; clientInfo is filled in when missing
// so a client written from the spec alone is served.
const initializeParams = z.looseObject({
  protocolVersion: z.string().min(1),
  capabilities: z.looseObject({}).default({}),
  clientInfo: z.looseObject({ name: z.string(), version: z.string() }).default({ name: "unnamed client", version: "unknown" }),
});

const callParams = z.looseObject({
  name: z.string().min(1),
  arguments: z.record(z.string(), z.unknown(), { error: "must be an object of the tool's arguments" }).default({}),
});

const KNOWN_METHODS = ["initialize", "ping", "tools/list", "tools/call"];

const invalidParams = (request: JsonRpcRequest, message: string, data?: Record<string, unknown>) =>
  new JsonRpcFailure(200, JSON_RPC.invalidParams, message, request.id, data);

function parseParams<S extends z.ZodType>(schema: S, request: JsonRpcRequest): z.output<S> {
  const result = schema.safeParse(request.params, { reportInput: true });
  if (result.success) return result.data;
  const { field, message } = firstIssue(result.error);
  throw invalidParams(request, `Invalid params for ${request.method}: ${message}.`, { field });
}

function requireScope(principal: Principal, scope: Scope, id: JsonRpcRequest["id"] | null, what: string) {
  if (principal.scopes.has(scope)) return;
  throw new JsonRpcFailure(403, JSON_RPC.unauthorized, `This API key lacks the '${scope}' scope, which ${what} needs.`, id, undefined, {
    "WWW-Authenticate": `Bearer realm="badgebench", error="insufficient_scope", scope="${scope}"`,
  });
}

async function checkProtocolVersion(req: Request) {
  const version = req.get("mcp-protocol-version");
  const { protocolVersions } = await loadMcpSdk();
  if (version !== undefined && !protocolVersions.includes(version)) {
    throw new JsonRpcFailure(
      400,
      JSON_RPC.transport,
      `Bad Request: unsupported MCP-Protocol-Version '${version.slice(0, 40)}'; supported: ${protocolVersions.join(", ")}.`,
    );
  }
}

/** Arguments that failed the tool's input schema, for a client whose revision takes them as a tool result. */
class ToolInputError extends Error {
  override name = "ToolInputError";
}

/**
 * Checks a tools/call completely (tool, scope, arguments) so the SDK only runs valid calls;
 * returns the tool. Bad arguments are -32602 before 2025-11-25 and a ToolInputError from it on.
 */
function checkToolCall(request: JsonRpcRequest, principal: Principal, tools: Map<string, PipelineTool>, revision: string): PipelineTool {
  const params = parseParams(callParams, request);
  const tool = tools.get(params.name);
  if (!tool) {
    throw invalidParams(request, `Unknown tool '${params.name.slice(0, 60)}'; the tools are ${[...tools.keys()].join(", ")}.`, { field: "name" });
  }
  requireScope(principal, tool.scope, request.id, tool.name);
  const result = tool.input.safeParse(params.arguments, { reportInput: true });
  if (!result.success) {
    const { field, message } = firstIssue(result.error, tool.misspellings);
    if (inputErrorsAsResults(revision)) throw new ToolInputError(`Invalid arguments for ${tool.name}: ${message} (${field}). Correct it and call again.`);
    throw invalidParams(request, `Invalid arguments for ${tool.name}: ${message}.`, { tool: tool.name, field });
  }
  return tool;
}

/**
 * `logSynced` resolves once every commit made so far is on disk (Store.logSynced): a writing
 * tool's commit is outside the group commit, so its answer waits for it, as every acknowledged
 * write does; reading tools answer at once.
 */
export function mcpRoutes(deps: {
  db: Kysely<Database>;
  codec: CursorCodec;
  logger: Logger;
  logSynced: () => Promise<void>;
  /** the server's API-key authentication middleware, shared with /v1 (its cache and failure budget with it) */
  auth: Step;
  /** browser origins besides the server's own that may call the endpoint (mcp-revisions.ts, checkOrigin) */
  allowedOrigins: readonly string[];
}): Router {
  const tools = pipelineTools(deps.codec);
  const toolsByName = new Map(tools.map((tool) => [tool.name, tool]));
  const router = Router();

  /** Hands a checked request to a fresh stateless SDK server and copies its answer. */
  async function answerWithSdk(req: Request, res: Response, message: JsonRpcRequest, writes: boolean) {
    const principal = principalOf(req);
    const server = await buildMcpServer(tools, { db: deps.db, codec: deps.codec, livemode: principal.livemode }, deps.logger);
    // The web-standard transport is the one StreamableHTTPServerTransport wraps; used directly,
    // the route hands it the body it already parsed and the headers the SDK insists on.
    const transport = new (await loadMcpSdk()).Transport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    await server.connect(transport);
    try {
      const headers = new Headers({ accept: "application/json, text/event-stream", "content-type": "application/json" });
      const version = req.get("mcp-protocol-version");
      if (version !== undefined) headers.set("mcp-protocol-version", version);
      const response = await transport.handleRequest(new Request("http://localhost/api/mcp", { method: "POST", headers }), {
        parsedBody: { jsonrpc: "2.0", id: message.id, method: message.method, params: message.params },
      });
      const body = await response.text();
      if (writes) await deps.logSynced();
      res.status(response.status).type("application/json").send(body);
    } finally {
      await server.close();
    }
  }

  router.use((req, _res, next) => {
    checkOrigin(req, deps.allowedOrigins);
    next();
  });
  router.use(deps.auth);
  router.post("/", rawBody(MCP_MAX_BODY_BYTES), async (req, res) => {
    const principal = principalOf(req);
    requireScope(principal, READ_SCOPE, null, "the tool endpoint");
    const mediaType = (req.get("content-type") ?? "").split(";")[0]!.trim().toLowerCase();
    if (mediaType !== "application/json") {
      throw new JsonRpcFailure(415, JSON_RPC.invalidRequest, "Unsupported Media Type: send the JSON-RPC message with Content-Type: application/json.");
    }
    const message = readMessage(Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0));
    if (message.method !== "initialize") await checkProtocolVersion(req);
    if (message.kind === "notification") {
      res.status(202).end();
      return;
    }
    let writes = false;
    switch (message.method) {
      case "initialize":
        message.params = parseParams(initializeParams, message);
        break;
      case "tools/call":
        try {
          writes = !checkToolCall(message, principal, toolsByName, revisionOf(req, message.method, message.params, (await loadMcpSdk()).protocolVersions)).readOnly;
        } catch (error) {
          if (!(error instanceof ToolInputError)) throw error;
          res.json({ jsonrpc: "2.0", id: message.id, result: { content: [{ type: "text", text: error.message }], isError: true } });
          return;
        }
        break;
      default:
        if (!KNOWN_METHODS.includes(message.method)) {
          throw new JsonRpcFailure(
            200,
            JSON_RPC.methodNotFound,
            `Method not found: '${message.method.slice(0, 60)}'; this server answers ${KNOWN_METHODS.join(", ")}.`,
            message.id,
          );
        }
    }
    await answerWithSdk(req, res, message, writes);
  });

  router.all("/", () => {
    throw new JsonRpcFailure(
      405,
      JSON_RPC.transport,
      "Method Not Allowed: send JSON-RPC messages with POST; this server keeps no sessions and opens no event stream.",
      null,
      undefined,
      { Allow: "POST" },
    );
  });

  router.use(mcpErrorHandler(deps.logger));

  return router;
}

/**
 * Every refusal on this path is JSON-RPC shaped, the authentication ones included (the app's
 * failed-authentication gate answers through it too).
 */
export function mcpErrorHandler(logger: Logger) {
  return (error: unknown, req: IncomingMessage & { originalUrl?: string }, res: ServerResponse, _next?: NextFunction) => {
    let failure: JsonRpcFailure;
    if (error instanceof JsonRpcFailure) failure = error;
    else {
      const apiError = error instanceof ApiError ? error : (clientMistakeOf(error) ?? databaseUnavailableOf(error));
      if (apiError?.code === "database_unavailable") {
        logger.error({ err: error, method: req.method, url: req.originalUrl }, "tool endpoint request failed");
        failure = new JsonRpcFailure(apiError.status, JSON_RPC.internalError, apiError.message, null, undefined, apiError.headers);
      } else if (apiError && apiError.status < 500) {
        const code = apiError.status === 401 || apiError.status === 403 ? JSON_RPC.unauthorized : JSON_RPC.invalidRequest;
        const limit = apiError.code === "body_too_large" ? ` The limit is ${MCP_MAX_BODY_BYTES / 1024 / 1024} MiB.` : "";
        failure = new JsonRpcFailure(apiError.status, code, `${apiError.message}${limit}`, null, undefined, apiError.headers);
      } else {
        logger.error({ err: error, method: req.method, url: req.originalUrl }, "tool endpoint request failed");
        failure = new JsonRpcFailure(500, JSON_RPC.internalError, "Internal error. It has been logged.");
      }
    }
    closeIfBodyUnread(req, res);
    sendJson(res, failure.status, failure.toBody(), failure.headers);
  };
}
