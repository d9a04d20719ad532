// Property-based fuzz of POST /api/mcp from outside, over HTTP: random bytes, random JSON, and
// random JSON-RPC messages built from the real methods, tools, fields and ids. Whatever arrives,
// the answer is never a 5xx and never HTML: a 202 with no body for a notification, otherwise a
// JSON-RPC response; and a refused message (an error or an isError result) changes no row.
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MCP_MAX_BODY_BYTES } from "../../server/mcp/mcp-routes.ts";
import { oversizedJson } from "./fuzz-http.ts";
import { resultOf, samplePipeline, startMcpHarness, type McpAnswer, type McpHarness } from "./mcp-harness.ts";

let h: McpHarness;
let stageIds: string[];
let pipelineId: string;
beforeAll(async () => {
  h = await startMcpHarness();
  const created = resultOf(await h.call("create_pipeline", samplePipeline()));
  pipelineId = created.pipeline_id;
  stageIds = created.stages.map((s: { stage_id: string }) => s.stage_id);
});
afterAll(() => h.close());

const absent = Symbol("absent");
/** Mostly the field's own kind of value, sometimes left out, sometimes anything at all. */
const maybe = <T,>(arb: fc.Arbitrary<T>) => fc.oneof({ arbitrary: arb, weight: 4 }, fc.constant(absent), fc.anything());
const withoutAbsent = (record: Record<string, unknown>) => Object.fromEntries(Object.entries(record).filter(([, v]) => v !== absent));

const dateish = fc.oneof(
  { arbitrary: fc.date({ min: new Date("2020-01-01"), max: new Date("2030-12-31"), noInvalidDate: true }).map((d) => d.toISOString().slice(0, 10)), weight: 3 },
  fc.date({ min: new Date("1900-01-01"), max: new Date("2200-12-31"), noInvalidDate: true }).map((d) => d.toISOString().slice(0, 10)),
  fc.tuple(fc.integer({ min: 0, max: 9999 }), fc.integer({ min: 0, max: 99 }), fc.integer({ min: 0, max: 99 })).map(
    ([y, m, d]) => `${String(y).padStart(4, "0")}-${String(m).padStart(2, "0")}-${String(d).padStart(2, "0")}`,
  ),
  fc.string(),
);
const status = fc.constantFrom("not_started", "in_progress", "blocked", "done", "cancelled", "finished", "");
const stageId = () =>
  fc.oneof(
    { arbitrary: fc.constantFrom(...stageIds), weight: 4 },
    fc.uuid(),
    fc.string(),
    fc.constantFrom(...stageIds).map((s) => s.toUpperCase()),
  );

const updateArguments = () =>
  fc.record({ stage_id: maybe(stageId()), due_date: maybe(fc.oneof(dateish, fc.constant(null))), status: maybe(status), dueDate: fc.oneof({ arbitrary: fc.constant(absent), weight: 9 }, dateish) }).map(withoutAbsent);

const createArguments = () =>
  fc
    .record({
      name: maybe(fc.string({ minLength: 1, maxLength: 300 })),
      overview: maybe(fc.string({ minLength: 1 })),
      owner_email: maybe(fc.oneof(fc.constantFrom("ada@example.org", "GRACE@Example.org"), fc.emailAddress(), fc.string())),
      stages: maybe(
        fc.array(
          fc
            .record({
              title: maybe(fc.string({ minLength: 1 })),
              goal: maybe(fc.string({ minLength: 1 })),
              priority: fc.oneof(fc.constant(absent), fc.constantFrom("low", "high", "critical")),
              dueDate: fc.oneof(fc.constant(absent), dateish),
            })
            .map(withoutAbsent),
          { minLength: 1, maxLength: 3 },
        ),
      ),
    })
    .map(withoutAbsent);

const listArguments = () =>
  fc
    .record({
      owner_email: fc.oneof({ arbitrary: fc.constant(absent), weight: 3 }, fc.emailAddress()),
      name_contains: fc.oneof({ arbitrary: fc.constant(absent), weight: 3 }, fc.string()),
      stage_status: fc.oneof({ arbitrary: fc.constant(absent), weight: 3 }, status),
      limit: fc.oneof({ arbitrary: fc.constant(absent), weight: 3 }, fc.integer({ min: -5, max: 200 })),
      cursor: fc.oneof({ arbitrary: fc.constant(absent), weight: 3 }, fc.string()),
    })
    .map(withoutAbsent);

/** A tool name with arguments aimed at that tool, or anything at all. */
const toolCall = () =>
  fc.oneof(
    fc.record({ name: fc.constant("update_stage"), arguments: updateArguments() }),
    fc.record({ name: fc.constant("create_pipeline"), arguments: createArguments() }),
    fc.record({ name: fc.constant("list_pipelines"), arguments: listArguments() }),
    fc.record({ name: fc.constant("get_pipeline"), arguments: fc.record({ pipeline_id: maybe(fc.oneof(fc.constant(pipelineId), fc.string())) }).map(withoutAbsent) }),
    fc.record({ name: fc.oneof(fc.string(), fc.anything()), arguments: fc.anything() }),
  );

const message = () =>
  fc
    .record({
      jsonrpc: fc.oneof(fc.constant("2.0"), fc.constant("2.0"), fc.constant(absent), fc.anything()),
      id: fc.oneof(fc.integer(), fc.string(), fc.constant(null), fc.constant(absent), fc.double(), fc.anything()),
      method: fc.oneof(
        fc.constantFrom("initialize", "ping", "tools/list", "tools/call", "tools/call", "tools/call", "notifications/initialized", "resources/list"),
        fc.string(),
        fc.constant(absent),
        fc.anything(),
      ),
      params: fc.oneof(
        toolCall(),
        fc.record({ protocolVersion: maybe(fc.constantFrom("2025-06-18", "2025-11-25", "1.0")), capabilities: maybe(fc.object()) }).map(withoutAbsent),
        fc.constant(absent),
        fc.anything(),
      ),
    })
    .map(withoutAbsent);

const headers = fc.record({
  "mcp-protocol-version": fc.constantFrom(undefined, "2025-06-18", "2025-11-25", "2024-01-01", "x"),
  "content-type": fc.constantFrom("application/json", "application/json; charset=utf-8", "text/plain", "application/x-www-form-urlencoded"),
  accept: fc.constantFrom("application/json", "application/json, text/event-stream", "*/*", "text/html"),
});

const keys = () => fc.constantFrom(h.mcpKeys.write, h.mcpKeys.write, h.mcpKeys.read, h.mcpKeys.attendanceOnly, "sk_test_nope", null);

function checkAnswer(answer: McpAnswer) {
  expect(answer.status).toBeLessThan(500);
  expect(answer.text).not.toMatch(/<html|<!DOCTYPE|<pre>/i);
  if (answer.status === 202) {
    expect(answer.text).toBe("");
    return false;
  }
  expect(answer.headers.get("content-type")).toMatch(/^application\/json/);
  const body = answer.body;
  expect(body?.jsonrpc).toBe("2.0");
  if ("error" in body) {
    expect(body.error.code).toEqual(expect.any(Number));
    expect(body.error.message).toEqual(expect.any(String));
    expect(answer.status === 200 || answer.status >= 400).toBe(true);
    return true;
  }
  expect(answer.status).toBe(200);
  expect(body.result).toBeTypeOf("object");
  return body.result.isError === true;
}

describe("fuzz of /api/mcp from outside", () => {
  it("random bytes", async () => {
    await fc.assert(
      fc.asyncProperty(fc.uint8Array({ maxLength: 512 }), keys(), async (bytes, key) => {
        const before = await h.snapshot();
        const refused = checkAnswer(await h.post(bytes, { key }));
        expect(refused).toBe(true);
        expect(await h.snapshot()).toBe(before);
      }),
      { numRuns: 150 },
    );
  });

  it("random JSON values", async () => {
    await fc.assert(
      fc.asyncProperty(fc.jsonValue(), async (value) => {
        const before = await h.snapshot();
        if (checkAnswer(await h.post(JSON.stringify(value) ?? "null"))) expect(await h.snapshot()).toBe(before);
      }),
      { numRuns: 150 },
    );
  });

  it("oversized JSON (thousands of levels deep, huge arrays, long strings) as the message or as a tool's arguments", async () => {
    await fc.assert(
      fc.asyncProperty(oversizedJson(MCP_MAX_BODY_BYTES - 1024), fc.boolean(), async (json, asArguments) => {
        const before = await h.snapshot();
        const body = asArguments ? `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_pipeline","arguments":{"stages":${json}}}}` : json;
        expect(checkAnswer(await h.post(body))).toBe(true);
        expect(await h.snapshot()).toBe(before);
      }),
      { numRuns: 40 },
    );
  });

  it("well-formed tool calls with random arguments, which sometimes succeed", async () => {
    const outcomes = { succeeded: 0, refused: 0 };
    await fc.assert(
      fc.asyncProperty(fc.oneof(fc.integer(), fc.string()), toolCall(), async (id, params) => {
        const before = await h.snapshot();
        const answer = await h.post({ jsonrpc: "2.0", id, method: "tools/call", params });
        const refused = checkAnswer(answer);
        expect(answer.body.id).toEqual(id);
        if (refused) expect(await h.snapshot()).toBe(before);
        outcomes[refused ? "refused" : "succeeded"]++;
      }),
      { numRuns: 600 },
    );
    // The generator reaches the tools, not only the argument checks.
    expect(outcomes.succeeded).toBeGreaterThan(30);
  });

  it("random JSON-RPC messages, headers and keys", async () => {
    await fc.assert(
      fc.asyncProperty(message(), headers, keys(), async (body, extraHeaders, key) => {
        const before = await h.snapshot();
        const sent = Object.fromEntries(Object.entries(extraHeaders).filter(([, v]) => v !== undefined)) as Record<string, string>;
        const refused = checkAnswer(await h.post(JSON.stringify(body) ?? "null", { key, headers: sent }));
        if (refused) expect(await h.snapshot()).toBe(before);
      }),
      { numRuns: 600 },
    );
  });
});
