// What `npm start` runs: the server bundled to dist/serve.js by `npm run build`, started with
// plain node (no TypeScript loader), with the serve command's options and failures.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { baseEnv, killLeftoverServers, ROOT, run, serve, stop, tempDirs } from "./cli-process.ts";

const BUNDLE = path.join(ROOT, "dist", "serve.js");
const tempDir = tempDirs("production");

beforeAll(() => {
  execFileSync("npm", ["run", "--silent", "build"], { cwd: ROOT, stdio: "ignore" });
});
afterAll(killLeftoverServers);

describe("the built server (npm start)", () => {
  it("loads the demo school, prints its key once, and answers /v1 with it", async () => {
    const server = await serve(["--data", tempDir("demo"), "--demo"], { program: [BUNDLE] });
    await expect.poll(() => /sk_test_\S+/.exec(server.stderr())?.[0], { timeout: 120_000 }).toBeDefined();
    const key = /sk_test_\S+/.exec(server.stderr())![0];
    expect(server.stderr().match(/sk_test_/g)).toHaveLength(1);
    const res = await fetch(`${server.url}/v1/sessions?limit=1`, { headers: { authorization: `Bearer ${key}` } });
    expect(res.status).toBe(200);
    expect((await res.json()).data).toHaveLength(1);
    expect(await stop(server)).toEqual({ code: 0, signal: null });
  });

  it("refuses a data directory that is a file with one line naming it, exit 2, and changes nothing", async () => {
    const file = path.join(tempDir("file"), "not-a-dir");
    fs.writeFileSync(file, "notes\n");
    const result = await run(["--data", file], { program: [BUNDLE] });
    expect(result.code).toBe(2);
    expect(result.stderr).toBe(`badgebench: the data directory ${file} is a file, not a directory; give --data a directory\n`);
    expect(fs.readFileSync(file, "utf8")).toBe("notes\n");
  });

  it("refuses a setting from the environment that cannot be used with one line, exit 2, as `badgebench serve` does", async () => {
    const settings = [
      ["BADGEBENCH_MAX_DOWNLOADS", "0", "BADGEBENCH_MAX_DOWNLOADS must be a whole number of at least 1, got '0'"],
      ["BADGEBENCH_WEBHOOK_TIMEOUT_MS", "soon", "BADGEBENCH_WEBHOOK_TIMEOUT_MS must be a number of milliseconds (got 'soon')"],
      ["DATABASE_POOL_SIZE", "-1", "DATABASE_POOL_SIZE must be a whole number of at least 1, got '-1'"],
    ] as const;
    for (const [name, value, message] of settings) {
      for (const [program, args] of [[[BUNDLE], []], [undefined, ["serve"]]] as const) {
        const result = await run([...args, "--port", "0", "--data", tempDir("setting")], { program: program && [...program], env: baseEnv({ [name]: value }) });
        expect({ code: result.code, stderr: result.stderr }).toEqual({ code: 2, stderr: `badgebench: ${message}\n` });
      }
    }
  });

  it("refuses an unknown option and a wrong --sync with one line, exit 2", async () => {
    for (const args of [["--bogus"], ["--sync", "sometimes"]]) {
      const result = await run(args, { program: [BUNDLE] });
      expect(result.code).toBe(2);
      expect(result.stderr).toMatch(/^badgebench: .*\nrun with --help for usage\n$/);
    }
  });
});
