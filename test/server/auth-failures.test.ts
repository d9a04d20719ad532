// Failed authentication per client address (issue 28, row 7): a budget of bad credentials, then
// 429 with Retry-After, for API keys and device tokens alike, in each path's own error shape; a
// valid credential is served whatever the count; one log line per client that crossed the budget.
import { Writable } from "node:stream";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AUTH_FAILURE_BUDGET } from "../../server/http/auth-failures.ts";
import { createDevice } from "../../server/services/devices.ts";
import { sendRaw } from "./fuzz-http.ts";
import { startHarness, type Harness } from "./harness.ts";

const logLines: Array<{ level: number; msg: string; client?: string }> = [];
const logSink = new Writable({
  write(chunk: Buffer, _encoding, done) {
    logLines.push(JSON.parse(chunk.toString()));
    done();
  },
});

let h: Harness;
let deviceToken: string;
beforeAll(async () => {
  h = await startHarness({ logger: pino({ level: "warn" }, logSink) });
  deviceToken = (await createDevice(h.server.store.db, { mode: "test", room: "R1", model: "badge-v2" })).token;
});
afterAll(() => h.close());

const get = (bearer: string, path = "/v1/attendance?limit=1") => sendRaw(h.url, { method: "GET", path, headers: [["Authorization", `Bearer ${bearer}`]], body: undefined });
const badgeSync = (bearer: string) => sendRaw(h.url, { method: "POST", path: "/api/badge/sync", headers: [["Authorization", `Bearer ${bearer}`]], body: Buffer.from("") });

describe("failed authentication from one address", () => {
  it(`answers the first ${AUTH_FAILURE_BUDGET.failures} bad keys 401, then 429 with Retry-After`, async () => {
    for (let i = 0; i < AUTH_FAILURE_BUDGET.failures; i++) {
      expect((await get(`sk_test_guess${i}`)).status).toBe(401);
    }
    const refused = await get("sk_test_one-more-guess");
    expect(refused.status).toBe(429);
    expect(JSON.parse(refused.body.toString()).error).toMatchObject({ type: "rate_limit_error", code: "too_many_failed_authentications" });
    const retryAfter = Number(refused.headers["retry-after"]);
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(AUTH_FAILURE_BUDGET.windowMs / 1000);
  });

  it("still serves a valid API key and a valid device token from that address", async () => {
    expect((await get(h.keys.read)).status).toBe(200);
    // Past authentication, the empty sync is the badge's own mistake.
    expect((await badgeSync(deviceToken)).status).toBe(400);
  });

  it("refuses bad device tokens from that address with 429 and the time to come back in the S line", async () => {
    const refused = await badgeSync("dtk_test_guess");
    expect(refused.status).toBe(429);
    expect(refused.body.toString()).toMatch(new RegExp(`^V1\\nS ${refused.headers["retry-after"]}\\nX too_many_failed_authentications `));
  });

  it("answers the tool endpoint's bad keys from that address in its JSON-RPC shape", async () => {
    const refused = await sendRaw(h.url, {
      method: "POST",
      path: "/api/mcp",
      headers: [["Authorization", "Bearer sk_test_guess"], ["Content-Type", "application/json"], ["Accept", "application/json"]],
      body: Buffer.from('{"jsonrpc":"2.0","id":1,"method":"ping"}'),
    });
    expect(refused.status).toBe(429);
    expect(JSON.parse(refused.body.toString())).toMatchObject({ jsonrpc: "2.0", id: null, error: { code: -32600 } });
    expect(refused.headers["retry-after"]).toBeDefined();
  });

  it("logs one line for the client that crossed the budget, however many attempts followed", async () => {
    for (let i = 0; i < 5; i++) expect((await get(`sk_test_more${i}`)).status).toBe(429);
    const crossed = logLines.filter((line) => line.msg.startsWith("authentication failures over budget"));
    expect(crossed).toHaveLength(1);
    expect(crossed[0]!.client).toMatch(/127\.0\.0\.1/);
  });
});
