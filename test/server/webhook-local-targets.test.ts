// Local test webhooks by opt-in (issue 28, row 3): a test-mode endpoint reaches loopback and
// private addresses only when the operator allows local test targets (BADGEBENCH_WEBHOOK_LOCAL_
// TEST_TARGETS=1, on for `serve --demo` and in the test suite); otherwise it obeys the live
// address rules, and a test delivery never returns what a local service answered.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiKey } from "../../server/services/api-keys.ts";
import { shownResult } from "../../server/webhooks/delivery-worker.ts";
import { resolveWebhookConfig, webhookConfigFromEnv, WebhookConfigError } from "../../server/webhooks/webhook-config.ts";
import { serve, stop, tempDirs } from "./cli-process.ts";
import { startHarness, type Harness } from "./harness.ts";
import { namesResolver, startReceiver, type Receiver } from "./webhook-receiver.ts";

const tempDir = tempDirs("local-targets");
const SETTING = "BADGEBENCH_WEBHOOK_LOCAL_TEST_TARGETS";

// A test DNS whose one moving name can be pointed anywhere between two requests.
const names: Record<string, string> = {
  "public.example.test": "93.184.216.34",
  "lan.example.test": "192.168.1.20",
  "metadata.example.test": "169.254.169.254",
};
const resolver = namesResolver(names);

async function withHarness(localTestTargets: boolean, work: (h: Harness, keys: { test: string; live: string }) => Promise<void>) {
  const h = await startHarness({ webhooks: { resolve: resolver, localTestTargets } });
  try {
    const test = (await createApiKey(h.server.store.db, { mode: "test", scopes: ["webhooks:write"] })).secret;
    const live = (await createApiKey(h.server.store.db, { mode: "live", scopes: ["webhooks:write"] })).secret;
    await work(h, { test, live });
  } finally {
    await h.close();
  }
}

let receiver: Receiver;
beforeAll(async () => {
  receiver = await startReceiver();
  receiver.answer = () => ({ status: 200, body: "internal admin page: secret things" });
});
afterAll(() => receiver.close());

const endpoint = (url: string) => ({ url, enabled_events: ["*"] });

describe("without the setting (the default outside --demo)", () => {
  it("refuses test endpoints on loopback and private addresses, naming the setting, and creates nothing", async () => {
    await withHarness(false, async (h, keys) => {
      for (const url of [receiver.url, "http://[::1]:9/", "http://10.0.0.1/", "http://lan.example.test/hooks"]) {
        const res = await h.request("POST", "/v1/webhook_endpoints", { key: keys.test, body: endpoint(url) });
        expect(res.status, url).toBe(400);
        expect(res.body.error).toMatchObject({ code: "url_refused", param: "url" });
        expect(res.body.error.message).toContain(`test endpoints may reach public addresses only, unless the operator sets ${SETTING}=1`);
      }
      expect(await h.server.store.db.selectFrom("webhook_endpoints").select("id").execute()).toEqual([]);
    });
  });

  it("a test delivery to a name that now resolves to loopback reaches nothing and returns no excerpt", async () => {
    names["moving.example.test"] = "93.184.216.34";
    await withHarness(false, async (h, keys) => {
      const port = new URL(receiver.url).port;
      const created = await h.request("POST", "/v1/webhook_endpoints", { key: keys.test, body: endpoint(`http://moving.example.test:${port}/hooks`) });
      expect(created.status).toBe(201);
      names["moving.example.test"] = "127.0.0.1";
      const before = receiver.deliveries.length;
      const res = await h.request("POST", `/v1/webhook_endpoints/${created.body.id}/test`, { key: keys.test, body: { type: "attendance.recorded" } });
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ delivered: false, status_code: null, response_body_excerpt: null });
      expect(res.body.error).toContain("127.0.0.1 is a loopback address");
      expect(receiver.deliveries.length).toBe(before);
    });
  });

  it("keeps no answer from an http test endpoint, which the live rules would refuse", () => {
    const answered = { statusCode: 200, error: null, durationMs: 3, responseExcerpt: "internal admin page", retryAfterMs: null };
    const off = resolveWebhookConfig({ localTestTargets: false });
    expect(shownResult(answered, { livemode: 0, url: "http://public.example.test/hooks" }, off).responseExcerpt).toBeNull();
    expect(shownResult(answered, { livemode: 0, url: "https://public.example.test/hooks" }, off).responseExcerpt).toBe("internal admin page");
    const on = resolveWebhookConfig({ localTestTargets: true });
    expect(shownResult(answered, { livemode: 0, url: "http://public.example.test/hooks" }, on).responseExcerpt).toBe("internal admin page");
  });
});

describe("with the setting", () => {
  it("lets test endpoints reach loopback and private receivers and shows their answer; live endpoints and the metadata address stay refused", async () => {
    await withHarness(true, async (h, keys) => {
      const created = await h.request("POST", "/v1/webhook_endpoints", { key: keys.test, body: endpoint(receiver.url) });
      expect(created.status).toBe(201);
      const res = await h.request("POST", `/v1/webhook_endpoints/${created.body.id}/test`, { key: keys.test, body: { type: "attendance.recorded" } });
      expect(res.body).toMatchObject({ delivered: true, status_code: 200, response_body_excerpt: "internal admin page: secret things" });
      expect((await h.request("POST", "/v1/webhook_endpoints", { key: keys.test, body: endpoint("http://lan.example.test/hooks") })).status).toBe(201);

      for (const [key, url] of [
        [keys.test, "http://metadata.example.test/"],
        [keys.live, "https://lan.example.test/hooks"],
        [keys.live, "https://127.0.0.1/hooks"],
      ] as const) {
        const refused = await h.request("POST", "/v1/webhook_endpoints", { key, body: endpoint(url) });
        expect(refused.status, url).toBe(400);
        expect(refused.body.error.code).toBe("url_refused");
      }
    });
  });

  it(`is read from ${SETTING}: 1 or 0, anything else is one clear error`, () => {
    expect(webhookConfigFromEnv({ [SETTING]: "1" })).toEqual({ localTestTargets: true });
    expect(webhookConfigFromEnv({ [SETTING]: "0" })).toEqual({ localTestTargets: false });
    expect(() => webhookConfigFromEnv({ [SETTING]: "yes" })).toThrow(new WebhookConfigError(`${SETTING} must be 1 (allow) or 0 (refuse) (got 'yes')`));
  });
});

describe("badgebench serve", () => {
  it("allows local test targets with --demo and not without it", async () => {
    const dir = tempDir("demo");
    const demo = await serve(["--demo", "--data", dir]);
    const demoKey = /sk_test_[A-Za-z0-9_-]+/.exec(demo.stderr())![0];
    const create = (url: string) =>
      fetch(`${url}/v1/webhook_endpoints`, {
        method: "POST",
        headers: { authorization: `Bearer ${demoKey}`, "content-type": "application/json", "idempotency-key": `local-${url}` },
        body: JSON.stringify(endpoint(receiver.url)),
      });
    try {
      expect((await create(demo.url)).status).toBe(201);
    } finally {
      await stop(demo);
    }
    const plain = await serve(["--data", dir]);
    try {
      const refused = await create(plain.url);
      expect(refused.status).toBe(400);
      expect(((await refused.json()) as { error: { message: string } }).error.message).toContain(`${SETTING}=1`);
    } finally {
      await stop(plain);
    }
  });
});
