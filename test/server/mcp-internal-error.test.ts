// A failure that is nobody's input (here: the stages table gone) is answered without internals:
// no SQL, no stack, no file names; the log has the detail.
import { sql } from "kysely";
import { afterAll, beforeAll, expect, it } from "vitest";
import { resultOf, samplePipeline, startMcpHarness, type McpHarness } from "./mcp-harness.ts";

let h: McpHarness;
beforeAll(async () => {
  h = await startMcpHarness();
});
afterAll(() => h.close());

it("answers a tool whose storage fails with an isError result that says only that it was logged", async () => {
  const pipeline = resultOf(await h.call("create_pipeline", samplePipeline()));
  await sql`alter table stages rename to stages_gone`.execute(h.server.store.db);
  const answer = await h.call("get_pipeline", { pipeline_id: pipeline.pipeline_id });
  expect(answer.status).toBe(200);
  expect(answer.body.result).toEqual({ isError: true, content: [{ type: "text", text: "An internal error occurred. It has been logged." }] });
  expect(answer.text).not.toMatch(/sqlite|stages|select|\.ts/i);
});
