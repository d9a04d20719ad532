// A write that makes an event wakes the delivery worker once it has committed, on every route
// that writes events (the hot routes included, which run their steps without Express's app-level
// middleware): here the worker's poll is an hour, so only that wake can deliver within the test.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiKey } from "../../server/services/api-keys.ts";
import type { Resolver } from "../../server/webhooks/address-guard.ts";
import { lines, startBadgeHarness, type BadgeHarness } from "./badge-harness.ts";
import { startReceiver, type Receiver } from "./webhook-receiver.ts";

const resolveLocalhost: Resolver = async () => [{ address: "127.0.0.1", family: 4 }];

let h: BadgeHarness;
let receiver: Receiver;
beforeAll(async () => {
  h = await startBadgeHarness({ webhooks: { pollMs: 60 * 60 * 1000, resolve: resolveLocalhost } });
  receiver = await startReceiver();
  const webhooksKey = (await createApiKey(h.server.store.db, { mode: "test", scopes: ["webhooks:write"] })).secret;
  const created = await fetch(`${h.url}/v1/webhook_endpoints`, {
    method: "POST",
    headers: { authorization: `Bearer ${webhooksKey}`, "content-type": "application/json", "idempotency-key": "wake-endpoint" },
    body: JSON.stringify({ url: receiver.url, enabled_events: ["*"] }),
  });
  expect(created.status).toBe(201);
});
afterAll(async () => {
  await receiver.close();
  await h.close();
});

describe("the delivery worker is woken by the write that made the event", () => {
  it("by a badge sync's card tap (POST /api/badge/sync)", async () => {
    const tappedAt = Math.floor(Date.now() / 1000);
    const answer = await h.sync(h.devices.r1.token, lines("v=1", "sv=1.0.0", "bat=3.9", `tap=1|${h.cards[0]}|${tappedAt}`));
    expect(answer.all("A")).toEqual(["1"]);
    await receiver.waitFor((deliveries) => deliveries.some((d) => d.event.type === "attendance.recorded" && d.event.data.object.method === "device"));
  });

  it("by an API create (POST /v1/attendance)", async () => {
    const created = await fetch(`${h.url}/v1/attendance`, {
      method: "POST",
      headers: { authorization: `Bearer ${h.keys.write}`, "content-type": "application/json", "idempotency-key": "wake-create" },
      body: JSON.stringify({ session_id: h.sessions.mathOpen, external_id: "S4", status: "present" }),
    });
    expect(created.status).toBe(201);
    const { id } = await created.json();
    await receiver.waitFor((deliveries) => deliveries.some((d) => d.event.data.object.id === id));
  });
});
