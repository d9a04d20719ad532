// The webhook settings serve reads from the environment (the README's configuration table).
import { describe, expect, it } from "vitest";
import { resolveWebhookConfig, WebhookConfigError, webhookConfigFromEnv } from "../../server/webhooks/webhook-config.ts";

describe("webhook settings from the environment", () => {
  it("reads a retry schedule, and an empty one as no retries (one attempt)", () => {
    expect(webhookConfigFromEnv({ BADGEBENCH_WEBHOOK_RETRY_SCHEDULE_MS: "50, 100,200" }).retryScheduleMs).toEqual([50, 100, 200]);
    expect(webhookConfigFromEnv({ BADGEBENCH_WEBHOOK_RETRY_SCHEDULE_MS: "" }).retryScheduleMs).toEqual([]);
    expect(webhookConfigFromEnv({}).retryScheduleMs).toBeUndefined();
  });

  it("refuses a value that is not milliseconds, naming the variable", () => {
    expect(() => webhookConfigFromEnv({ BADGEBENCH_WEBHOOK_RETRY_SCHEDULE_MS: "5s" })).toThrow(WebhookConfigError);
    expect(() => webhookConfigFromEnv({ BADGEBENCH_WEBHOOK_TIMEOUT_MS: "soon" })).toThrow(/BADGEBENCH_WEBHOOK_TIMEOUT_MS/);
  });

  it("reads the busy delivery rate in deliveries per second, and refuses one that is not a positive number", () => {
    expect(webhookConfigFromEnv({ BADGEBENCH_WEBHOOK_BUSY_RATE: "50" }).busyRate).toBe(50);
    expect(resolveWebhookConfig(webhookConfigFromEnv({})).busyRate).toBe(200);
    expect(() => webhookConfigFromEnv({ BADGEBENCH_WEBHOOK_BUSY_RATE: "fast" })).toThrow("BADGEBENCH_WEBHOOK_BUSY_RATE must be a number of deliveries per second (got 'fast')");
    expect(() => resolveWebhookConfig(webhookConfigFromEnv({ BADGEBENCH_WEBHOOK_BUSY_RATE: "0" }))).toThrow(/busyRate must be a positive number/);
  });
});
