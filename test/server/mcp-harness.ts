// The real server on port 0 (harness.ts) plus keys with the pipelines scopes and raw JSON-RPC
// helpers for POST /api/mcp, so the tool endpoint is tested as a client sees it.
import { createApiKey } from "../../server/services/api-keys.ts";
import { startHarness, type Harness, type HarnessOptions } from "./harness.ts";

export interface McpHarness extends Harness {
  mcpKeys: { write: string; read: string; liveWrite: string; attendanceOnly: string };
  /** POSTs a body (an object is sent as JSON, a string or bytes as they are) and reads the answer. */
  post(body: unknown, options?: { key?: string | null; headers?: Record<string, string> }): Promise<McpAnswer>;
  /** tools/call with the write key unless told otherwise; returns the JSON-RPC answer. */
  call(name: string, args: unknown, options?: { key?: string }): Promise<McpAnswer>;
  /** Every pipeline and stage row, in a stable order, for before/after comparisons. */
  snapshot(): Promise<string>;
}

export interface McpAnswer {
  status: number;
  headers: Headers;
  text: string;
  body: any;
}

let nextId = 1;

export async function startMcpHarness(options: HarnessOptions = {}): Promise<McpHarness> {
  const h = await startHarness(options);
  const key = async (mode: "test" | "live", scopes: string[]) => (await createApiKey(h.server.store.db, { mode, scopes })).secret;
  const mcpKeys = {
    write: await key("test", ["pipelines:write"]),
    read: await key("test", ["pipelines:read"]),
    liveWrite: await key("live", ["pipelines:write"]),
    attendanceOnly: h.keys.read,
  };
  const post: McpHarness["post"] = async (body, options = {}) => {
    const key = options.key === undefined ? mcpKeys.write : options.key;
    const headers: Record<string, string> = { "content-type": "application/json", accept: "application/json", ...options.headers };
    if (key !== null) headers.authorization = `Bearer ${key}`;
    const response = await fetch(`${h.url}/api/mcp`, {
      method: "POST",
      headers,
      body: typeof body === "string" ? body : body instanceof Uint8Array ? Buffer.from(body) : JSON.stringify(body),
    });
    const text = await response.text();
    let parsed: unknown;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      parsed = undefined;
    }
    return { status: response.status, headers: response.headers, text, body: parsed };
  };
  return {
    ...h,
    mcpKeys,
    post,
    call: (name, args, options = {}) =>
      post({ jsonrpc: "2.0", id: nextId++, method: "tools/call", params: { name, arguments: args } }, { key: options.key }),
    async snapshot() {
      const db = h.server.store.db;
      const pipelines = await db.selectFrom("pipelines").selectAll().orderBy("id").execute();
      const stages = await db.selectFrom("stages").selectAll().orderBy("id").execute();
      return JSON.stringify({ pipelines, stages });
    },
  };
}

/** The structured result of a successful tool call, or a thrown error saying what came back. */
export function resultOf(answer: McpAnswer): any {
  if (answer.status !== 200 || !answer.body?.result || answer.body.result.isError) {
    throw new Error(`tool call failed: ${answer.status} ${answer.text}`);
  }
  return answer.body.result.structuredContent;
}

export const samplePipeline = (over: Record<string, unknown> = {}) => ({
  name: "Spring open day",
  overview: "Everything for the open day in April.",
  owner_email: "ada@example.org",
  stages: [
    { title: "Book the hall", goal: "Hall booked for 12 April", priority: "high", dueDate: "2026-03-01" },
    { title: "Print flyers", goal: "500 flyers", dueDate: "2026-03-15" },
    { title: "Invite parents", goal: "Letter sent to every family" },
  ],
  ...over,
});
