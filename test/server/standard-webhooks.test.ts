// Standard Webhooks 1.0 on real deliveries: each one is checked with the `standardwebhooks`
// package (a third-party implementation), with a check written here from the specification's
// text, and its X-Service-Signature with the receiver's `verifySignature` (SPEC 5), secret
// rotation included. A rolled secret's grace period is an hour, ended in the store by the test
// that needs it over (a delivery on a busy machine may come later than any short period).
import { createHmac } from "node:crypto";
import { Webhook, WebhookVerificationError } from "standardwebhooks";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { createApiKey } from "../../server/services/api-keys.ts";
import type { Resolver } from "../../server/webhooks/address-guard.ts";
import { verifySignature } from "../../server/webhooks/signature.ts";
import { mark, startHarness, type Harness } from "./harness.ts";
import { checkWebhookPayload } from "./openapi-check.ts";
import { endGracePeriod, startReceiver, type Delivery, type Receiver } from "./webhook-receiver.ts";

const resolver: Resolver = async () => [{ address: "127.0.0.1", family: 4 }];

let h: Harness;
let key: string;
let standing: { id: string; status: string };
const receivers: Receiver[] = [];
beforeAll(async () => {
  h = await startHarness({ webhooks: { resolve: resolver, retryScheduleMs: [40], jitter: 0, timeoutMs: 300, leaseMs: 1000, secretGraceMs: 3_600_000, pollMs: 50 } });
  key = (await createApiKey(h.server.store.db, { mode: "test", scopes: ["webhooks:write", "attendance:write"] })).secret;
  standing = await mark(h, h.sessions.math2, "S5", "present", key);
});
afterEach(async () => {
  for (const e of await h.server.store.db.selectFrom("webhook_endpoints").select("id").execute()) {
    await h.server.store.db.deleteFrom("webhook_endpoints").where("id", "=", e.id).execute();
  }
  while (receivers.length) await receivers.pop()!.close();
  vi.useRealTimers();
});
afterAll(() => h.close());

async function endpointWithReceiver() {
  const receiver = await startReceiver();
  receivers.push(receiver);
  const res = await h.request("POST", "/v1/webhook_endpoints", { key, body: { url: receiver.url, enabled_events: ["*"] } });
  expect(res.status).toBe(201);
  return { receiver, endpoint: res.body as { id: string; secret: string } };
}

/** One event: a correction of the standing record (present <-> late). */
async function newEvent() {
  standing.status = standing.status === "present" ? "late" : "present";
  const res = await h.request("PATCH", `/v1/attendance/${standing.id}`, { key, body: { status: standing.status, reason: "standard webhooks" } });
  expect(res.status).toBe(200);
}

/** The headers as the package takes them: one string each. */
function headersOf(delivery: Delivery): Record<string, string> {
  return Object.fromEntries(Object.entries(delivery.headers).map(([name, value]) => [name, String(value)]));
}

/**
 * Standard Webhooks 1.0, from its text: the signed content is `<webhook-id>.<webhook-timestamp>.<body>`;
 * the key is the base64 decoding of the secret without its `whsec_` prefix; the header holds
 * space-separated `v1,<base64 HMAC-SHA256>` signatures. Returns which secrets signed, by index.
 */
function specSignedBy(delivery: Delivery, secrets: string[]): { signedBy: number[]; signatureCount: number } {
  const headers = headersOf(delivery);
  const signatures = headers["webhook-signature"]!.split(" ");
  const content = Buffer.concat([Buffer.from(`${headers["webhook-id"]}.${headers["webhook-timestamp"]}.`), delivery.raw]);
  const signedBy = secrets
    .map((secret, i) => {
      const expected = createHmac("sha256", Buffer.from(secret.slice("whsec_".length), "base64")).update(content).digest("base64");
      return signatures.includes(`v1,${expected}`) ? i : -1;
    })
    .filter((i) => i >= 0);
  return { signedBy, signatureCount: signatures.length };
}

describe("Standard Webhooks headers on every delivery", () => {
  it("carry the event id, the attempt's timestamp and a v1 signature that the standardwebhooks package accepts", async () => {
    const { receiver, endpoint } = await endpointWithReceiver();
    expect(endpoint.secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    await newEvent();
    await receiver.waitFor((d) => d.length === 1);
    const delivery = receiver.deliveries[0]!;
    const headers = headersOf(delivery);
    expect(headers["webhook-id"]).toBe(delivery.event.id);
    expect(headers["webhook-timestamp"]).toMatch(/^\d+$/);
    expect(headers["webhook-signature"]).toMatch(/^v1,[A-Za-z0-9+/]{43}=$/);
    expect(new Webhook(endpoint.secret).verify(delivery.raw.toString("utf8"), headers)).toEqual(delivery.event);
    expect(specSignedBy(delivery, [endpoint.secret])).toEqual({ signedBy: [0], signatureCount: 1 });
    // The same secret string verifies SPEC 5's header, signed at the same moment.
    expect(verifySignature(delivery.raw, headers["x-service-signature"], endpoint.secret)).toBe(Number(headers["webhook-timestamp"]));
    // The payload is what the OpenAPI document's webhooks section says this type carries.
    checkWebhookPayload(delivery.event);
    expect(() => checkWebhookPayload({ ...delivery.event, data: { ...delivery.event.data, reason: 7 } })).toThrow(/does not match/);
  });

  it("sign with both secrets, space-separated, while a rolled secret is in its grace period, then with the new one only", async () => {
    const { receiver, endpoint } = await endpointWithReceiver();
    const rolled = (await h.request("POST", `/v1/webhook_endpoints/${endpoint.id}/roll_secret`, { key })).body as { secret: string };
    await newEvent();
    await receiver.waitFor((d) => d.length === 1);
    const during = receiver.deliveries[0]!;
    expect(specSignedBy(during, [endpoint.secret, rolled.secret])).toEqual({ signedBy: [0, 1], signatureCount: 2 });
    for (const secret of [endpoint.secret, rolled.secret]) {
      expect(new Webhook(secret).verify(during.raw.toString("utf8"), headersOf(during))).toEqual(during.event);
      verifySignature(during.raw, headersOf(during)["x-service-signature"], secret);
    }
    await endGracePeriod(h.server.store.db, endpoint.id);
    await newEvent();
    await receiver.waitFor((d) => d.length === 2);
    const after = receiver.deliveries[1]!;
    expect(specSignedBy(after, [endpoint.secret, rolled.secret])).toEqual({ signedBy: [1], signatureCount: 1 });
    expect(new Webhook(rolled.secret).verify(after.raw.toString("utf8"), headersOf(after))).toEqual(after.event);
    expect(() => new Webhook(endpoint.secret).verify(after.raw.toString("utf8"), headersOf(after))).toThrow(WebhookVerificationError);
  });

  it("sign with a secret issued in base64url before Standard Webhooks, which the package takes rewritten as the README says", async () => {
    const { receiver, endpoint } = await endpointWithReceiver();
    // A secret of the old format, with both characters base64url has and base64 has not.
    const oldSecret = `whsec_${Buffer.from("fbff".repeat(16), "hex").toString("base64url")}`;
    expect(oldSecret).toMatch(/[-_]/);
    await h.server.store.db.updateTable("webhook_endpoints").set({ secret: oldSecret }).where("id", "=", endpoint.id).execute();
    await newEvent();
    await receiver.waitFor((d) => d.length === 1);
    const delivery = receiver.deliveries[0]!;
    const rewritten = `whsec_${oldSecret.slice("whsec_".length).replaceAll("-", "+").replaceAll("_", "/")}=`;
    expect(new Webhook(rewritten).verify(delivery.raw.toString("utf8"), headersOf(delivery))).toEqual(delivery.event);
    verifySignature(delivery.raw, headersOf(delivery)["x-service-signature"], oldSecret);
  });

  it("are on test deliveries too", async () => {
    const { receiver, endpoint } = await endpointWithReceiver();
    const res = await h.request("POST", `/v1/webhook_endpoints/${endpoint.id}/test`, { key, body: { type: "attendance.recorded" } });
    expect(res.body.delivered).toBe(true);
    const delivery = receiver.deliveries[0]!;
    expect(headersOf(delivery)["webhook-id"]).toBe(res.body.event.id);
    checkWebhookPayload(delivery.event);
    expect(new Webhook(endpoint.secret).verify(delivery.raw.toString("utf8"), headersOf(delivery))).toEqual(delivery.event);
  });

  it("are refused by a receiver once the timestamp is 301 s old, and by SPEC 5's check too", async () => {
    const { receiver, endpoint } = await endpointWithReceiver();
    await newEvent();
    await receiver.waitFor((d) => d.length === 1);
    const delivery = receiver.deliveries[0]!;
    const signedAt = Number(headersOf(delivery)["webhook-timestamp"]);
    // The receiver's clock, 300 s and then 301 s after the signature: the package reads Date.now().
    vi.useFakeTimers({ toFake: ["Date"], now: (signedAt + 300) * 1000 });
    expect(new Webhook(endpoint.secret).verify(delivery.raw.toString("utf8"), headersOf(delivery))).toEqual(delivery.event);
    vi.setSystemTime((signedAt + 301) * 1000);
    expect(() => new Webhook(endpoint.secret).verify(delivery.raw.toString("utf8"), headersOf(delivery))).toThrow(/timestamp too old/i);
    expect(() => verifySignature(delivery.raw, headersOf(delivery)["x-service-signature"], endpoint.secret, { now: signedAt + 301 })).toThrow(/more than 300 s/);
  });

  it("a body changed in transit fails the package's check", async () => {
    const { receiver, endpoint } = await endpointWithReceiver();
    await newEvent();
    await receiver.waitFor((d) => d.length === 1);
    const delivery = receiver.deliveries[0]!;
    const tampered = delivery.raw.toString("utf8").replace(/"livemode":false/, '"livemode":true');
    expect(tampered).not.toBe(delivery.raw.toString("utf8"));
    expect(() => new Webhook(endpoint.secret).verify(tampered, headersOf(delivery))).toThrow(WebhookVerificationError);
  });
});
