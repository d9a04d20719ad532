// The fleet page from the server `npm start` runs: the bundle dist/serve.js (built here with
// `npm run build`, as `npm start` does) under plain node, over a data directory it creates with
// the demo school. In the bundle `import.meta.url` is dist/serve.js, so a page whose files were
// looked up beside it answered 500 (issue 21); under tsx the same lookup works, which is why the
// page's other browser tests (fleet-page.test.ts) could not see it.
import { execFileSync } from "node:child_process";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { killLeftoverServers, ROOT, run, serve, stop, tempDirs, type Server } from "../server/cli-process.ts";
import { launchBrowser, type Browser } from "./browser.ts";

const BUNDLE = path.join(ROOT, "dist", "serve.js");
const tempDir = tempDirs("built-fleet");

let server: Server;
let demoKey: string;
let browser: Browser;
beforeAll(async () => {
  execFileSync("npm", ["run", "--silent", "build"], { cwd: ROOT, stdio: "ignore" });
  const dataDir = tempDir("data");
  server = await serve(["--data", dataDir, "--demo"], { program: [BUNDLE] });
  // Printed on stderr before the server listens; stdout's line may be read first.
  demoKey = await vi.waitFor(
    () => {
      const key = /sk_test_\S+/.exec(server.stderr())?.[0];
      if (!key) throw new Error(`no demo key printed yet: ${server.stderr()}`);
      return key;
    },
    { timeout: 20_000, interval: 20 },
  );
  // A badge on the fleet, added as an administrator would while the server runs.
  const added = await run(["devices", "add", "--room", "R101", "--model", "badge-v2", "--name", "Front desk", "--data", dataDir]);
  expect(added.code, added.stderr).toBe(0);
  browser = await launchBrowser();
});
afterAll(async () => {
  await browser?.close();
  if (server) await stop(server);
  await killLeftoverServers();
});

describe("the fleet page under npm start (dist/serve.js)", () => {
  it("serves the page and its script", async () => {
    const html = await fetch(`${server.url}/fleet`);
    expect(html.status).toBe(200);
    expect(html.headers.get("content-type")).toMatch(/^text\/html/);
    const script = await fetch(`${server.url}/fleet/fleet.js`);
    expect(script.status).toBe(200);
    expect(script.headers.get("content-type")).toMatch(/javascript/);
  });

  it("opens with the demo key and shows the fleet table", async () => {
    const page = await browser.newPage();
    await page.goto(`${server.url}/fleet`);
    await page.getByLabel("API key", { exact: true }).fill(demoKey);
    await page.getByRole("button", { name: "Open the fleet" }).click();
    const row = page.locator("#devices-table tbody tr", { hasText: "Front desk" });
    await row.waitFor();
    expect(await row.textContent()).toContain("R101");
    expect(await page.locator("#connection").textContent()).toContain("Connected");
    await page.close();
  });
});
