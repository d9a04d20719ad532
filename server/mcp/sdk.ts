// The MCP SDK, loaded on the first request to the tool endpoint rather than at start: it and the
// schemas it builds are about 10 MB of a server's memory that a school without pipelines never
// uses (the idle server's RSS, issue 12).
import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js";

export interface McpSdk {
  McpServer: typeof McpServer;
  Transport: typeof WebStandardStreamableHTTPServerTransport;
  /** the protocol versions the SDK serves; a request without MCP-Protocol-Version means 2025-03-26 */
  protocolVersions: readonly string[];
}

let loading: Promise<McpSdk> | undefined;

export function loadMcpSdk(): Promise<McpSdk> {
  loading ??= Promise.all([
    import("@modelcontextprotocol/sdk/server/mcp.js"),
    import("@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js"),
    import("@modelcontextprotocol/sdk/types.js"),
  ]).then(([server, transport, types]) => ({
    McpServer: server.McpServer,
    Transport: transport.WebStandardStreamableHTTPServerTransport,
    protocolVersions: types.SUPPORTED_PROTOCOL_VERSIONS,
  }));
  return loading;
}
