// MCP 2025-11-25 beside 2025-06-18: bad tool arguments as a tool result (isError) for clients
// of the newer revision and as -32602 for the older; every structuredContent valid against its
// tool's outputSchema (checked with ajv, not with the SDK that produced it); the Origin check
// against DNS rebinding; and tools that say truthfully what they do.
import { Ajv, type ValidateFunction } from "ajv";
import { Ajv2020 } from "ajv/dist/2020.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { addFormats } from "./openapi-check.ts";
import { resultOf, samplePipeline, startMcpHarness, type McpAnswer, type McpHarness } from "./mcp-harness.ts";

const ALLOWED = "https://console.example.org";
let h: McpHarness;
let outputChecks: Map<string, ValidateFunction>;
let tools: any[];
beforeAll(async () => {
  h = await startMcpHarness({ mcpAllowedOrigins: [ALLOWED] });
  tools = (await h.post({ jsonrpc: "2.0", id: 1, method: "tools/list" })).body.result.tools;
  outputChecks = new Map(
    tools.map((tool) => {
      const ajv = addFormats(tool.outputSchema.$schema?.includes("2020-12") ? new Ajv2020({ strict: false }) : new Ajv({ strict: false }));
      return [tool.name, ajv.compile(tool.outputSchema)];
    }),
  );
});
afterAll(() => h.close());

let nextId = 100;
const callAs = (revision: string | null, name: string, args: unknown) =>
  h.post({ jsonrpc: "2.0", id: nextId++, method: "tools/call", params: { name, arguments: args } }, { headers: revision ? { "mcp-protocol-version": revision } : {} });

/** Every result's structuredContent, error results included, must validate against the tool's outputSchema. */
function expectValidStructuredContent(name: string, answer: McpAnswer) {
  const structured = answer.body?.result?.structuredContent;
  if (structured === undefined) return;
  const check = outputChecks.get(name)!;
  expect(check(structured), JSON.stringify(check.errors)).toBe(true);
}

describe("a tool call's invalid arguments, per revision", () => {
  const bad = { name: "create_pipeline", args: samplePipeline({ owner_email: "not an e-mail" }) };

  it("2025-11-25: a tool result with isError: true naming the field, so the model can correct itself; nothing written", async () => {
    const before = await h.snapshot();
    const answer = await callAs("2025-11-25", bad.name, bad.args);
    expect(answer.status).toBe(200);
    expect(answer.body.error).toBeUndefined();
    expect(answer.body.result.isError).toBe(true);
    expect(answer.body.result.content[0].text).toMatch(/Invalid arguments for create_pipeline: .*owner_email/);
    expectValidStructuredContent(bad.name, answer);
    expect(await h.snapshot()).toBe(before);
  });

  it("2025-06-18 and clients that send no version: JSON-RPC -32602 with the field, as before", async () => {
    for (const revision of ["2025-06-18", null]) {
      const answer = await callAs(revision, bad.name, bad.args);
      expect(answer.status).toBe(200);
      expect(answer.body.error).toMatchObject({ code: -32602, data: { field: "owner_email" } });
    }
  });

  it("an unknown tool stays a protocol error (-32602) under 2025-11-25", async () => {
    const answer = await callAs("2025-11-25", "drop_tables", {});
    expect(answer.body.error).toMatchObject({ code: -32602, data: { field: "name" } });
  });

  it("each tool's bad arguments under 2025-11-25 are an isError result", async () => {
    const badArgs: Record<string, unknown> = { list_pipelines: { limit: 0 }, get_pipeline: { pipeline_id: "nope" }, create_pipeline: {}, update_stage: { stage_id: "x" } };
    for (const tool of tools) {
      const answer = await callAs("2025-11-25", tool.name, badArgs[tool.name]);
      expect(answer.body.result?.isError, `${tool.name}: ${answer.text}`).toBe(true);
      expectValidStructuredContent(tool.name, answer);
    }
  });
});

describe("structured output", () => {
  it("validates against each tool's outputSchema, on success and on a refused operation", async () => {
    const created = resultOf(await callAs("2025-11-25", "create_pipeline", samplePipeline()));
    const stageId = created.stages[0].stage_id;
    const calls: [string, unknown][] = [
      ["create_pipeline", samplePipeline({ name: "Second" })],
      ["list_pipelines", {}],
      ["get_pipeline", { pipeline_id: created.pipeline_id }],
      ["update_stage", { stage_id: stageId, status: "in_progress" }],
      // valid input the operation refuses: isError results
      ["get_pipeline", { pipeline_id: "pip_unknown" }],
      ["update_stage", { stage_id: stageId, status: "cancelled" }],
      ["update_stage", { stage_id: stageId, status: "blocked" }],
    ];
    let refused = 0;
    for (const revision of ["2025-11-25", "2025-06-18"]) {
      for (const [name, args] of calls) {
        const answer = await callAs(revision, name, args);
        expect(answer.body.result, answer.text).toBeDefined();
        if (answer.body.result.isError) refused++;
        else expect(answer.body.result.structuredContent).toBeDefined();
        expectValidStructuredContent(name, answer);
      }
    }
    expect(refused).toBeGreaterThanOrEqual(2);
  });
});

describe("tools describe themselves", () => {
  it("with a title and the hints that say what they do", () => {
    const hints = Object.fromEntries(tools.map((tool) => [tool.name, { title: tool.title, ...tool.annotations }]));
    expect(hints.list_pipelines).toMatchObject({ title: "List pipelines", readOnlyHint: true, idempotentHint: true });
    expect(hints.get_pipeline).toMatchObject({ title: "Get a pipeline", readOnlyHint: true, idempotentHint: true });
    // adds a pipeline each call: not idempotent, overwrites nothing
    expect(hints.create_pipeline).toMatchObject({ title: "Create a pipeline", readOnlyHint: false, destructiveHint: false, idempotentHint: false });
    // overwrites a stage's status and due date; the same call twice leaves the same stage
    expect(hints.update_stage).toMatchObject({ title: "Update a stage", readOnlyHint: false, destructiveHint: true, idempotentHint: true });
  });
});

describe("the Origin check (DNS rebinding)", () => {
  const list = { jsonrpc: "2.0", id: 7, method: "tools/list" };

  it("refuses another site's page and an opaque origin with 403, before anything runs", async () => {
    const before = await h.snapshot();
    for (const origin of ["http://evil.example", "null"]) {
      const answer = await h.post({ jsonrpc: "2.0", id: 8, method: "tools/call", params: { name: "create_pipeline", arguments: samplePipeline() } }, { headers: { origin } });
      expect(answer.status).toBe(403);
      expect(answer.body).toMatchObject({ jsonrpc: "2.0", error: { code: -32000 } });
      expect(answer.body.error.message).toContain(`Origin '${origin}'`);
    }
    // Refused before authentication too: a rebinding page learns nothing about keys.
    expect((await h.post(list, { key: null, headers: { origin: "http://evil.example" } })).status).toBe(403);
    expect(await h.snapshot()).toBe(before);
  });

  it("serves the server's own origin, an allowed origin, and clients that send none", async () => {
    for (const headers of [{ origin: h.url }, { origin: ALLOWED }, {}] as Record<string, string>[]) {
      const answer = await h.post(list, { headers });
      expect(answer.status, JSON.stringify(headers)).toBe(200);
      expect(answer.body.result.tools).toHaveLength(4);
    }
  });
});
