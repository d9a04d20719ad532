// Delivery from the outbox to real receivers on loopback, checked with the test's own
// implementation of the SPEC 5 signature (webhook-receiver.ts), in compressed time: the retry
// schedule is a few milliseconds here. An attempt's timeout is 2 s, not less: an attempt over
// HTTPS on a busy machine (a handshake each) may take longer than a few hundred ms, and four
// such attempts would give the event up. A rolled secret's grace period is an hour, and a test
// ends it in the store rather than waiting for it: a delivery on a busy machine may come later
// than any few milliseconds.
import { pino } from "pino";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { newId } from "../../server/ids.ts";
import { createApiKey } from "../../server/services/api-keys.ts";
import { createEndpoint, deleteEndpoint } from "../../server/services/webhook-endpoints.ts";
import { insertEvents } from "../../server/store/webhooks-store.ts";
import type { Resolver } from "../../server/webhooks/address-guard.ts";
import { mark, startHarness, type Harness } from "./harness.ts";
import { endGracePeriod, specSigners, startReceiver, TEST_CERT, type Receiver } from "./webhook-receiver.ts";

// Names the tests control: `rebind.example.test` answers a public address at creation and
// loopback afterwards (DNS rebinding).
let rebindTo = "93.184.216.34";
const resolver: Resolver = async (host) => {
  if (host === "localhost") return [{ address: "127.0.0.1", family: 4 }];
  if (host === "rebind.example.test") return [{ address: rebindTo, family: 4 }];
  throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: "ENOTFOUND" });
};

const SCHEDULE = [40, 80, 120];
const TIMEOUT_MS = 2_000;
// Errors the server logs: a worker failure is invisible over HTTP (it retries at the next poll).
const loggedErrors: string[] = [];
const logger = pino({ level: "error" }, { write: (line: string) => void loggedErrors.push(line) });

let h: Harness;
let key: string;
let liveKey: string;
const receivers: Receiver[] = [];
beforeAll(async () => {
  h = await startHarness({
    logger,
    webhooks: { resolve: resolver, retryScheduleMs: SCHEDULE, jitter: 0, timeoutMs: TIMEOUT_MS, leaseMs: 3 * TIMEOUT_MS, secretGraceMs: 3_600_000, pollMs: 50, allowLoopbackForLive: true, ca: TEST_CERT },
  });
  key = (await createApiKey(h.server.store.db, { mode: "test", scopes: ["webhooks:write", "attendance:write"] })).secret;
  liveKey = (await createApiKey(h.server.store.db, { mode: "live", scopes: ["webhooks:write", "attendance:write"] })).secret;
  standing[key] = await mark(h, h.sessions.math2, "S5", "present", key);
  const liveSession = await h.server.store.db.selectFrom("sessions").select("id").where("livemode", "=", 1).where("course_code", "=", "MATH").executeTakeFirstOrThrow();
  standing[liveKey] = await mark(h, liveSession.id, "S5", "present", liveKey);
});
afterEach(async () => {
  // Endpoints of one test must not receive the next test's events.
  for (const e of await h.server.store.db.selectFrom("webhook_endpoints").select(["id", "livemode"]).execute()) {
    await deleteEndpoint(h.server.store.db, e.livemode, e.id);
  }
  while (receivers.length) await receivers.pop()!.close();
});
afterAll(() => h.close());

async function receiver(options: { https?: boolean } = {}) {
  const r = await startReceiver(options);
  receivers.push(r);
  return r;
}

async function endpoint(url: string, enabled_events: string[] = ["*"], k = key) {
  const res = await h.request("POST", "/v1/webhook_endpoints", { key: k, body: { url, enabled_events } });
  if (res.status !== 201) throw new Error(`endpoint: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body as { id: string; secret: string };
}

// Events on demand: each call corrects one standing record of the key's mode (present <-> late).
const standing: Record<string, { id: string; status: string }> = {};
async function newRecord(k = key) {
  const mine = standing[k]!;
  mine.status = mine.status === "present" ? "late" : "present";
  const res = await h.request("PATCH", `/v1/attendance/${mine.id}`, { key: k, body: { status: mine.status, reason: "test event" } });
  if (res.status !== 200) throw new Error(`correction failed: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body as { id: string };
}

async function attempts(endpointId: string, k = key) {
  return (await h.request("GET", `/v1/webhook_endpoints/${endpointId}/attempts?limit=200`, { key: k })).body.data as any[];
}

async function waitUntil(check: () => Promise<boolean>, timeoutMs = 5000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe("delivery", () => {
  it("POSTs each event as raw JSON, signed as SPEC 5 says, to the endpoints that asked for its type", async () => {
    const all = await receiver();
    const updatesOnly = await receiver();
    const a = await endpoint(all.url, ["*"]);
    await endpoint(updatesOnly.url, ["attendance.updated"]);
    const record = await mark(h, h.sessions.math1, "S1", "present", key);
    const corrected = await h.request("PATCH", `/v1/attendance/${record.id}`, { key, body: { status: "late", reason: "arrived 10:20" } });
    expect(corrected.status).toBe(200);
    await all.waitFor((d) => d.length === 2);
    await updatesOnly.waitFor((d) => d.length === 1);
    const [recorded, updated] = [...all.deliveries].sort((x, y) => x.event.created - y.event.created || x.event.type.localeCompare(y.event.type));
    expect(recorded!.event).toMatchObject({ type: "attendance.recorded", object: "event", livemode: false, data: { object: { id: record.id, status: "present" } } });
    expect(updated!.event).toMatchObject({
      type: "attendance.updated",
      data: { object: { id: record.id, status: "late" }, from: "present", to: "late", previous_attributes: { status: "present" }, reason: "arrived 10:20", actor: { type: "user" } },
    });
    expect(updatesOnly.deliveries[0]!.event.id).toBe(updated!.event.id);
    for (const d of all.deliveries) {
      expect(d.headers["content-type"]).toBe("application/json");
      const { t, signedBy, v1Count } = specSigners(d.raw, String(d.headers["x-service-signature"]), [a.secret]);
      expect(signedBy).toEqual([0]);
      expect(v1Count).toBe(1);
      expect(Math.abs(t - Date.now() / 1000)).toBeLessThan(5);
      // The body is the stored event, byte for byte: GET /v1/events/{id} returns the same object.
      const stored = await h.request("GET", `/v1/events/${d.event.id}`, { key });
      expect(JSON.parse(d.raw.toString())).toEqual(stored.body);
    }
    // The worker records an attempt in its tick after the answer arrived.
    await expect.poll(async () => (await attempts(a.id)).length).toBe(2);
    const log = await attempts(a.id);
    expect(log).toHaveLength(2);
    expect(log[0]).toMatchObject({ object: "webhook_attempt", kind: "delivery", status_code: 200, outcome: "succeeded", next_attempt_at: null, error: null });
    expect(log[0].duration_ms).toBeGreaterThanOrEqual(0);
  });

  it("retries a failing receiver on the schedule and stops at the first 2xx", async () => {
    const r = await receiver();
    let calls = 0;
    r.answer = () => (++calls < 3 ? { status: 500, body: "boom" } : { status: 204 });
    const e = await endpoint(r.url);
    await newRecord();
    await r.waitFor((d) => d.length === 3, 3000);
    const gaps = r.deliveries.slice(1).map((d, i) => d.at - r.deliveries[i]!.at);
    expect(gaps[0]).toBeGreaterThanOrEqual(SCHEDULE[0]! - 5);
    expect(gaps[1]).toBeGreaterThanOrEqual(SCHEDULE[1]! - 5);
    expect(new Set(r.deliveries.map((d) => d.event.id)).size).toBe(1);
    await waitUntil(async () => (await attempts(e.id)).length === 3);
    const log = (await attempts(e.id)).reverse();
    expect(log.map((a) => a.status_code)).toEqual([500, 500, 204]);
    expect(log[0].next_attempt_at).not.toBeNull();
    expect(log[0].response_body_excerpt).toBe("boom");
    expect(log[2]).toMatchObject({ outcome: "succeeded", next_attempt_at: null });
    await new Promise((res) => setTimeout(res, 300));
    expect(r.deliveries).toHaveLength(3);
  });

  it("disables an endpoint that fails for the whole schedule, and says why", async () => {
    const r = await receiver();
    r.answer = () => ({ status: 500 });
    const e = await endpoint(r.url);
    await newRecord();
    await r.waitFor((d) => d.length === SCHEDULE.length + 1, 3000);
    await waitUntil(async () => (await h.request("GET", `/v1/webhook_endpoints/${e.id}`, { key })).body.status === "disabled");
    const view = (await h.request("GET", `/v1/webhook_endpoints/${e.id}`, { key })).body;
    expect(view.disabled_reason).toMatch(/whole retry schedule: 4 attempts/);
    expect(view.disabled_reason).toMatch(/HTTP 500/);
    await newRecord();
    await new Promise((res) => setTimeout(res, 300));
    expect(r.deliveries).toHaveLength(SCHEDULE.length + 1);
  });

  it("honours Retry-After", async () => {
    const r = await receiver();
    let calls = 0;
    r.answer = () => (++calls === 1 ? { status: 503, headers: { "retry-after": "1" } } : { status: 200 });
    await endpoint(r.url);
    await newRecord();
    await r.waitFor((d) => d.length === 2, 4000);
    // the schedule says 40 ms, the receiver asked for 1 s (capped at the schedule's longest step, 120 ms here)
    expect(r.deliveries[1]!.at - r.deliveries[0]!.at).toBeGreaterThanOrEqual(115);
  });

  it("disables the endpoint at once on 410 Gone", async () => {
    const r = await receiver();
    r.answer = () => ({ status: 410 });
    const e = await endpoint(r.url);
    await newRecord();
    await waitUntil(async () => (await h.request("GET", `/v1/webhook_endpoints/${e.id}`, { key })).body.status === "disabled");
    const view = (await h.request("GET", `/v1/webhook_endpoints/${e.id}`, { key })).body;
    expect(view.disabled_reason).toMatch(/410 Gone/);
    await new Promise((res) => setTimeout(res, 200));
    expect(r.deliveries).toHaveLength(1);
  });

  it("does not follow a redirect: a 301 is a failed attempt", async () => {
    const target = await receiver();
    const r = await receiver();
    r.answer = () => ({ status: 301, headers: { location: target.url } });
    const e = await endpoint(r.url);
    await newRecord();
    await waitUntil(async () => (await attempts(e.id)).length >= 2);
    expect((await attempts(e.id)).at(-1)).toMatchObject({ status_code: 301, outcome: "failed" });
    expect(target.deliveries).toHaveLength(0);
  });

  it("neither a hanging receiver nor a 50 MB answer wedges the queue", async () => {
    const hanging = await receiver();
    hanging.answer = () => "hang";
    const huge = await receiver();
    huge.answer = () => ({ stream: 50 * 1024 * 1024 });
    const healthy = await receiver();
    const hangE = await endpoint(hanging.url);
    const hugeE = await endpoint(huge.url);
    await endpoint(healthy.url);
    await newRecord();
    await newRecord();
    await healthy.waitFor((d) => d.length === 2, 2000);
    await waitUntil(async () => (await attempts(hangE.id)).length >= 1 && (await attempts(hugeE.id)).length >= 1, 5 * TIMEOUT_MS);
    const hang = (await attempts(hangE.id)).at(-1);
    expect(hang).toMatchObject({ status_code: null, outcome: "failed" });
    expect(hang.error).toMatch(new RegExp(`no answer within ${TIMEOUT_MS} ms`));
    expect(hang.duration_ms).toBeLessThan(3 * TIMEOUT_MS);
    const big = (await attempts(hugeE.id)).at(-1);
    expect(big).toMatchObject({ status_code: 200, outcome: "succeeded" });
    expect(big.response_body_excerpt.length).toBeLessThanOrEqual(500);
    // a third event still reaches the healthy receiver promptly while the hanging one is retried
    const started = Date.now();
    await newRecord();
    await healthy.waitFor((d) => d.length === 3, 2000);
    expect(Date.now() - started).toBeLessThan(1000);
  });

  it("keeps delivering when an endpoint is deleted while an attempt to it runs", async () => {
    const hanging = await receiver();
    hanging.answer = () => "hang";
    const healthy = await receiver();
    const gone = await endpoint(hanging.url);
    await endpoint(healthy.url);
    await newRecord();
    await hanging.waitFor((d) => d.length === 1);
    expect((await h.request("DELETE", `/v1/webhook_endpoints/${gone.id}`, { key })).status).toBe(200);
    await new Promise((res) => setTimeout(res, 400)); // the cut-off attempt finishes after the delete
    await newRecord();
    await healthy.waitFor((d) => d.length === 2);
    await new Promise((res) => setTimeout(res, 300));
    expect(new Set(healthy.deliveries.map((d) => d.event.id)).size).toBe(2);
    expect(healthy.deliveries).toHaveLength(2);
    expect(hanging.deliveries).toHaveLength(1);
    expect(loggedErrors).toEqual([]);
  });

  it("resends one event to one endpoint", async () => {
    const r = await receiver();
    const e = await endpoint(r.url);
    await newRecord();
    await r.waitFor((d) => d.length === 1);
    const eventId = r.deliveries[0]!.event.id;
    const res = await h.request("POST", `/v1/webhook_endpoints/${e.id}/resend`, { key, body: { event: eventId } });
    expect(res.status).toBe(202);
    expect(res.body).toMatchObject({ object: "webhook_delivery", endpoint: e.id, event: eventId, state: "pending" });
    await r.waitFor((d) => d.length === 2);
    expect(r.deliveries[1]!.event.id).toBe(eventId);
  });

  it("does not send events committed while the endpoint was disabled, even when their fan-out runs after it is re-enabled", async () => {
    const r = await receiver();
    const e = await endpoint(r.url);
    expect((await h.request("PATCH", `/v1/webhook_endpoints/${e.id}`, { key, body: { disabled: true } })).status).toBe(200);
    const whileDisabled = await newRecord();
    const eventOf = (recordId: string) =>
      h.server.store.db.selectFrom("events").select(["id", "dispatched_at"]).where("payload", "like", `%${recordId}%`).orderBy("id", "desc").executeTakeFirstOrThrow();
    await waitUntil(async () => (await eventOf(whileDisabled.id)).dispatched_at !== null);
    expect((await h.request("PATCH", `/v1/webhook_endpoints/${e.id}`, { key, body: { disabled: false } })).status).toBe(200);
    // As if the worker had been behind (a busy server fans out late): the event written while
    // the endpoint was disabled is still waiting for its fan-out when the endpoint is enabled.
    const skipped = await eventOf(whileDisabled.id);
    await h.server.store.db.updateTable("events").set({ dispatched_at: null }).where("id", "=", skipped.id).execute();
    await newRecord();
    await r.waitFor((d) => d.length === 1);
    // The fan-out takes the oldest events first: the skipped one is settled by now.
    const settled = await h.server.store.db.selectFrom("events").select("dispatched_at").where("id", "=", skipped.id).executeTakeFirstOrThrow();
    expect(settled.dispatched_at).not.toBeNull();
    await new Promise((res) => setTimeout(res, 200));
    expect(r.deliveries.map((d) => d.event.id)).not.toContain(skipped.id);
    expect(r.deliveries).toHaveLength(1);
  });

  it("does not send events committed before the endpoint existed, and sends those committed after", async () => {
    await newRecord();
    const r = await receiver();
    await endpoint(r.url);
    await new Promise((res) => setTimeout(res, 200));
    expect(r.deliveries).toHaveLength(0);
    const after = await newRecord();
    await r.waitFor((d) => d.length === 1);
    await new Promise((res) => setTimeout(res, 200));
    expect(r.deliveries.map((d) => [d.event.data.object.id, d.event.data.object.status])).toEqual([[after.id, standing[key]!.status]]);
  });
});

describe("secret roll", () => {
  it("signs with old and new secrets (two v1 parts) during the grace period, then with the new one only", async () => {
    const r = await receiver();
    const e = await endpoint(r.url);
    const rolled = (await h.request("POST", `/v1/webhook_endpoints/${e.id}/roll_secret`, { key })).body;
    await newRecord();
    await r.waitFor((d) => d.length === 1);
    const during = specSigners(r.deliveries[0]!.raw, String(r.deliveries[0]!.headers["x-service-signature"]), [e.secret, rolled.secret]);
    expect(during.v1Count).toBe(2);
    expect(during.signedBy).toEqual([0, 1]);
    await endGracePeriod(h.server.store.db, e.id);
    await newRecord();
    await r.waitFor((d) => d.length === 2);
    const after = specSigners(r.deliveries[1]!.raw, String(r.deliveries[1]!.headers["x-service-signature"]), [e.secret, rolled.secret]);
    expect(after.v1Count).toBe(1);
    expect(after.signedBy).toEqual([1]);
    expect((await h.request("GET", `/v1/webhook_endpoints/${e.id}`, { key })).body.previous_secret_expires_at).toBeNull();
  });
});

describe("the outbox in one write transaction", () => {
  it("writes an event dispatched only while its mode has no enabled endpoint, and not once one is created in the same transaction", async () => {
    const event = () => {
      const id = newId("evt");
      return { id, livemode: 0 as const, type: "attendance.recorded", created_at: new Date().toISOString(), payload: JSON.stringify({ id }) };
    };
    const before = event();
    const after = event();
    const rolledBack = new Error("roll back: nothing of this test stays for the worker");
    let dispatched: Record<string, string | null | undefined> = {};
    await expect(
      h.server.store.db.transaction().execute(async (trx) => {
        await insertEvents(trx, [before]);
        await createEndpoint(trx, 0, { url: "http://127.0.0.1:9/hooks", enabled_events: ["*"] });
        await insertEvents(trx, [after]);
        const rows = await trx.selectFrom("events").select(["id", "dispatched_at"]).where("id", "in", [before.id, after.id]).execute();
        dispatched = Object.fromEntries(rows.map((row) => [row.id, row.dispatched_at]));
        throw rolledBack;
      }),
    ).rejects.toBe(rolledBack);
    // On PostgreSQL, where another instance could create an endpoint meanwhile, too: postgres-outbox.test.ts.
    expect(dispatched).toEqual({ [before.id]: before.created_at, [after.id]: null });
  });
});

describe("mode isolation", () => {
  it("live events reach live endpoints only, test events test endpoints only", async () => {
    const testReceiver = await receiver();
    const liveReceiver = await receiver({ https: true });
    await endpoint(testReceiver.url);
    const live = await endpoint(liveReceiver.url, ["*"], liveKey);
    const liveRecord = await newRecord(liveKey);
    const testRecord = await newRecord();
    await liveReceiver.waitFor((d) => d.length === 1);
    await testReceiver.waitFor((d) => d.length === 1);
    await new Promise((res) => setTimeout(res, 200));
    expect(liveReceiver.deliveries.map((d) => d.event.data.object.id)).toEqual([liveRecord.id]);
    expect(liveRecord.id).not.toBe(testRecord.id);
    expect(liveReceiver.deliveries[0]!.event.livemode).toBe(true);
    expect(specSigners(liveReceiver.deliveries[0]!.raw, String(liveReceiver.deliveries[0]!.headers["x-service-signature"]), [live.secret]).signedBy).toEqual([0]);
    expect(testReceiver.deliveries.map((d) => d.event.data.object.id)).toEqual([testRecord.id]);
    expect(testReceiver.deliveries[0]!.event.livemode).toBe(false);
  });
});

describe("request forgery at delivery time", () => {
  it("refuses a live endpoint whose name rebinds to loopback, before any connection", async () => {
    const target = await receiver({ https: true });
    const port = new URL(target.url).port;
    rebindTo = "93.184.216.34";
    // The live-loopback allowance is off for this check: a second server with the default policy.
    const strict = await startHarness({ webhooks: { resolve: resolver, retryScheduleMs: [20], jitter: 0, timeoutMs: 300, leaseMs: 1000, pollMs: 50, ca: TEST_CERT } });
    try {
      const k = (await createApiKey(strict.server.store.db, { mode: "live", scopes: ["webhooks:write", "attendance:write"] })).secret;
      const created = await strict.request("POST", "/v1/webhook_endpoints", { key: k, body: { url: `https://rebind.example.test:${port}/hooks`, enabled_events: ["*"] } });
      expect(created.status).toBe(201);
      rebindTo = "127.0.0.1";
      await mark(strict, (await strict.server.store.db.selectFrom("sessions").select("id").where("livemode", "=", 1).where("course_code", "=", "MATH").executeTakeFirstOrThrow()).id, "S1", "present", k);
      let log: any[] = [];
      await waitUntil(async () => (log = (await strict.request("GET", `/v1/webhook_endpoints/${created.body.id}/attempts`, { key: k })).body.data).length >= 2);
      expect(log[0]).toMatchObject({ status_code: null, outcome: "failed" });
      expect(log[0].error).toMatch(/rebind\.example\.test resolves to 127\.0\.0\.1 is a loopback address/);
      expect(target.connections()).toBe(0);
      expect(target.deliveries).toHaveLength(0);
    } finally {
      rebindTo = "93.184.216.34";
      await strict.close();
    }
  });
});
