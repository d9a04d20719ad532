// A key made with the real CLI (`keys create --scope pipelines:write`) opens the tool endpoint
// of a real `serve` process, as the README's quickstart says.
import { afterEach, expect, it } from "vitest";
import { killLeftoverServers, run, serve, stop, tempDirs } from "./cli-process.ts";

const tempDir = tempDirs("mcp-cli");
afterEach(killLeftoverServers);

it("keys create --scope pipelines:write gives a key that creates and lists pipelines over /api/mcp", { timeout: 60_000 }, async () => {
  const dir = tempDir("keys");
  const created = await run(["keys", "create", "--mode", "test", "--scope", "pipelines:write", "--data", dir, "--json"]);
  expect(created.code, created.stderr).toBe(0);
  const key = JSON.parse(created.stdout) as { secret: string; scopes: string[] };
  expect(key.scopes).toEqual(["pipelines:write"]);

  const server = await serve(["--data", dir]);
  const call = async (name: string, args: unknown) => {
    const response = await fetch(`${server.url}/api/mcp`, {
      method: "POST",
      headers: { authorization: `Bearer ${key.secret}`, "content-type": "application/json", accept: "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name, arguments: args } }),
    });
    return (await response.json()).result.structuredContent;
  };
  const pipeline = await call("create_pipeline", { name: "CLI", overview: "o", owner_email: "ops@example.org", stages: [{ title: "t", goal: "g" }] });
  expect((await call("list_pipelines", {})).data.map((p: { pipeline_id: string }) => p.pipeline_id)).toEqual([pipeline.pipeline_id]);
  await stop(server);

  const refused = await run(["keys", "create", "--mode", "test", "--scope", "pipelines:admin", "--data", dir]);
  expect(refused.code).not.toBe(0);
  expect(refused.stderr).toContain("pipelines:read, pipelines:write");
});
