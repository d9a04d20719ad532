// The tool endpoint as clients use it: the handshake, tools/list, the typical edit of SPEC 4.7
// (list_pipelines, get_pipeline, update_stage) in raw JSON-RPC and through the SDK's own Client,
// auth and scopes, modes, filters and paging, and status transitions.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { resultOf, samplePipeline, startMcpHarness, type McpHarness } from "./mcp-harness.ts";

let h: McpHarness;
beforeAll(async () => {
  h = await startMcpHarness();
});
afterAll(() => h.close());

const initialize = (protocolVersion: string, extra: Record<string, unknown> = {}) => ({
  jsonrpc: "2.0",
  id: "init",
  method: "initialize",
  params: { protocolVersion, capabilities: {}, ...extra },
});

describe("handshake", () => {
  it("answers initialize 2025-06-18 with that version, the tools capability and serverInfo, to a client accepting only JSON", async () => {
    const answer = await h.post(initialize("2025-06-18"), { headers: { accept: "application/json" } });
    expect(answer.status).toBe(200);
    expect(answer.headers.get("content-type")).toMatch(/^application\/json/);
    expect(answer.body).toEqual({
      jsonrpc: "2.0",
      id: "init",
      result: { protocolVersion: "2025-06-18", capabilities: { tools: { listChanged: false } }, serverInfo: { name: "badgebench", version: expect.any(String) } },
    });
  });

  it("serves a client that sends no Accept header, or the SDK's pair", async () => {
    for (const accept of ["", "*/*", "application/json, text/event-stream"]) {
      const answer = await h.post(initialize("2025-06-18"), { headers: { accept } });
      expect(answer.status, accept).toBe(200);
      expect(answer.body.result.protocolVersion).toBe("2025-06-18");
    }
  });

  it("echoes another supported version (the SDK client's 2025-11-25) and offers the latest for an unknown one", async () => {
    expect((await h.post(initialize("2025-11-25"))).body.result.protocolVersion).toBe("2025-11-25");
    expect((await h.post(initialize("2025-03-26"))).body.result.protocolVersion).toBe("2025-03-26");
    expect((await h.post(initialize("1999-01-01"))).body.result.protocolVersion).toBe("2025-11-25");
  });

  it("takes an initialize with clientInfo as well as one with only the SPEC's two params", async () => {
    const answer = await h.post(initialize("2025-06-18", { clientInfo: { name: "curl", version: "8" } }));
    expect(answer.body.result.serverInfo.name).toBe("badgebench");
  });

  it("answers notifications/initialized with 202 and no body", async () => {
    const answer = await h.post({ jsonrpc: "2.0", method: "notifications/initialized" }, { headers: { "mcp-protocol-version": "2025-06-18" } });
    expect(answer.status).toBe(202);
    expect(answer.text).toBe("");
  });

  it("checks MCP-Protocol-Version after initialize: a supported one or none is served, an unsupported one is 400", async () => {
    const list = { jsonrpc: "2.0", id: 1, method: "tools/list" };
    expect((await h.post(list, { headers: { "mcp-protocol-version": "2025-06-18" } })).status).toBe(200);
    expect((await h.post(list)).status).toBe(200);
    const refused = await h.post(list, { headers: { "mcp-protocol-version": "2024-01-01" } });
    expect(refused.status).toBe(400);
    expect(refused.body.error.code).toBe(-32000);
    expect(refused.body.error.message).toContain("2024-01-01");
    expect(refused.body.error.message).toContain("2025-06-18");
  });

  it("answers ping", async () => {
    expect((await h.post({ jsonrpc: "2.0", id: 9, method: "ping" })).body).toEqual({ jsonrpc: "2.0", id: 9, result: {} });
  });

  it("asks for a key on GET too: every request is authenticated", async () => {
    const response = await fetch(`${h.url}/api/mcp`, { headers: { accept: "text/event-stream" } });
    expect(response.status).toBe(401);
    expect(response.headers.get("www-authenticate")).toMatch(/^Bearer/);
  });

  it("answers GET and DELETE with 405 and Allow: POST", async () => {
    for (const method of ["GET", "DELETE"]) {
      const response = await fetch(`${h.url}/api/mcp`, { method, headers: { authorization: `Bearer ${h.mcpKeys.write}`, accept: "text/event-stream" } });
      expect(response.status).toBe(405);
      expect(response.headers.get("allow")).toBe("POST");
      expect((await response.json()).error.code).toBe(-32000);
    }
  });
});

describe("tools/list", () => {
  it("lists the four tools, each with an input and an output schema", async () => {
    const answer = await h.post({ jsonrpc: "2.0", id: 2, method: "tools/list" });
    const tools = answer.body.result.tools;
    expect(tools.map((t: { name: string }) => t.name).sort()).toEqual(["create_pipeline", "get_pipeline", "list_pipelines", "update_stage"]);
    for (const tool of tools) {
      expect(tool.inputSchema.type).toBe("object");
      expect(tool.outputSchema.type).toBe("object");
      expect(tool.description.length).toBeGreaterThan(20);
    }
    const create = tools.find((t: { name: string }) => t.name === "create_pipeline");
    expect(create.inputSchema.required.sort()).toEqual(["name", "overview", "owner_email", "stages"]);
    expect(Object.keys(create.inputSchema.properties.stages.items.properties).sort()).toEqual(["dueDate", "goal", "priority", "title"]);
    const update = tools.find((t: { name: string }) => t.name === "update_stage");
    expect(update.inputSchema.required).toEqual(["stage_id"]);
    expect(Object.keys(update.inputSchema.properties).sort()).toEqual(["due_date", "stage_id", "status"]);
    expect(update.inputSchema.properties.status.enum).toContain("in_progress");
    expect(create.inputSchema.properties.stages.items.properties.priority.enum).toContain("high");
  });
});

describe("the typical edit (SPEC 4.7)", () => {
  it("works in raw JSON-RPC: list_pipelines, get_pipeline, update_stage", async () => {
    const created = resultOf(await h.call("create_pipeline", samplePipeline({ name: "Raw edit" })));
    expect(created.stages.map((s: { status: string }) => s.status)).toEqual(["not_started", "not_started", "not_started"]);
    expect(created.stages.map((s: { priority: string }) => s.priority)).toEqual(["high", "medium", "medium"]);

    const listAnswer = await h.call("list_pipelines", { name_contains: "raw EDIT" });
    const list = resultOf(listAnswer);
    expect(JSON.parse(listAnswer.body.result.content[0].text)).toEqual(list);
    expect(list.data.map((p: { pipeline_id: string }) => p.pipeline_id)).toEqual([created.pipeline_id]);
    expect(list.data[0].stage_counts.not_started).toBe(3);

    const pipeline = resultOf(await h.call("get_pipeline", { pipeline_id: list.data[0].pipeline_id }));
    expect(pipeline).toEqual(created);
    const stage = pipeline.stages[1];
    expect(stage.stage_id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);

    const updateAnswer = await h.call("update_stage", { stage_id: stage.stage_id, status: "in_progress", due_date: "2026-04-01" });
    const updated = resultOf(updateAnswer);
    expect(JSON.parse(updateAnswer.body.result.content[0].text)).toEqual(updated);
    expect(updated).toEqual({ ...stage, status: "in_progress", due_date: "2026-04-01" });
    expect(resultOf(await h.call("get_pipeline", { pipeline_id: created.pipeline_id })).stages[1]).toEqual(updated);
  });

  it("works from the SDK's own Client over Streamable HTTP with a bearer header", async () => {
    resultOf(await h.call("create_pipeline", samplePipeline({ name: "SDK edit", owner_email: "grace@example.org" })));
    const client = new Client({ name: "badgebench-test", version: "1.0.0" });
    const transport = new StreamableHTTPClientTransport(new URL(`${h.url}/api/mcp`), {
      requestInit: { headers: { Authorization: `Bearer ${h.mcpKeys.write}` } },
    });
    await client.connect(transport);
    try {
      expect(client.getServerVersion()?.name).toBe("badgebench");
      expect((await client.listTools()).tools).toHaveLength(4);
      const list = await client.callTool({ name: "list_pipelines", arguments: { owner_email: "GRACE@example.org" } });
      const summaries = (list.structuredContent as any).data;
      expect(summaries).toHaveLength(1);
      const pipeline = (await client.callTool({ name: "get_pipeline", arguments: { pipeline_id: summaries[0].pipeline_id } })).structuredContent as any;
      const stage = pipeline.stages[0];
      const result = await client.callTool({ name: "update_stage", arguments: { stage_id: stage.stage_id, status: "in_progress" } });
      expect(result.isError).toBeFalsy();
      expect(result.structuredContent).toEqual({ ...stage, status: "in_progress" });
      expect(JSON.parse((result.content as { text: string }[])[0]!.text)).toEqual(result.structuredContent);

      const missing = await client.callTool({ name: "get_pipeline", arguments: { pipeline_id: "pip_00000000000000000000000000" } });
      expect(missing.isError).toBe(true);
      expect((missing.content as { text: string }[])[0]!.text).toContain("No pipeline 'pip_00000000000000000000000000'");
      // The SDK client speaks 2025-11-25, which takes bad arguments as a tool result the model can act on.
      const invalid = await client.callTool({ name: "update_stage", arguments: { stage_id: "not-a-uuid" } });
      expect(invalid.isError).toBe(true);
      expect((invalid.content as { text: string }[])[0]!.text).toMatch(/stage_id/);
    } finally {
      await client.close();
    }
  });
});

describe("auth (SPEC 5.5)", () => {
  const list = { jsonrpc: "2.0", id: 3, method: "tools/list" };

  it("answers a missing or bad key with 401, WWW-Authenticate and a JSON-RPC error", async () => {
    for (const key of [null, "sk_test_wrong", "dtk_test_abc"]) {
      const answer = await h.post(list, { key });
      expect(answer.status, String(key)).toBe(401);
      expect(answer.headers.get("www-authenticate")).toMatch(/^Bearer realm="badgebench"/);
      expect(answer.body).toMatchObject({ jsonrpc: "2.0", id: null, error: { code: -32001 } });
    }
  });

  it("answers a key without a pipelines scope with 403", async () => {
    const answer = await h.post(list, { key: h.mcpKeys.attendanceOnly });
    expect(answer.status).toBe(403);
    expect(answer.body.error.message).toContain("pipelines:read");
    expect(answer.headers.get("www-authenticate")).toContain('error="insufficient_scope"');
  });

  it("lets a read key list and read but not write, and a write call it cannot make changes nothing", async () => {
    const created = resultOf(await h.call("create_pipeline", samplePipeline({ name: "Read key" })));
    expect(resultOf(await h.call("get_pipeline", { pipeline_id: created.pipeline_id }, { key: h.mcpKeys.read })).name).toBe("Read key");
    const before = await h.snapshot();
    for (const [name, args] of [
      ["update_stage", { stage_id: created.stages[0].stage_id, status: "in_progress" }],
      ["create_pipeline", samplePipeline()],
    ] as const) {
      const answer = await h.call(name, args, { key: h.mcpKeys.read });
      expect(answer.status).toBe(403);
      expect(answer.body.error.message).toContain("pipelines:write");
      expect(answer.body.id).toEqual(expect.any(Number));
    }
    expect(await h.snapshot()).toBe(before);
  });

  it("keeps pipelines in the key's mode", async () => {
    const live = resultOf(await h.call("create_pipeline", samplePipeline({ name: "Live only" }), { key: h.mcpKeys.liveWrite }));
    expect(live.livemode).toBe(true);
    const asTest = await h.call("get_pipeline", { pipeline_id: live.pipeline_id });
    expect(asTest.body.result.isError).toBe(true);
    const stageAsTest = await h.call("update_stage", { stage_id: live.stages[0].stage_id, status: "in_progress" });
    expect(stageAsTest.body.result.isError).toBe(true);
    expect(resultOf(await h.call("list_pipelines", { name_contains: "Live only" })).data).toEqual([]);
    expect(resultOf(await h.call("list_pipelines", { name_contains: "Live only" }, { key: h.mcpKeys.liveWrite })).data).toHaveLength(1);
  });
});

describe("list_pipelines", () => {
  let ids: string[];
  beforeAll(async () => {
    ids = [];
    for (let i = 0; i < 5; i++) {
      const created = resultOf(await h.call("create_pipeline", samplePipeline({ name: `Paging ${i} 100%_done`, owner_email: `pager${i % 2}@example.org` })));
      ids.push(created.pipeline_id);
    }
    const third = resultOf(await h.call("get_pipeline", { pipeline_id: ids[2] }));
    resultOf(await h.call("update_stage", { stage_id: third.stages[0].stage_id, status: "blocked" }));
  });

  it("walks every page with the opaque cursor, in creation order, without repeats", async () => {
    const seen: string[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 10; page++) {
      const list = resultOf(await h.call("list_pipelines", { name_contains: "paging", limit: 2, ...(cursor ? { cursor } : {}) }));
      seen.push(...list.data.map((p: { pipeline_id: string }) => p.pipeline_id));
      if (!list.has_more) {
        expect(list.next_cursor).toBeNull();
        break;
      }
      cursor = list.next_cursor;
    }
    expect(seen).toEqual(ids);
  });

  it("filters by owner e-mail, by stage status, and treats % and _ in the name search as text", async () => {
    const byOwner = resultOf(await h.call("list_pipelines", { owner_email: "Pager1@Example.org" }));
    expect(byOwner.data.map((p: { pipeline_id: string }) => p.pipeline_id)).toEqual([ids[1], ids[3]]);
    const blocked = resultOf(await h.call("list_pipelines", { stage_status: "blocked", name_contains: "paging" }));
    expect(blocked.data.map((p: { pipeline_id: string }) => p.pipeline_id)).toEqual([ids[2]]);
    expect(blocked.data[0].stage_counts).toEqual({ not_started: 2, in_progress: 0, blocked: 1, done: 0, cancelled: 0 });
    expect(resultOf(await h.call("list_pipelines", { name_contains: "100%_done" })).data).toHaveLength(5);
    expect(resultOf(await h.call("list_pipelines", { name_contains: "100%%" })).data).toHaveLength(0);
    expect(resultOf(await h.call("list_pipelines", { name_contains: "1000" })).data).toHaveLength(0);
  });

  it("refuses a cursor used with other filters or tampered with, as -32602 naming cursor", async () => {
    const first = resultOf(await h.call("list_pipelines", { name_contains: "paging", limit: 1 }));
    for (const args of [
      { name_contains: "other", cursor: first.next_cursor },
      { name_contains: "paging", cursor: `${first.next_cursor}x` },
    ]) {
      const answer = await h.call("list_pipelines", args);
      expect(answer.body.error.code).toBe(-32602);
      expect(answer.body.error.data.field).toBe("cursor");
      expect(answer.body.error.message).toContain("cursor");
    }
  });
});

describe("stage statuses", () => {
  it("allows the documented moves and refuses others naming both states, changing nothing", async () => {
    const created = resultOf(await h.call("create_pipeline", samplePipeline({ name: "Moves" })));
    const stageId = created.stages[0].stage_id;
    const move = (status: string) => h.call("update_stage", { stage_id: stageId, status });
    const before = await h.snapshot();
    const refused = await move("done");
    expect(refused.status).toBe(200);
    expect(refused.body.result.isError).toBe(true);
    expect(refused.body.result.content[0].text).toMatch(/from not_started to done/);
    expect(await h.snapshot()).toBe(before);
    for (const status of ["in_progress", "blocked", "in_progress", "done", "in_progress", "cancelled", "not_started"]) {
      expect(resultOf(await move(status)).status).toBe(status);
    }
    expect(resultOf(await move("not_started")).status).toBe("not_started");
    const cancelled = resultOf(await move("cancelled"));
    expect(cancelled.status).toBe("cancelled");
    expect((await move("in_progress")).body.result.content[0].text).toMatch(/from cancelled to in_progress/);
  });

  it("clears a due date with null", async () => {
    const created = resultOf(await h.call("create_pipeline", samplePipeline({ name: "Clear date" })));
    expect(resultOf(await h.call("update_stage", { stage_id: created.stages[0].stage_id, due_date: null })).due_date).toBeNull();
  });

  it("finds a stage by its UUID in upper case too", async () => {
    const created = resultOf(await h.call("create_pipeline", samplePipeline({ name: "Upper" })));
    const stageId: string = created.stages[0].stage_id;
    expect(resultOf(await h.call("update_stage", { stage_id: stageId.toUpperCase(), due_date: "2026-05-05" })).stage_id).toBe(stageId);
  });

  it("says what was not found for an unknown stage", async () => {
    const answer = await h.call("update_stage", { stage_id: "00000000-0000-4000-8000-000000000000", status: "in_progress" });
    expect(answer.body.result).toEqual({ isError: true, content: [{ type: "text", text: expect.stringContaining("No stage '00000000-0000-4000-8000-000000000000'") }] });
  });
});
