// What differs between the MCP revisions this endpoint serves, and the Origin check that
// 2025-11-25's transport section asks of every Streamable HTTP server (against DNS rebinding:
// a page on evil.example whose name now resolves to this server must not drive its tools).
import type { Request } from "express";
import { JSON_RPC, JsonRpcFailure } from "./json-rpc.ts";

/** The revision whose clients get a tool call's invalid arguments as a tool result (`isError: true`). */
export const INPUT_ERRORS_AS_RESULTS_FROM = "2025-11-25";

/** A request without MCP-Protocol-Version is taken as this revision (the transport spec says so). */
export const ASSUMED_PROTOCOL_VERSION = "2025-03-26";

/**
 * The revision a request speaks: `initialize` names it in its params (answered with it when
 * served, else with the newest), every later request in MCP-Protocol-Version. Revisions are
 * dates, so they compare as strings.
 */
export function revisionOf(req: Request, method: string, params: Record<string, unknown>, served: readonly string[]): string {
  if (method === "initialize") {
    const asked = params.protocolVersion;
    return typeof asked === "string" && served.includes(asked) ? asked : served[0]!;
  }
  return req.get("mcp-protocol-version") ?? ASSUMED_PROTOCOL_VERSION;
}

export const inputErrorsAsResults = (revision: string) => revision >= INPUT_ERRORS_AS_RESULTS_FROM;

/**
 * Refuses (403) a request whose Origin is neither this server's own origin (the scheme and Host
 * it was reached by) nor in `allowedOrigins`. A request without Origin (curl, SDK clients outside
 * a browser) passes; `Origin: null` (a sandboxed page, a file) never does.
 */
export function checkOrigin(req: Request, allowedOrigins: readonly string[]): void {
  const origin = req.get("origin");
  if (origin === undefined) return;
  const own = `${req.protocol}://${req.get("host")}`;
  if (origin !== "null" && (origin === own || allowedOrigins.includes(origin))) return;
  throw new JsonRpcFailure(
    403,
    JSON_RPC.transport,
    `Forbidden: Origin '${origin.slice(0, 100)}' may not use this endpoint; allow it in BADGEBENCH_MCP_ALLOWED_ORIGINS, or call without a browser.`,
  );
}
