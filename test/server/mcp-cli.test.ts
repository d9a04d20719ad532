// The tool endpoint of a real `serve` process: a key made with the real CLI (`keys create
// --scope pipelines:write`) opens it, as the README's quickstart says, and what it acknowledged
// survives the process being killed outright.
import { afterEach, expect, it } from "vitest";
import { openStore } from "../../server/store/database.ts";
import { killLeftoverServers, run, serve, stop, storeIn, tempDirs } from "./cli-process.ts";

const tempDir = tempDirs("mcp-cli");
afterEach(killLeftoverServers);

async function createKey(dir: string): Promise<{ secret: string; scopes: string[] }> {
  const created = await run(["keys", "create", "--mode", "test", "--scope", "pipelines:write", "--data", dir, "--json"]);
  expect(created.code, created.stderr).toBe(0);
  return JSON.parse(created.stdout);
}

function toolCaller(url: string, key: string) {
  return async (name: string, args: unknown) => {
    const response = await fetch(`${url}/api/mcp`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json", accept: "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name, arguments: args } }),
    });
    const answer = await response.json();
    expect(answer.result?.isError, JSON.stringify(answer)).toBeFalsy();
    return answer.result.structuredContent;
  };
}

it("keys create --scope pipelines:write gives a key that creates and lists pipelines over /api/mcp", async () => {
  const dir = await storeIn(tempDir("keys"));
  const key = await createKey(dir);
  expect(key.scopes).toEqual(["pipelines:write"]);

  const server = await serve(["--data", dir]);
  const call = toolCaller(server.url, key.secret);
  const pipeline = await call("create_pipeline", { name: "CLI", overview: "o", owner_email: "ops@example.org", stages: [{ title: "t", goal: "g" }] });
  expect((await call("list_pipelines", {})).data.map((p: { pipeline_id: string }) => p.pipeline_id)).toEqual([pipeline.pipeline_id]);
  await stop(server);

  const refused = await run(["keys", "create", "--mode", "test", "--scope", "pipelines:admin", "--data", dir]);
  expect(refused.code).not.toBe(0);
  expect(refused.stderr).toContain("pipelines:read, pipelines:write");
});

it("keeps every acknowledged create_pipeline and update_stage after kill -9", async () => {
  const dir = await storeIn(tempDir("durability"));
  const key = await createKey(dir);
  const { url, child, exited } = await serve(["--data", dir]);
  const call = toolCaller(url, key.secret);
  const acknowledged: string[] = [];
  for (let i = 0; i < 5; i++) {
    const pipeline = await call("create_pipeline", { name: `P${i}`, overview: "o", owner_email: "ops@example.org", stages: [{ title: "t", goal: "g" }] });
    acknowledged.push(pipeline.pipeline_id);
  }
  const pipeline = await call("get_pipeline", { pipeline_id: acknowledged[0] });
  await call("update_stage", { stage_id: pipeline.stages[0].stage_id, status: "in_progress", due_date: "2026-09-01" });
  child.kill("SIGKILL");
  expect((await exited).signal).toBe("SIGKILL");

  const reopened = await openStore({ dataDir: dir });
  try {
    const ids = (await reopened.db.selectFrom("pipelines").select("id").orderBy("id").execute()).map((r) => r.id);
    expect(ids).toEqual([...acknowledged].sort());
    const stage = await reopened.db.selectFrom("stages").selectAll().where("id", "=", pipeline.stages[0].stage_id).executeTakeFirstOrThrow();
    expect(stage).toMatchObject({ status: "in_progress", due_date: "2026-09-01" });
  } finally {
    await reopened.close();
  }
});
