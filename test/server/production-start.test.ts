// What `npm start` runs: the server bundled to dist/serve.js by `npm run build`, started with
// plain node (no TypeScript loader), with the serve command's options and failures.
import { execFileSync } from "node:child_process";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { killLeftoverServers, ROOT, run, serve, stop, tempDirs } from "./cli-process.ts";

const BUNDLE = path.join(ROOT, "dist", "serve.js");
const tempDir = tempDirs("production");

beforeAll(() => {
  execFileSync("npm", ["run", "--silent", "build"], { cwd: ROOT, stdio: "ignore" });
}, 60_000);
afterAll(killLeftoverServers);

describe("the built server (npm start)", () => {
  it("loads the demo school, prints its key once, and answers /v1 with it", async () => {
    const server = await serve(["--data", tempDir("demo"), "--demo"], { program: [BUNDLE] });
    await expect.poll(() => /sk_test_\S+/.exec(server.stderr())?.[0], { timeout: 10_000 }).toBeDefined();
    const key = /sk_test_\S+/.exec(server.stderr())![0];
    expect(server.stderr().match(/sk_test_/g)).toHaveLength(1);
    const res = await fetch(`${server.url}/v1/sessions?limit=1`, { headers: { authorization: `Bearer ${key}` } });
    expect(res.status).toBe(200);
    expect((await res.json()).data).toHaveLength(1);
    expect(await stop(server)).toEqual({ code: 0, signal: null });
  }, 30_000);

  it("refuses an unknown option and a wrong --sync with one line, exit 2", async () => {
    for (const args of [["--bogus"], ["--sync", "sometimes"]]) {
      const result = await run(args, { program: [BUNDLE] });
      expect(result.code).toBe(2);
      expect(result.stderr).toMatch(/^badgebench: .*\nrun with --help for usage\n$/);
    }
  }, 30_000);
});
