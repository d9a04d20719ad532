// update_stage changes only the fields passed (SPEC 3.3): every other column of the stage, every
// other stage and every pipeline row stay byte-identical, also when many calls on one stage
// arrive at once over HTTP.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { resultOf, samplePipeline, startMcpHarness, type McpHarness } from "./mcp-harness.ts";

let h: McpHarness;
beforeAll(async () => {
  h = await startMcpHarness();
});
afterAll(() => h.close());

type Rows = Record<string, Record<string, unknown>>;

async function rows(): Promise<{ pipelines: Rows; stages: Rows }> {
  const db = h.server.store.db;
  const byId = (list: { id: string }[]) => Object.fromEntries(list.map((row) => [row.id, row]));
  return {
    pipelines: byId(await db.selectFrom("pipelines").selectAll().execute()),
    stages: byId(await db.selectFrom("stages").selectAll().execute()),
  };
}

describe("update_stage changes only the passed fields", () => {
  it.each([
    { passed: { due_date: "2026-06-30" } },
    { passed: { status: "in_progress" } },
    { passed: { due_date: null } },
    { passed: { status: "blocked", due_date: "2027-01-31" } },
  ])("passing $passed", async ({ passed }) => {
    const target = resultOf(await h.call("create_pipeline", samplePipeline({ name: "Target" })));
    resultOf(await h.call("create_pipeline", samplePipeline({ name: "Neighbour" })));
    const stageId: string = target.stages[1].stage_id;
    const before = await rows();

    resultOf(await h.call("update_stage", { stage_id: stageId, ...passed }));

    const after = await rows();
    expect(JSON.stringify(after.pipelines)).toBe(JSON.stringify(before.pipelines));
    for (const [id, row] of Object.entries(before.stages)) {
      if (id !== stageId) expect(JSON.stringify(after.stages[id]), id).toBe(JSON.stringify(row));
    }
    expect(JSON.stringify(after.stages[stageId])).toBe(JSON.stringify({ ...before.stages[stageId], ...passed }));
  });
});

describe("concurrent update_stage calls on one stage", () => {
  it("never lose a field: each round's status and one of its due dates both hold afterwards", async () => {
    const pipeline = resultOf(await h.call("create_pipeline", samplePipeline({ name: "Concurrent" })));
    const stageId: string = pipeline.stages[0].stage_id;
    const untouched = (await rows()).stages[stageId]!;
    const statuses = ["in_progress", "blocked", "in_progress", "done", "in_progress", "cancelled", "not_started", "in_progress"];
    for (const [round, status] of statuses.entries()) {
      const dates = Array.from({ length: 8 }, (_, i) => `2026-${String(round + 1).padStart(2, "0")}-${String(i + 10)}`);
      const answers = await Promise.all([
        ...dates.slice(0, 4).map((due_date) => h.call("update_stage", { stage_id: stageId, due_date })),
        h.call("update_stage", { stage_id: stageId, status }),
        ...dates.slice(4).map((due_date) => h.call("update_stage", { stage_id: stageId, due_date })),
      ]);
      for (const answer of answers) resultOf(answer);
      const row = (await rows()).stages[stageId]!;
      expect(row.status, `round ${round}`).toBe(status);
      expect(dates, `round ${round}`).toContain(row.due_date);
      expect({ ...row, status: untouched.status, due_date: untouched.due_date }).toEqual(untouched);
    }
  });

  it("let one of two moves from the same state win; the other is refused naming both states", async () => {
    const pipeline = resultOf(await h.call("create_pipeline", samplePipeline({ name: "Race" })));
    const stageId: string = pipeline.stages[0].stage_id;
    resultOf(await h.call("update_stage", { stage_id: stageId, status: "in_progress" }));
    const [done, blocked] = await Promise.all([
      h.call("update_stage", { stage_id: stageId, status: "done" }),
      h.call("update_stage", { stage_id: stageId, status: "blocked" }),
    ]);
    const results = [done.body.result, blocked.body.result];
    const refused = results.filter((r) => r.isError);
    expect(refused).toHaveLength(1);
    expect(refused[0].content[0].text).toMatch(/from (done to blocked|blocked to done)/);
    const winner = results.find((r) => !r.isError).structuredContent.status;
    expect((await rows()).stages[stageId]!.status).toBe(winner);
  });
});
