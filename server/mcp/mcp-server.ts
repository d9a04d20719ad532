// One McpServer per request (the SDK's stateless mode), with the pipeline tools registered.
// Results carry the JSON as structuredContent and as a text item; an operation that failed on
// valid input is an `isError` result saying what went wrong; anything unexpected is logged and
// answered without internals.
import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import type { Logger } from "pino";
import packageJson from "../../package.json" with { type: "json" };
import { PipelineError } from "../services/pipelines.ts";
import type { PipelineTool, ToolContext } from "./pipeline-tools.ts";
import { loadMcpSdk } from "./sdk.ts";

const SERVER_INFO = { name: "badgebench", version: packageJson.version };

export async function buildMcpServer(tools: readonly PipelineTool[], context: ToolContext, logger: Logger): Promise<McpServer> {
  const { McpServer } = await loadMcpSdk();
  const server = new McpServer(SERVER_INFO);
  for (const tool of tools) {
    server.registerTool(
      tool.name,
      {
        title: tool.title,
        description: `${tool.description} Needs the ${tool.scope} scope.`,
        inputSchema: tool.input,
        outputSchema: tool.output,
        annotations: { readOnlyHint: tool.readOnly, idempotentHint: tool.idempotent, destructiveHint: tool.destructive, openWorldHint: false },
      },
      async (args: unknown): Promise<CallToolResult> => {
        try {
          const result = (await tool.run(context, args as never)) as Record<string, unknown>;
          return { content: [{ type: "text", text: JSON.stringify(result) }], structuredContent: result };
        } catch (error) {
          if (error instanceof PipelineError) return { isError: true, content: [{ type: "text", text: error.message }] };
          logger.error({ err: error, tool: tool.name }, "tool failed");
          return { isError: true, content: [{ type: "text", text: "An internal error occurred. It has been logged." }] };
        }
      },
    );
  }
  // Registering tools makes the SDK announce tools.listChanged; the list never changes and a
  // stateless server could not notify anyone, so the handshake says so.
  server.server.registerCapabilities({ tools: { listChanged: false } });
  return server;
}
