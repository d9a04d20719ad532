// `badgebench devices add|list|revoke` (issue 3 item 5) against a running server over the same
// data directory: the token is printed once and stored hashed; a revoked token gets 401 on
// every badge endpoint; API keys do not open badge endpoints and device tokens do not open /v1.
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseResponse } from "../../firmware/index.ts";
import { createDevice, type DeviceView } from "../../server/services/devices.ts";
import { baseEnv, DB_FILE, run, type RunResult } from "./cli-process.ts";
import { startHarness, type Harness } from "./harness.ts";
import { TEST_STORE } from "./test-database.ts";

type DeviceJson = DeviceView & { token?: string };

/** The whole of stdout is one JSON object on one line. */
function singleJson<T = any>(result: RunResult): T {
  const lines = result.stdout.split("\n").filter((line) => line.length > 0);
  expect(lines, `expected one JSON line on stdout, got:\n${result.stdout}\nstderr: ${result.stderr}`).toHaveLength(1);
  return JSON.parse(lines[0]!) as T;
}

const CHECK_BODY = "v=1\nsv=1.4.0\nbat=4.0\n";
const SYNC_BODY = "v=1\nsv=1.4.0\nbat=4.0\n";

describe("badgebench devices", () => {
  let h: Harness;
  let device: DeviceJson & { token: string };

  beforeAll(async () => {
    // The harness imports the small school (room R1) in both modes and serves the data directory.
    h = await startHarness();
  });
  afterAll(async () => {
    await h?.close();
  });

  const cli = (args: string[]) => {
    const database = h.storeOptions.databaseUrl;
    return run([...args, "--data", h.dataDir, ...(database ? ["--database", database] : []), "--json"], { env: baseEnv() });
  };

  async function badge(method: "GET" | "POST", urlPath: string, token: string, body?: string) {
    const response = await fetch(`${h.url}${urlPath}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { "content-type": "text/plain" }) },
      body,
    });
    return { status: response.status, headers: response.headers, text: await response.text() };
  }

  const badgeEndpoints = (token: string) => [
    { name: "POST /api/badge/ota/check", call: () => badge("POST", "/api/badge/ota/check", token, CHECK_BODY) },
    { name: "GET /api/badge/ota/download", call: () => badge("GET", "/api/badge/ota/download?v=1.4.0", token) },
    { name: "POST /api/badge/sync", call: () => badge("POST", "/api/badge/sync", token, SYNC_BODY) },
  ];

  /** A 401 in the badge's text format: V1, S, one `X unauthorized ...` line, `.`. */
  function expectUnauthorized(res: { status: number; headers: Headers; text: string }, name: string, message: RegExp) {
    expect(res.status, `${name}: ${res.text}`).toBe(401);
    expect(res.text.startsWith("V1\n"), name).toBe(true);
    expect(res.headers.get("content-type")).toMatch(/^text\/plain/);
    expect(res.headers.get("www-authenticate")).toMatch(/^Bearer /);
    const parsed = parseResponse(res.text);
    if (!parsed.ok) throw new Error(`${name}: not a badge answer: ${parsed.message}`);
    const xLines = parsed.lines.filter((line) => line.letter === "X");
    expect(xLines, name).toHaveLength(1);
    expect(xLines[0]!.value, name).toMatch(/^unauthorized /);
    expect(xLines[0]!.value, name).toMatch(message);
    expect(parsed.lines.some((line) => ["U", "N", "T"].includes(line.letter)), name).toBe(false);
  }

  it("add --json prints the device with its dev_ id and a dtk_test_ token", async () => {
    const result = await cli(["devices", "add", "--room", "R1", "--model", "BB-1"]);
    expect(result.code, result.stderr + result.stdout).toBe(0);
    device = singleJson<DeviceJson & { token: string }>(result);
    expect(device.id).toMatch(/^dev_[A-Za-z0-9_-]+$/);
    expect(device.token).toMatch(/^dtk_test_[A-Za-z0-9_-]{20,}$/);
    expect(device).toMatchObject({ object: "device", livemode: false, room: "R1", model: "BB-1", name: "BB-1 in R1", revoked_at: null });
    expect(device.token_hint).toBe(`${device.token.slice(0, 8)}...${device.token.slice(-4)}`);
  });

  it("stores the token hashed: neither the database file nor its WAL holds it", async () => {
    const row = await h.server.store.db.selectFrom("devices").selectAll().where("id", "=", device.id).executeTakeFirstOrThrow();
    expect(row.token_hash).not.toBe(device.token);
    expect(row.token_hash).toBe(createHash("sha256").update(device.token).digest("hex"));
    for (const [column, value] of Object.entries(row)) {
      expect(String(value).includes(device.token), `devices.${column} holds the token`).toBe(false);
    }
    // What follows the lookup handle (the secret part) appears nowhere on disk (on PostgreSQL the
    // files are the database server's, out of reach here).
    if (TEST_STORE !== "sqlite") return;
    const secretPart = device.token.slice("dtk_test_".length + 8);
    expect(secretPart.length).toBeGreaterThanOrEqual(16);
    const files = [DB_FILE, `${DB_FILE}-wal`].map((name) => path.join(h.dataDir, name)).filter((file) => fs.existsSync(file));
    expect(files).toContain(path.join(h.dataDir, DB_FILE));
    for (const file of files) {
      const bytes = fs.readFileSync(file);
      expect(bytes.includes(device.token), `${file} holds the token`).toBe(false);
      expect(bytes.includes(secretPart), `${file} holds the token's secret part`).toBe(false);
      // Positive control: the row itself did reach the disk.
      if (bytes.includes(device.id)) expect(bytes.includes(row.token_hash!)).toBe(true);
    }
  });

  it("an unknown room is refused with exit 1, naming the room, and adds nothing", async () => {
    const before = await h.server.store.db.selectFrom("devices").select("id").execute();
    const result = await cli(["devices", "add", "--room", "R9", "--model", "BB-1"]);
    expect(result.code).toBe(1);
    const body = singleJson<{ error: { code: string; message: string } }>(result);
    expect(body.error.message).toContain("no room R9");
    expect(result.stdout).not.toMatch(/dtk_/);
    expect(await h.server.store.db.selectFrom("devices").select("id").execute()).toEqual(before);
  });

  it("the token opens the badge endpoints, and is refused on /v1", async () => {
    const check = await badge("POST", "/api/badge/ota/check", device.token, CHECK_BODY);
    expect(check.status, check.text).toBe(200);
    expect(check.text).toMatch(/^V1\nS \d+\nX no_release /);
    const sync = await badge("POST", "/api/badge/sync", device.token, SYNC_BODY);
    expect(sync.status, sync.text).toBe(200);
    expect(sync.text).toMatch(/^V1\nS \d+\nT \d+\n\.\n$/);

    const v1 = await fetch(`${h.url}/v1/attendance`, { headers: { authorization: `Bearer ${device.token}` } });
    expect(v1.status).toBe(401);
    const body = (await v1.json()) as { error: { type: string; code: string; message: string } };
    expect(body.error).toMatchObject({ type: "authentication_error", code: "api_key_invalid" });
    expect(body.error.message).toMatch(/Device tokens open the badge endpoints only/);
  });

  it("an API key is refused on every badge endpoint", async () => {
    for (const key of [h.keys.read, h.keys.write]) {
      for (const { name, call } of badgeEndpoints(key)) {
        expectUnauthorized(await call(), name, /API keys are not accepted on badge endpoints/);
      }
    }
  });

  it("list --json shows the device with its firmware state and no token", async () => {
    const result = await cli(["devices", "list"]);
    expect(result.code, result.stderr + result.stdout).toBe(0);
    const list = singleJson<{ object: string; data: Array<DeviceJson & { firmware: { state: string; installed: { version: string } | null } }> }>(result);
    expect(list.object).toBe("list");
    expect(list.data.map((d) => d.id)).toEqual([device.id]);
    const listed = list.data[0]!;
    expect(listed).toMatchObject({ id: device.id, room: "R1", model: "BB-1", revoked_at: null, token_hint: device.token_hint });
    // It checked in above with sv=1.4.0, which was never published: a USB flash.
    expect(listed.firmware.installed?.version).toBe("1.4.0");
    expect(listed.firmware.state).toBe("unreleased");
    expect(result.stdout).not.toContain(device.token);
    expect(result.stdout).not.toContain("token_hash");
  });

  it("revoke makes every badge endpoint answer 401 with X unauthorized; other badges keep working", async () => {
    const other = await createDevice(h.server.store.db, { mode: "test", room: "R1", model: "BB-1", name: "other" });
    const result = await cli(["devices", "revoke", device.id]);
    expect(result.code, result.stderr + result.stdout).toBe(0);
    const revoked = singleJson<DeviceJson>(result);
    expect(revoked.id).toBe(device.id);
    expect(Date.parse(revoked.revoked_at ?? "")).not.toBeNaN();

    const rowOf = (id: string) => h.server.store.db.selectFrom("devices").selectAll().where("id", "=", id).executeTakeFirstOrThrow();
    const before = await rowOf(device.id);
    expect(before.revoked_at).toBe(revoked.revoked_at);
    expect(before.last_sync_at).not.toBeNull();

    for (const { name, call } of badgeEndpoints(device.token)) {
      expectUnauthorized(await call(), name, /invalid or revoked device token/);
    }
    // Nothing the revoked badge sent was recorded.
    expect(await rowOf(device.id)).toEqual(before);
    const stillWorks = await badge("POST", "/api/badge/ota/check", other.token, CHECK_BODY);
    expect(stillWorks.status, stillWorks.text).toBe(200);
  });
});
