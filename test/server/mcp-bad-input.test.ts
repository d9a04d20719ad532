// Every bad input of issue 11 gets a defined JSON-RPC error (or an isError result) with a clear
// message, never a 500 or an HTML page, and changes no pipeline or stage.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { resultOf, samplePipeline, startMcpHarness, type McpHarness } from "./mcp-harness.ts";

let h: McpHarness;
let stageId: string;
beforeAll(async () => {
  h = await startMcpHarness();
  stageId = resultOf(await h.call("create_pipeline", samplePipeline())).stages[0].stage_id;
});
afterAll(() => h.close());

interface Case {
  name: string;
  body: () => unknown;
  headers?: Record<string, string>;
  status: number;
  code: number;
  /** the message must contain this (the field, or what was wrong) */
  says: string;
  /** error.data.field, for argument errors */
  field?: string;
}

const call = (name: string, args: unknown) => ({ jsonrpc: "2.0", id: 7, method: "tools/call", params: { name, arguments: args } });
const create = (over: Record<string, unknown>) => () => call("create_pipeline", samplePipeline(over));
const createStage = (over: Record<string, unknown>) => create({ stages: [{ title: "t", goal: "g", ...over }] });
const update = (args: Record<string, unknown>) => () => call("update_stage", { stage_id: stageId, ...args });
const nested = (depth: number) => "[".repeat(depth) + "]".repeat(depth);

const cases: Case[] = [
  { name: "malformed JSON", body: () => '{"jsonrpc": "2.0", "id": 1, "method": ', status: 400, code: -32700, says: "not valid JSON" },
  { name: "an empty body", body: () => "", status: 400, code: -32700, says: "not valid JSON" },
  { name: "bytes that are not UTF-8", body: () => new Uint8Array([0x7b, 0xff, 0xfe, 0x7d]), status: 400, code: -32700, says: "UTF-8" },
  { name: "jsonrpc 1.0", body: () => ({ jsonrpc: "1.0", id: 1, method: "tools/list" }), status: 400, code: -32600, says: 'jsonrpc must be "2.0"' },
  { name: "jsonrpc missing", body: () => ({ id: 1, method: "tools/list" }), status: 400, code: -32600, says: 'jsonrpc must be "2.0"' },
  { name: "jsonrpc as a number", body: () => ({ jsonrpc: 2, id: 1, method: "tools/list" }), status: 400, code: -32600, says: 'jsonrpc must be "2.0"' },
  { name: "a request without an id", body: () => ({ jsonrpc: "2.0", method: "tools/list" }), status: 400, code: -32600, says: "id is required" },
  { name: "a request with a null id", body: () => ({ jsonrpc: "2.0", id: null, method: "tools/list" }), status: 400, code: -32600, says: "id must be a string or an integer" },
  { name: "a fractional id", body: () => ({ jsonrpc: "2.0", id: 1.5, method: "tools/list" }), status: 400, code: -32600, says: "id must be a string or an integer" },
  { name: "an object id", body: () => ({ jsonrpc: "2.0", id: {}, method: "tools/list" }), status: 400, code: -32600, says: "id must be a string or an integer" },
  { name: "a batch array", body: () => [{ jsonrpc: "2.0", id: 1, method: "tools/list" }, { jsonrpc: "2.0", id: 2, method: "ping" }], status: 400, code: -32600, says: "batches are not supported" },
  { name: "an empty batch", body: () => "[]", status: 400, code: -32600, says: "batches are not supported" },
  { name: "a message that is a string", body: () => '"tools/list"', status: 400, code: -32600, says: "must be a JSON object" },
  { name: "no method", body: () => ({ jsonrpc: "2.0", id: 1 }), status: 400, code: -32600, says: "method must be a non-empty string" },
  { name: "a response sent to the server", body: () => ({ jsonrpc: "2.0", id: 1, result: {} }), status: 400, code: -32600, says: "takes no responses" },
  { name: "params as an array", body: () => ({ jsonrpc: "2.0", id: 1, method: "tools/list", params: [1] }), status: 400, code: -32600, says: "params must be an object" },
  { name: "a 5 MB body", body: () => JSON.stringify(call("create_pipeline", samplePipeline({ overview: "x".repeat(5 * 1024 * 1024) }))), status: 413, code: -32600, says: "limit is 1 MiB" },
  { name: "arrays nested 5,000 deep as the message", body: () => nested(5000), status: 400, code: -32600, says: "nested more than 32 levels" },
  { name: "arrays nested 5,000 deep inside the arguments", body: () => `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_pipeline","arguments":{"stages":${nested(5000)}}}}`, status: 400, code: -32600, says: "nested more than 32 levels" },
  { name: "a wrong Content-Type", body: () => ({ jsonrpc: "2.0", id: 1, method: "tools/list" }), headers: { "content-type": "text/plain" }, status: 415, code: -32600, says: "Content-Type: application/json" },
  { name: "an unknown method", body: () => ({ jsonrpc: "2.0", id: 1, method: "resources/list" }), status: 200, code: -32601, says: "Method not found: 'resources/list'" },
  { name: "an initialize without protocolVersion", body: () => ({ jsonrpc: "2.0", id: 1, method: "initialize", params: { capabilities: {} } }), status: 200, code: -32602, says: "protocolVersion: required", field: "protocolVersion" },
  { name: "a tools/call without a name", body: () => ({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { arguments: {} } }), status: 200, code: -32602, says: "name: required", field: "name" },
  { name: "an unknown tool", body: () => call("delete_pipeline", {}), status: 200, code: -32602, says: "Unknown tool 'delete_pipeline'", field: "name" },
  { name: "arguments that are not an object", body: () => call("list_pipelines", "all"), status: 200, code: -32602, says: "arguments", field: "arguments" },
  { name: "dueDate 2026-13-01", body: createStage({ dueDate: "2026-13-01" }), status: 200, code: -32602, says: "stages.0.dueDate: is not a real calendar date (got '2026-13-01')", field: "stages.0.dueDate" },
  { name: "dueDate 2026-02-30", body: createStage({ dueDate: "2026-02-30" }), status: 200, code: -32602, says: "stages.0.dueDate: is not a real calendar date", field: "stages.0.dueDate" },
  { name: "dueDate in another format", body: createStage({ dueDate: "01/03/2026" }), status: 200, code: -32602, says: "YYYY-MM-DD", field: "stages.0.dueDate" },
  { name: "due_date 2026-02-30 in update_stage", body: update({ due_date: "2026-02-30" }), status: 200, code: -32602, says: "due_date: is not a real calendar date", field: "due_date" },
  { name: "update_stage's spelling in create_pipeline", body: createStage({ due_date: "2026-03-01" }), status: 200, code: -32602, says: "stages.0.due_date: unknown argument (did you mean dueDate?)", field: "stages.0.due_date" },
  { name: "create_pipeline's spelling in update_stage", body: update({ dueDate: "2026-03-01" }), status: 200, code: -32602, says: "dueDate: unknown argument (did you mean due_date?)", field: "dueDate" },
  { name: "an unknown status", body: update({ status: "finished" }), status: 200, code: -32602, says: "status: must be one of not_started, in_progress, blocked, done, cancelled", field: "status" },
  { name: "a priority not in the list", body: createStage({ priority: "critical" }), status: 200, code: -32602, says: "stages.0.priority: must be one of low, medium, high, urgent", field: "stages.0.priority" },
  { name: "an e-mail that is not one", body: create({ owner_email: "ada at example" }), status: 200, code: -32602, says: "owner_email: must be an e-mail address", field: "owner_email" },
  { name: "an owner filter that is not an e-mail", body: () => call("list_pipelines", { owner_email: "nobody" }), status: 200, code: -32602, says: "owner_email", field: "owner_email" },
  { name: "a stage_id that is not a UUID", body: update({ stage_id: "stage-1", status: "in_progress" }), status: 200, code: -32602, says: "stage_id: must be a UUID", field: "stage_id" },
  { name: "a pipeline_id that is not one", body: () => call("get_pipeline", { pipeline_id: "12" }), status: 200, code: -32602, says: "pipeline_id", field: "pipeline_id" },
  { name: "an empty stages list", body: create({ stages: [] }), status: 200, code: -32602, says: "stages: must list at least one stage", field: "stages" },
  { name: "101 stages", body: create({ stages: Array.from({ length: 101 }, () => ({ title: "t", goal: "g" })) }), status: 200, code: -32602, says: "stages: must list at most 100 stages", field: "stages" },
  { name: "a 10,000-character name", body: create({ name: "n".repeat(10_000) }), status: 200, code: -32602, says: "name: must be at most 200 characters", field: "name" },
  { name: "a blank name", body: create({ name: "   " }), status: 200, code: -32602, says: "name: must not be empty", field: "name" },
  { name: "a missing goal", body: create({ stages: [{ title: "t" }] }), status: 200, code: -32602, says: "stages.0.goal: required", field: "stages.0.goal" },
  { name: "a name of the wrong type", body: create({ name: 42 }), status: 200, code: -32602, says: "name: Invalid input: expected string, received number", field: "name" },
  { name: "stages of the wrong type", body: create({ stages: "build it" }), status: 200, code: -32602, says: "stages: must be an array of stages", field: "stages" },
  { name: "a limit of the wrong type", body: () => call("list_pipelines", { limit: "10" }), status: 200, code: -32602, says: "limit", field: "limit" },
  { name: "a limit of 0", body: () => call("list_pipelines", { limit: 0 }), status: 200, code: -32602, says: "limit: must be at least 1", field: "limit" },
  { name: "a status of the wrong type", body: update({ status: 3 }), status: 200, code: -32602, says: "status", field: "status" },
  { name: "an update with nothing to change", body: update({}), status: 200, code: -32602, says: "nothing to change", field: "due_date" },
  { name: "a forged cursor", body: () => call("list_pipelines", { cursor: "eyJhZnRlciI6WyIxIiwiMiJdfQ.AAAAAAAAAAAAAAAAAAAAAA" }), status: 200, code: -32602, says: "cursor", field: "cursor" },
];

describe("bad input on /api/mcp", () => {
  it.each(cases)("$name: $status $code", async (c) => {
    const before = await h.snapshot();
    const answer = await h.post(c.body(), { headers: c.headers });
    expect(answer.status).toBe(c.status);
    expect(answer.headers.get("content-type")).toMatch(/^application\/json/);
    expect(answer.text).not.toMatch(/<html|<!DOCTYPE|at .*\.ts:\d+|node_modules/i);
    expect(answer.body.jsonrpc).toBe("2.0");
    expect(answer.body.error.code).toBe(c.code);
    expect(answer.body.error.message).toContain(c.says);
    if (c.field !== undefined) expect(answer.body.error.data.field).toBe(c.field);
    expect(await h.snapshot()).toBe(before);
  });

  it("answers an unknown pipeline id with an isError result saying what was not found", async () => {
    const before = await h.snapshot();
    const answer = await h.post(call("get_pipeline", { pipeline_id: "pip_0000000000zzzzzzzzzzzzzzzz" }));
    expect(answer.status).toBe(200);
    expect(answer.body.result).toEqual({ isError: true, content: [{ type: "text", text: "No pipeline 'pip_0000000000zzzzzzzzzzzzzzzz' among this test-mode key's pipelines." }] });
    expect(await h.snapshot()).toBe(before);
  });
});
