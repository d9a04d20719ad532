// `badgebench sim run|fleet --server URL` as a user runs them: the real command against a real
// server on port 0, set up through its API with a test-mode key. What must hold: the skip check
// reads the scenario's published list, a run leaves nothing live behind (no key, no unrevoked
// device, no live event, the live fleet counts as they were), and every way of failing is one
// line with its documented exit code (scripts/cli/exit-codes.ts).
import fs from "node:fs";
import http from "node:http";
import net from "node:net";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiKey } from "../../server/services/api-keys.ts";
import { createDevice } from "../../server/services/devices.ts";
import { importSchool } from "../../server/services/school-import.ts";
import { EXIT } from "../../scripts/cli/exit-codes.ts";
import { baseEnv, ROOT, run, tempDirs } from "../server/cli-process.ts";
import { startBadgeHarness, type BadgeHarness } from "../server/badge-harness.ts";

const SCENARIOS = path.join(ROOT, "fixtures/scenarios");
const HAPPY = path.join(SCENARIOS, "happy-path.json");
const LOW_BATTERY = path.join(SCENARIOS, "low-battery-not-charging.json");
const tempDir = tempDirs("sim-cli");
const SIM_TIMEOUT_MS = 90_000;

let h: BadgeHarness;
const keys = { sim: "", live: "", readOnly: "" };
beforeAll(async () => {
  h = await startBadgeHarness();
  await h.publish("1.4.0");
  await h.publish("1.5.0");
  const db = h.server.store.db;
  keys.sim = (await createApiKey(db, { mode: "test", scopes: ["devices:write", "releases:read"], name: "ci" })).secret;
  keys.readOnly = (await createApiKey(db, { mode: "test", scopes: ["devices:read", "releases:read"] })).secret;
  keys.live = (await createApiKey(db, { mode: "live", scopes: ["devices:write", "releases:read"] })).secret;
  await importSchool(db, { rooms: [{ code: "R1", name: "Room 1" }] }, { mode: "live" });
  await createDevice(db, { mode: "live", room: "R1", model: "esp32-badge", name: "a real badge" });
});
afterAll(() => h.close());

const sim = (args: string[], env: Record<string, string> = {}) => run(["sim", ...args], { env: baseEnv(env), timeoutMs: SIM_TIMEOUT_MS });
const onServer = (url = h.url) => ["--server", url, "--key", keys.sim, "--room", "R1"];

/** What a run could leave behind: keys, devices not revoked, live events, the live fleet's counts. */
async function footprint() {
  const db = h.server.store.db;
  const count = async (query: { executeTakeFirstOrThrow(): Promise<{ n: string | number | bigint }> }) => Number((await query.executeTakeFirstOrThrow()).n);
  const liveFleet = await fetch(`${h.url}/v1/devices`, { headers: { authorization: `Bearer ${keys.live}` } }).then((r) => r.json());
  return {
    keys: await count(db.selectFrom("api_keys").select((eb) => eb.fn.countAll().as("n"))),
    unrevokedDevices: await count(db.selectFrom("devices").where("revoked_at", "is", null).select((eb) => eb.fn.countAll().as("n"))),
    liveEvents: await count(db.selectFrom("events").where("livemode", "=", 1).select((eb) => eb.fn.countAll().as("n"))),
    liveFleet: { total: liveFleet.total_count, states: liveFleet.state_counts },
  };
}

/** A copy of a shipped scenario with `change` applied, in a directory of its own. */
function scenarioVariant(file: string, change: (scenario: any) => void): string {
  const scenario = JSON.parse(fs.readFileSync(file, "utf8"));
  change(scenario);
  const out = path.join(tempDir("scenario"), path.basename(file));
  fs.writeFileSync(out, JSON.stringify(scenario, null, 2));
  return out;
}

describe("sim run --server URL", () => {
  it("plays through the API with a test-mode key and cleans up: no key made, no device left unrevoked, nothing live touched (exit 0)", async () => {
    const before = await footprint();
    const result = await sim(["run", HAPPY, LOW_BATTERY, ...onServer()]);
    expect(result.stdout).toContain("2 scenarios: 2 passed, 0 failed, 0 errors, 0 skipped");
    expect(result.code).toBe(EXIT.passed);
    expect(await footprint()).toEqual(before);
  });

  it("plays two scenarios of the same name, each on a device of its own (each add is its own request, never a replay without the token)", async () => {
    const before = await footprint();
    const sameName = scenarioVariant(LOW_BATTERY, () => undefined);
    const result = await sim(["run", LOW_BATTERY, sameName, ...onServer()]);
    expect(result.stdout, result.stderr).toContain("2 scenarios: 2 passed, 0 failed, 0 errors, 0 skipped");
    expect(result.code).toBe(EXIT.passed);
    expect(await footprint()).toEqual(before);
  });

  it("takes the key from BADGEBENCH_API_KEY", async () => {
    const result = await sim(["run", LOW_BATTERY, "--server", h.url, "--room", "R1"], { BADGEBENCH_API_KEY: keys.sim });
    expect(result.stdout).toContain("1 passed");
    expect(result.code).toBe(EXIT.passed);
  });

  it("skips, saying why, a scenario whose published list the server does not have; all skipped is exit 5", async () => {
    const needsOlder = scenarioVariant(LOW_BATTERY, (s) => (s.server.published = ["1.3.0", "1.4.0"]));
    const unreleasedBadge = scenarioVariant(HAPPY, (s) => (s.server.published = []));
    const result = await sim(["run", needsOlder, unreleasedBadge, ...onServer()]);
    expect(result.stdout).toContain(`SKIP low battery, not charging`);
    expect(result.stdout).toContain(`the server at ${h.url} has not published 1.3.0 (the scenario's published list)`);
    expect(result.stdout).toContain(`the server at ${h.url} has published 1.4.0, which the scenario's badge runs as an unpublished version`);
    expect(result.stdout).toContain("0 passed, 0 failed, 0 errors, 2 skipped");
    expect(result.code).toBe(EXIT.nothingRan);
  });

  it("exits 1 when a scenario fails", async () => {
    const wrong = scenarioVariant(LOW_BATTERY, (s) => (s.expect.runningVersion = "1.5.0"));
    const result = await sim(["run", wrong, ...onServer()]);
    expect(result.stdout).toMatch(/^FAIL low battery, not charging/m);
    expect(result.code).toBe(EXIT.failed);
  });

  it("names the file, line and column of a JSON mistake", async () => {
    const dir = tempDir("broken");
    fs.writeFileSync(path.join(dir, "broken.json"), '{\n  "name": "x",\n  description: "y"\n}\n');
    const result = await sim(["run", path.join(dir, "broken.json")]);
    expect(result.stdout).toContain("broken.json:3:3: not JSON: Expected double-quoted property name");
    expect(result.code).toBe(EXIT.failed);
  });

  it("says in one line that a directory holds no scenarios (exit 5)", async () => {
    const empty = tempDir("empty");
    const result = await sim(["run", empty]);
    expect(result.stderr).toBe(`badgebench: ${empty} holds no .json scenario files: nothing ran\n`);
    expect(result.code).toBe(EXIT.nothingRan);
  });
});

/** A port nothing listens on: one the system gave out and took back. */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** A server that answers every request with `answer`, or never answers when it is null. */
async function fakeServer(answer: ((res: http.ServerResponse) => void) | null) {
  const server = http.createServer((_req, res) => answer?.(res));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

describe("a server that cannot be used: one line, its exit code, nothing changed", () => {
  it("refuses, times out, answers HTML (exit 3); is not a URL, or the key is missing, live or short of a scope (exit 2)", async () => {
    const before = await footprint();
    const refused = `http://127.0.0.1:${await closedPort()}`;
    const silent = await fakeServer(null);
    const html = await fakeServer((res) => res.writeHead(200, { "content-type": "text/html" }).end("<html><body>router login</body></html>"));
    try {
      const cases: [string[], number, string][] = [
        [["run", HAPPY, "--server", refused, "--key", keys.sim], EXIT.unreachable, `badgebench: cannot reach ${refused} (connection refused)\n`],
        [["fleet", "--badges", "2", "--server", refused, "--key", keys.sim], EXIT.unreachable, `badgebench: cannot reach ${refused} (connection refused)\n`],
        [["run", HAPPY, "--server", silent.url, "--key", keys.sim, "--timeout-ms", "300"], EXIT.unreachable, `badgebench: cannot reach ${silent.url} (timed out)\n`],
        [["run", HAPPY, "--server", html.url, "--key", keys.sim], EXIT.unreachable, `badgebench: ${html.url} is not a badgebench server: GET /v1/releases answered HTTP 200 text/html\n`],
        [["run", HAPPY, "--server", "localhost:3000", "--key", keys.sim], EXIT.usage, "badgebench: --server must be an http:// or https:// URL, got 'localhost:3000'\n"],
        [["fleet", "--badges", "2", "--server", "not a url", "--key", keys.sim], EXIT.usage, "badgebench: --server must be a URL like http://127.0.0.1:3000, got 'not a url'\n"],
        [["run", HAPPY, "--server", h.url], EXIT.usage, "badgebench: --server needs an API key"],
        [["run", HAPPY, "--server", h.url, "--key", keys.live], EXIT.usage, "badgebench: --key must be a test-mode key (sk_test_...)"],
        [["run", HAPPY, "--server", h.url, "--key", keys.readOnly, "--room", "R1"], EXIT.usage, "badgebench: the API key lacks a scope"],
        [["run", HAPPY, "--server", h.url, "--key", keys.sim, "--room", "NOPE"], EXIT.usage, `badgebench: the server at ${h.url} has no room NOPE in test mode`],
      ];
      const results = await Promise.all(cases.map(([args]) => sim(args)));
      for (const [i, [args, code, line]] of cases.entries()) {
        const result = results[i]!;
        expect({ args, code: result.code, stderr: result.stderr.slice(0, line.length) }).toEqual({ args, code, stderr: line });
        expect(result.stderr.trimEnd().split("\n"), args.join(" ")).toHaveLength(1);
        expect(result.stdout).toBe("");
      }
    } finally {
      await silent.close();
      await html.close();
    }
    expect(await footprint()).toEqual(before);
  });
});

describe("sim fleet --server URL", () => {
  it("runs badges through the API and revokes them after; the live fleet and keys stay as they were (exit 0)", async () => {
    const before = await footprint();
    const result = await sim(["fleet", "--badges", "3", "--downloading", "1", "--spread-ms", "0", "--json", ...onServer()]);
    expect(result.code).toBe(EXIT.passed);
    const summary = JSON.parse(result.stdout);
    expect(summary).toMatchObject({ object: "sim_fleet", server: h.url, release: { from: "1.4.0", to: "1.5.0" }, crashed: 0 });
    expect(await footprint()).toEqual(before);
  });
});
