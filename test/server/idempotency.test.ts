import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiKey } from "../../server/services/api-keys.ts";
import { lookupOf } from "../../server/services/secrets.ts";
import { openStore } from "../../server/store/database.ts";
import { requestFingerprint } from "../../server/services/idempotency.ts";
import { reserveIdempotencyKey } from "../../server/store/idempotency-store.ts";
import { startHarness, type Harness } from "./harness.ts";

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(() => h.close());

/** The id of the API key whose secret this is. */
async function keyIdOf(secret: string): Promise<string> {
  const row = await h.server.store.db.selectFrom("api_keys").select("id").where("lookup", "=", lookupOf("sk_test_", secret)).executeTakeFirstOrThrow();
  return row.id;
}

const body = (h: Harness, externalId: string, status = "present") => ({ session_id: h.sessions.math1, external_id: externalId, status });

describe("Idempotency-Key on writes", () => {
  it("replays the original status and body for a retry and never marks twice", async () => {
    const key = `${h.sessions.math1}-S1`;
    const first = await h.request("POST", "/v1/attendance", { body: body(h, "S1"), idempotencyKey: key });
    expect(first.status).toBe(201);
    expect(first.headers.get("idempotent-replayed")).toBeNull();
    const records = await h.count("records");
    const retry = await h.request("POST", "/v1/attendance", { body: body(h, "S1"), idempotencyKey: key });
    expect(retry.status).toBe(201);
    expect(retry.body).toEqual(first.body);
    expect(retry.headers.get("idempotent-replayed")).toBe("true");
    expect(await h.count("records")).toBe(records);
  });

  it("treats the same fields in another order as the same request", async () => {
    const key = "order-insensitive";
    const a = await h.request("POST", "/v1/attendance", { body: { status: "late", external_id: "S2", session_id: h.sessions.math1 }, idempotencyKey: key });
    const b = await h.request("POST", "/v1/attendance", { body: { session_id: h.sessions.math1, external_id: "S2", status: "late" }, idempotencyKey: key });
    expect(a.status).toBe(201);
    expect(b.body).toEqual(a.body);
  });

  it("refuses the same key with another body (422) and changes nothing", async () => {
    const key = "reused-key";
    await h.request("POST", "/v1/attendance", { body: body(h, "S3"), idempotencyKey: key });
    const records = await h.count("records");
    const res = await h.request("POST", "/v1/attendance", { body: body(h, "S4"), idempotencyKey: key });
    expect(res.status).toBe(422);
    expect(res.body.error).toMatchObject({ type: "idempotency_error", code: "idempotency_key_reused" });
    expect(await h.count("records")).toBe(records);
  });

  it("requires the key on every write, before anything runs", async () => {
    const records = await h.count("records");
    const res = await h.request("POST", "/v1/attendance", { body: body(h, "S5"), idempotencyKey: null });
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ code: "idempotency_key_missing", param: "Idempotency-Key" });
    const patch = await h.request("PATCH", "/v1/attendance/att_x", { body: { status: "late", reason: "r" }, idempotencyKey: null });
    expect(patch.body.error.code).toBe("idempotency_key_missing");
    const tooLong = await h.request("POST", "/v1/attendance", { body: body(h, "S5"), idempotencyKey: "k".repeat(256) });
    expect(tooLong.body.error.code).toBe("idempotency_key_invalid");
    expect(await h.count("records")).toBe(records);
  });

  it("stores nothing for a request that fails validation, so the fixed request can reuse the key", async () => {
    const key = "fix-and-retry";
    const bad = await h.request("POST", "/v1/attendance", { body: { ...body(h, "S5"), status: "here" }, idempotencyKey: key });
    expect(bad.status).toBe(400);
    const good = await h.request("POST", "/v1/attendance", { body: body(h, "S5"), idempotencyKey: key });
    expect(good.status).toBe(201);
  });

  it("replays a business failure too (404 for an unknown session)", async () => {
    const key = "replayed-404";
    const request = { body: { session_id: "ses_missing", external_id: "S1", status: "present" }, idempotencyKey: key };
    const first = await h.request("POST", "/v1/attendance", request);
    const again = await h.request("POST", "/v1/attendance", request);
    expect(first.status).toBe(404);
    expect(again.status).toBe(404);
    expect(again.body).toEqual(first.body);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
  });

  it("50 concurrent creates with one key produce exactly one record and identical responses", async () => {
    const key = `${h.sessions.math2}-S3`;
    const records = await h.count("records");
    const responses = await Promise.all(
      Array.from({ length: 50 }, () => h.request("POST", "/v1/attendance", { body: { session_id: h.sessions.math2, external_id: "S3", status: "present" }, idempotencyKey: key })),
    );
    expect(await h.count("records")).toBe(records + 1);
    expect(new Set(responses.map((r) => r.status))).toEqual(new Set([201]));
    expect(new Set(responses.map((r) => JSON.stringify(r.body))).size).toBe(1);
    const events = await h.server.store.db.selectFrom("events").select("payload").execute();
    expect(events.filter((e) => JSON.parse(e.payload).data.object.id === responses[0]!.body.id)).toHaveLength(1);
  });

  it("refuses with 422 a key that another process holds for a different request", async () => {
    const key = "held-elsewhere";
    const other = await openStore({ ...h.storeOptions, sync: "normal" });
    try {
      await reserveIdempotencyKey(other.db, { livemode: 0, apiKeyId: await keyIdOf(h.keys.write) }, {
        key,
        fingerprint: "fingerprint-of-the-other-request",
        now: new Date().toISOString(),
        staleBefore: new Date(Date.now() - 60_000).toISOString(),
      });
      const records = await h.count("records");
      const res = await h.request("POST", "/v1/attendance", { body: body(h, "S4"), idempotencyKey: key });
      expect(res.status).toBe(422);
      expect(await h.count("records")).toBe(records);
    } finally {
      await other.close();
    }
  });

  it("answers 409 idempotency_key_in_use for the same request still in flight elsewhere", async () => {
    const key = "in-flight-elsewhere";
    const request = { body: body(h, "S4"), idempotencyKey: key };
    // Reserve the key exactly as the other process would for this very request.
    const other = await openStore({ ...h.storeOptions, sync: "normal" });
    try {
      await reserveIdempotencyKey(other.db, { livemode: 0, apiKeyId: await keyIdOf(h.keys.write) }, {
        key,
        fingerprint: requestFingerprint("POST", "/v1/attendance", request.body),
        now: new Date().toISOString(),
        staleBefore: new Date(Date.now() - 60_000).toISOString(),
      });
      const records = await h.count("records");
      const res = await h.request("POST", "/v1/attendance", request);
      expect(res.status).toBe(409);
      expect(res.body.error).toMatchObject({ type: "idempotency_error", code: "idempotency_key_in_use" });
      expect(res.headers.get("retry-after")).toBe("1");
      expect(await h.count("records")).toBe(records);
    } finally {
      await other.close();
    }
  });

  it("keeps test-mode and live-mode keys apart", async () => {
    const key = "same-key-both-modes";
    const test = await h.request("POST", "/v1/attendance", { body: body(h, "S4", "late"), idempotencyKey: key });
    expect(test.status).toBe(201);
    const liveSessions = await h.server.store.db.selectFrom("sessions").select("id").where("livemode", "=", 1).orderBy("starts_at").execute();
    const live = await h.request("POST", "/v1/attendance", {
      key: h.keys.liveWrite,
      body: { session_id: liveSessions[0]!.id, external_id: "S4", status: "late" },
      idempotencyKey: key,
    });
    expect(live.status).toBe(201);
    expect(live.body.livemode).toBe(true);
  });

  it("serves a stored answer only to the API key that stored it: another key's same Idempotency-Key runs on its own", async () => {
    const key = "same-key-two-api-keys";
    const first = await h.request("POST", "/v1/attendance", { body: { session_id: h.sessions.art, external_id: "S6", status: "present" }, idempotencyKey: key });
    expect(first.status).toBe(201);
    const otherKey = (await createApiKey(h.server.store.db, { mode: "test", scopes: ["attendance:write"], user: "Mr Okafor" })).secret;
    const other = await h.request("POST", "/v1/attendance", { key: otherKey, body: { session_id: h.sessions.art, external_id: "S6", status: "present" }, idempotencyKey: key });
    // Its own execution: the record exists, so its create is refused; nothing of the first answer.
    expect(other.headers.get("idempotent-replayed")).toBeNull();
    expect(other.status).toBe(409);
    expect(other.body.error.code).toBe("record_exists");
    // The first key's retry still gets its own answer.
    const retry = await h.request("POST", "/v1/attendance", { body: { session_id: h.sessions.art, external_id: "S6", status: "present" }, idempotencyKey: key });
    expect(retry.headers.get("idempotent-replayed")).toBe("true");
    expect(retry.body).toEqual(first.body);
  });
});

describe("an answer that showed a secret once", () => {
  it("is replayed without the secret, naming the field it withheld, and the secret is not stored", async () => {
    const webhooksKey = (await createApiKey(h.server.store.db, { mode: "test", scopes: ["webhooks:write"] })).secret;
    const request = { key: webhooksKey, body: { url: "http://127.0.0.1:9/hook", enabled_events: ["*"] }, idempotencyKey: "endpoint-with-secret" };
    const first = await h.request("POST", "/v1/webhook_endpoints", request);
    expect(first.status).toBe(201);
    expect(first.body.secret).toMatch(/^whsec_/);
    const retry = await h.request("POST", "/v1/webhook_endpoints", request);
    expect(retry.status).toBe(201);
    expect(retry.headers.get("idempotent-replayed")).toBe("true");
    expect(retry.headers.get("idempotent-withheld")).toBe("secret");
    expect(retry.body).toEqual({ ...first.body, secret: null });
    const stored = await h.server.store.db.selectFrom("idempotency_keys").select("response_body").where("key", "=", "endpoint-with-secret").execute();
    expect(stored).toHaveLength(1);
    expect(stored[0]!.response_body).not.toContain(first.body.secret);
  });
});
