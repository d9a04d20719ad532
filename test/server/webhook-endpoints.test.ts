// Webhook endpoint management, the events API and every refused input: over HTTP, against the
// real server. Names are resolved by an injected resolver, so tests reach loopback only.
import fc from "fast-check";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createApiKey } from "../../server/services/api-keys.ts";
import { mark, startHarness, type Harness } from "./harness.ts";
import { namesResolver, startReceiver, type Receiver } from "./webhook-receiver.ts";

// A test DNS: names that point at the addresses live endpoints must never reach.
const names: Record<string, string> = {
  "hooks.example.test": "93.184.216.34",
  "loopback.example.test": "127.0.0.1",
  "private.example.test": "10.0.0.1",
  "metadata.example.test": "169.254.169.254",
  "cgnat.example.test": "100.64.0.1",
  "mapped.example.test": "::ffff:10.0.0.1",
};
const resolver = namesResolver(names);

let h: Harness;
let receiver: Receiver;
let testKey: string;
let liveKey: string;
let readKey: string;
beforeAll(async () => {
  h = await startHarness({ webhooks: { resolve: resolver } });
  testKey = (await createApiKey(h.server.store.db, { mode: "test", scopes: ["webhooks:write", "attendance:write"] })).secret;
  liveKey = (await createApiKey(h.server.store.db, { mode: "live", scopes: ["webhooks:write"] })).secret;
  readKey = (await createApiKey(h.server.store.db, { mode: "test", scopes: ["events:read"] })).secret;
  receiver = await startReceiver();
});
afterAll(async () => {
  await receiver.close();
  await h.close();
});

const create = (body: unknown, key = testKey) => h.request("POST", "/v1/webhook_endpoints", { key, body });

describe("endpoint management", () => {
  it("creates an endpoint and shows its secret once", async () => {
    const res = await create({ url: receiver.url, enabled_events: ["attendance.updated"], description: "SIS sync" });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({
      object: "webhook_endpoint",
      livemode: false,
      url: receiver.url,
      description: "SIS sync",
      enabled_events: ["attendance.updated"],
      status: "enabled",
      disabled_reason: null,
    });
    expect(res.body.id).toMatch(/^whe_[0-9a-z]{26}$/);
    expect(res.body.secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    const again = await h.request("GET", `/v1/webhook_endpoints/${res.body.id}`, { key: testKey });
    expect(again.status).toBe(200);
    expect(again.body).not.toHaveProperty("secret");
    expect(JSON.stringify((await h.request("GET", "/v1/webhook_endpoints", { key: testKey })).body)).not.toContain(res.body.secret);
  });

  it("lists endpoints with cursors, in the key's mode only", async () => {
    const before = (await h.request("GET", "/v1/webhook_endpoints?limit=200", { key: testKey })).body.data.length;
    for (let i = 0; i < 3; i++) await create({ url: `${receiver.url}/${i}`, enabled_events: ["*"] });
    const live = await create({ url: "https://hooks.example.test/live", enabled_events: ["*"] }, liveKey);
    expect(live.status).toBe(201);
    expect(live.body.livemode).toBe(true);
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: any = await h.request("GET", `/v1/webhook_endpoints?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`, { key: testKey });
      expect(page.body.object).toBe("list");
      seen.push(...page.body.data.map((e: { id: string }) => e.id));
      cursor = page.body.next_cursor;
      expect(cursor === null).toBe(!page.body.has_more);
    } while (cursor);
    expect(seen).toHaveLength(before + 3);
    expect(new Set(seen).size).toBe(seen.length);
    expect(seen).not.toContain(live.body.id);
    expect((await h.request("GET", `/v1/webhook_endpoints/${live.body.id}`, { key: testKey })).status).toBe(404);
  });

  it("updates the url, the events, the description and disabled", async () => {
    const { body } = await create({ url: receiver.url, enabled_events: ["attendance.recorded"] });
    const updated = await h.request("PATCH", `/v1/webhook_endpoints/${body.id}`, {
      key: testKey,
      body: { url: `${receiver.url}/v2`, enabled_events: ["attendance.updated", "badge.ota_reported"], description: "v2", disabled: true },
    });
    expect(updated.status).toBe(200);
    expect(updated.body).toMatchObject({ url: `${receiver.url}/v2`, enabled_events: ["attendance.updated", "badge.ota_reported"], description: "v2", status: "disabled" });
    expect(updated.body.disabled_reason).toMatch(/API/);
    const enabled = await h.request("PATCH", `/v1/webhook_endpoints/${body.id}`, { key: testKey, body: { disabled: false } });
    expect(enabled.body).toMatchObject({ status: "enabled", disabled_reason: null });
  });

  it("deletes an endpoint", async () => {
    const { body } = await create({ url: receiver.url, enabled_events: ["*"] });
    const deleted = await h.request("DELETE", `/v1/webhook_endpoints/${body.id}`, { key: testKey });
    expect(deleted.body).toEqual({ id: body.id, object: "webhook_endpoint", deleted: true });
    expect((await h.request("GET", `/v1/webhook_endpoints/${body.id}`, { key: testKey })).status).toBe(404);
    expect((await h.request("DELETE", `/v1/webhook_endpoints/${body.id}`, { key: testKey })).status).toBe(404);
  });

  it("rolls the secret: a new one, shown once, with the old one's grace period", async () => {
    const { body } = await create({ url: receiver.url, enabled_events: ["*"] });
    const rolled = await h.request("POST", `/v1/webhook_endpoints/${body.id}/roll_secret`, { key: testKey });
    expect(rolled.status).toBe(200);
    expect(rolled.body.secret).toMatch(/^whsec_/);
    expect(rolled.body.secret).not.toBe(body.secret);
    const grace = Date.parse(rolled.body.previous_secret_expires_at) - Date.now();
    expect(grace).toBeGreaterThan(23 * 3600_000);
    expect(grace).toBeLessThanOrEqual(24 * 3600_000);
  });

  it("needs the webhooks:write scope; events need events:read", async () => {
    const res = await create({ url: receiver.url, enabled_events: ["*"] }, h.keys.write);
    expect(res.status).toBe(403);
    expect(res.body.error.message).toContain("webhooks:write");
    expect((await h.request("GET", "/v1/events", { key: h.keys.write })).status).toBe(403);
    expect((await h.request("GET", "/v1/events", { key: readKey })).status).toBe(200);
    expect((await h.request("GET", "/v1/webhook_endpoints", { key: readKey })).status).toBe(403);
  });
});

describe("events API", () => {
  it("lists and retrieves events of the key's mode, oldest first, with type and since filters", async () => {
    const since = new Date().toISOString();
    const record = await mark(h, h.sessions.art, "S5", "present", testKey);
    await h.request("PATCH", `/v1/attendance/${record.id}`, { key: testKey, body: { status: "late", reason: "bus was late" } });
    const list = await h.request("GET", `/v1/events?since=${since}`, { key: readKey });
    expect(list.body.data.map((e: { type: string }) => e.type)).toEqual(["attendance.recorded", "attendance.updated"]);
    const updated = list.body.data[1];
    expect(updated).toMatchObject({ object: "event", type: "attendance.updated", livemode: false, data: { object: { id: record.id, status: "late" }, previous_attributes: { status: "present" }, reason: "bus was late", actor: { type: "user" } } });
    expect(updated.id).toMatch(/^evt_/);
    expect(typeof updated.created).toBe("number");
    const one = await h.request("GET", `/v1/events/${updated.id}`, { key: readKey });
    expect(one.body).toEqual(updated);
    const typed = await h.request("GET", `/v1/events?since=${since}&type=attendance.updated`, { key: readKey });
    expect(typed.body.data).toHaveLength(1);
    const liveRead = (await createApiKey(h.server.store.db, { mode: "live", scopes: ["events:read"] })).secret;
    expect((await h.request("GET", `/v1/events/${updated.id}`, { key: liveRead })).status).toBe(404);
  });

  it("pages through events with cursors without repeats", async () => {
    const all: string[] = [];
    let cursor: string | null = null;
    do {
      const page: any = await h.request("GET", `/v1/events?limit=1${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`, { key: readKey });
      all.push(...page.body.data.map((e: { id: string }) => e.id));
      cursor = page.body.next_cursor;
    } while (cursor);
    expect(all.length).toBe(await h.count("events") - (await h.server.store.db.selectFrom("events").select("id").where("livemode", "=", 1).execute()).length);
    expect(new Set(all).size).toBe(all.length);
  });
});

describe("test delivery", () => {
  // Each test has a receiver of its own: the file's shared one also gets the real events of the
  // endpoints other tests made, which may arrive at any moment, and its answer is for them too.
  const ownReceivers: Receiver[] = [];
  const ownReceiver = async () => {
    const own = await startReceiver();
    ownReceivers.push(own);
    return own;
  };
  afterEach(async () => {
    while (ownReceivers.length) await ownReceivers.pop()!.close();
  });

  it("sends a synthetic event marked as a test and returns what the receiver said", async () => {
    const own = await ownReceiver();
    const { body } = await create({ url: own.url, enabled_events: ["attendance.updated"] });
    own.answer = () => ({ status: 200, body: "thanks, got it" });
    const res = await h.request("POST", `/v1/webhook_endpoints/${body.id}/test`, { key: testKey, body: { type: "attendance.recorded" } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ object: "webhook_test_delivery", delivered: true, status_code: 200, error: null, response_body_excerpt: "thanks, got it" });
    expect(res.body.event).toMatchObject({ type: "attendance.recorded", livemode: false, test_delivery: true, object: "event" });
    const got = own.deliveries.filter((d) => d.event.id === res.body.event.id);
    expect(got).toHaveLength(1);
    expect(got[0]!.event.test_delivery).toBe(true);
    const log = await h.request("GET", `/v1/webhook_endpoints/${body.id}/attempts`, { key: testKey });
    expect(log.body.data[0]).toMatchObject({ kind: "test", event: res.body.event.id, status_code: 200, outcome: "succeeded" });
  });

  it("reports a failing receiver in the answer, not as an API error", async () => {
    const own = await ownReceiver();
    const { body } = await create({ url: own.url, enabled_events: ["*"] });
    own.answer = () => ({ status: 500, body: "database down" });
    const res = await h.request("POST", `/v1/webhook_endpoints/${body.id}/test`, { key: testKey, body: { type: "badge.ota_reported" } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ delivered: false, status_code: 500, response_body_excerpt: "database down" });
  });

  it("refuses a live key with 403 saying why", async () => {
    const live = await create({ url: "https://hooks.example.test/x", enabled_events: ["*"] }, liveKey);
    const res = await h.request("POST", `/v1/webhook_endpoints/${live.body.id}/test`, { key: liveKey, body: { type: "attendance.recorded" } });
    expect(res.status).toBe(403);
    expect(res.body.error).toMatchObject({ type: "permission_error", code: "test_delivery_live_key" });
    expect(res.body.error.message).toMatch(/test-mode key/);
  });
});

describe("bad input", () => {
  const refused = [
    { name: "a URL that is not a URL", body: { url: "not a url", enabled_events: ["*"] }, code: "url_invalid", param: "url" },
    { name: "a non-http scheme", body: { url: "ftp://hooks.example.test/", enabled_events: ["*"] }, code: "url_invalid", param: "url" },
    { name: "a non-https live URL", live: true, body: { url: "http://hooks.example.test/", enabled_events: ["*"] }, code: "url_not_https", param: "url" },
    { name: "a live URL naming 127.0.0.1", live: true, body: { url: "https://127.0.0.1/hooks", enabled_events: ["*"] }, code: "url_refused", param: "url" },
    { name: "a live URL naming 10.0.0.1", live: true, body: { url: "https://10.0.0.1/hooks", enabled_events: ["*"] }, code: "url_refused", param: "url" },
    { name: "a live URL naming the metadata address", live: true, body: { url: "https://169.254.169.254/latest/meta-data", enabled_events: ["*"] }, code: "url_refused", param: "url" },
    { name: "a live URL naming a CGNAT address", live: true, body: { url: "https://100.64.0.1/", enabled_events: ["*"] }, code: "url_refused", param: "url" },
    { name: "a live URL naming [::1]", live: true, body: { url: "https://[::1]/", enabled_events: ["*"] }, code: "url_refused", param: "url" },
    { name: "a live name resolving to loopback", live: true, body: { url: "https://loopback.example.test/", enabled_events: ["*"] }, code: "url_refused", param: "url" },
    { name: "a live name resolving to 10.0.0.1", live: true, body: { url: "https://private.example.test/", enabled_events: ["*"] }, code: "url_refused", param: "url" },
    { name: "a live name resolving to the metadata address", live: true, body: { url: "https://metadata.example.test/", enabled_events: ["*"] }, code: "url_refused", param: "url" },
    { name: "a live name resolving to CGNAT", live: true, body: { url: "https://cgnat.example.test/", enabled_events: ["*"] }, code: "url_refused", param: "url" },
    { name: "a live name resolving to an IPv4-mapped private address", live: true, body: { url: "https://mapped.example.test/", enabled_events: ["*"] }, code: "url_refused", param: "url" },
    { name: "a name that does not resolve", body: { url: "http://nowhere.example.test/", enabled_events: ["*"] }, code: "url_refused", param: "url" },
    { name: "a test URL naming the metadata address", body: { url: "http://169.254.169.254/", enabled_events: ["*"] }, code: "url_refused", param: "url" },
    { name: "an unknown event type", body: { url: "http://127.0.0.1:9/", enabled_events: ["attendance.deleted"] }, code: "event_type_unknown", param: "enabled_events" },
    { name: "an empty event list", body: { url: "http://127.0.0.1:9/", enabled_events: [] }, code: "parameter_invalid", param: "enabled_events" },
    { name: "no event list", body: { url: "http://127.0.0.1:9/" }, code: "parameter_missing", param: "enabled_events" },
    { name: "an unknown field", body: { url: "http://127.0.0.1:9/", enabled_events: ["*"], secret: "whsec_mine" }, code: "parameter_unknown", param: "secret" },
  ];
  for (const c of refused) {
    it(`refuses ${c.name} and creates nothing`, async () => {
      const before = await h.server.store.db.selectFrom("webhook_endpoints").select("id").execute();
      const res = await create(c.body, c.live ? liveKey : testKey);
      expect(res.status).toBe(400);
      expect(res.body.error).toMatchObject({ type: "invalid_request_error", code: c.code, param: c.param });
      expect(res.body.error.message).not.toMatch(/\n\s+at /);
      expect(await h.server.store.db.selectFrom("webhook_endpoints").select("id").execute()).toHaveLength(before.length);
    });
  }

  it("refuses the same bad URLs on update", async () => {
    const live = await create({ url: "https://hooks.example.test/ok", enabled_events: ["*"] }, liveKey);
    const res = await h.request("PATCH", `/v1/webhook_endpoints/${live.body.id}`, { key: liveKey, body: { url: "https://metadata.example.test/" } });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe("url_refused");
    expect((await h.request("GET", `/v1/webhook_endpoints/${live.body.id}`, { key: liveKey })).body.url).toBe("https://hooks.example.test/ok");
  });

  it("answers an unknown endpoint id with 404 everywhere", async () => {
    for (const [method, path, body] of [
      ["GET", "/v1/webhook_endpoints/whe_nope", undefined],
      ["PATCH", "/v1/webhook_endpoints/whe_nope", { description: "x" }],
      ["DELETE", "/v1/webhook_endpoints/whe_nope", undefined],
      ["POST", "/v1/webhook_endpoints/whe_nope/roll_secret", undefined],
      ["POST", "/v1/webhook_endpoints/whe_nope/test", { type: "attendance.recorded" }],
      ["POST", "/v1/webhook_endpoints/whe_nope/resend", { event: "evt_nope" }],
      ["GET", "/v1/webhook_endpoints/whe_nope/attempts", undefined],
      ["GET", "/v1/events/evt_nope", undefined],
    ] as const) {
      const res = await h.request(method, path, { key: testKey, body });
      expect(res.status, `${method} ${path}`).toBe(404);
      expect(res.body.error.code).toBe("resource_missing");
    }
  });

  it("refuses a test delivery of an unknown type, an empty update, and a resend of an unknown event", async () => {
    const { body } = await create({ url: receiver.url, enabled_events: ["*"] });
    const test = await h.request("POST", `/v1/webhook_endpoints/${body.id}/test`, { key: testKey, body: { type: "attendance.exploded" } });
    expect(test.status).toBe(400);
    expect(test.body.error).toMatchObject({ code: "event_type_unknown", param: "type" });
    const empty = await h.request("PATCH", `/v1/webhook_endpoints/${body.id}`, { key: testKey, body: {} });
    expect(empty.status).toBe(400);
    const resend = await h.request("POST", `/v1/webhook_endpoints/${body.id}/resend`, { key: testKey, body: { event: "evt_nope" } });
    expect(resend.status).toBe(404);
    expect(resend.body.error.param).toBe("event");
    expect((await h.request("GET", "/v1/events?type=attendance.exploded", { key: readKey })).status).toBe(400);
    expect((await h.request("GET", "/v1/events?since=yesterday", { key: readKey })).status).toBe(400);
  });

  it("never answers 500 to arbitrary query strings on the events list and the delivery log (fuzz)", async () => {
    const { body } = await create({ url: receiver.url, enabled_events: ["*"] });
    await fc.assert(
      fc.asyncProperty(
        fc.dictionary(fc.constantFrom("type", "since", "limit", "cursor", "event", "x"), fc.string({ maxLength: 40 }), { maxKeys: 3 }),
        fc.boolean(),
        async (params, onAttempts) => {
          const query = new URLSearchParams(params).toString();
          const res = await h.request("GET", onAttempts ? `/v1/webhook_endpoints/${body.id}/attempts?${query}` : `/v1/events?${query}`, { key: testKey });
          expect([200, 400]).toContain(res.status);
          if (res.status === 400) expect(res.body.error.type).toBe("invalid_request_error");
        },
      ),
      { numRuns: 150 },
    );
  });

  it("never answers 500 to arbitrary endpoint bodies (fuzz)", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record(
          {
            url: fc.oneof(fc.string(), fc.webUrl(), fc.constantFrom("http://127.0.0.1:9/", "https://10.0.0.1/", "http://[::1]:1/", "javascript:alert(1)")),
            enabled_events: fc.oneof(fc.array(fc.string()), fc.array(fc.constantFrom("*", "attendance.recorded", "x")), fc.string()),
            description: fc.oneof(fc.string(), fc.integer()),
          },
          { requiredKeys: [] },
        ),
        fc.boolean(),
        async (body, live) => {
          const res = await create(body, live ? liveKey : testKey);
          expect([201, 400]).toContain(res.status);
          if (res.status === 400) expect(res.body.error.type).toBe("invalid_request_error");
        },
      ),
      { numRuns: 150 },
    );
  });
});
