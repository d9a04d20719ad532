// Every tunable of webhook delivery, with the defaults production runs on. Tests and the
// benchmark pass smaller numbers (compressed time); `badgebench serve` reads the
// BADGEBENCH_WEBHOOK_* environment variables (root README, configuration table).
import { systemResolver, type Resolver } from "./address-guard.ts";

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;

export interface WebhookConfig {
  /**
   * Delays before each retry, after the first attempt (which is immediate). Standard Webhooks'
   * schedule, the last step shortened so all ten attempts fit in 3 days.
   */
  retryScheduleMs: number[];
  /** each delay is shortened by up to this fraction at random, so retries of many events spread out */
  jitter: number;
  /** one attempt: connect, send, status line and a 4 KiB excerpt of the answer */
  timeoutMs: number;
  /** how long a claimed delivery stays with its worker; longer than timeoutMs, so only a dead worker loses it */
  leaseMs: number;
  /** after a secret roll, the old secret keeps signing (a second v1) for this long */
  secretGraceMs: number;
  /** the worker looks for work this often even when nothing woke it (commits by other processes) */
  pollMs: number;
  /** attempts in flight at once, over all endpoints */
  concurrency: number;
  /** attempts in flight at once to one endpoint, so one slow receiver cannot take every slot */
  perEndpointConcurrency: number;
  /**
   * Deliveries per second while requests keep the server busy (server-load.ts): the share that
   * keeps a backlog moving without slowing the requests; at full speed again once the load eases.
   */
  busyRate: number;
  /** how endpoint host names are resolved (injectable so tests can make a name point anywhere) */
  resolve: Resolver;
  /**
   * Lets test-mode endpoints reach loopback and private (RFC 1918, unique local) addresses, and
   * keeps what such a receiver answers: a receiver on this machine or the LAN while developing.
   * Off by default, since any test key with the webhook scope could otherwise read (and
   * port-scan) services on the server's own network through a test delivery's answer excerpt;
   * on for `badgebench serve --demo` and in the test suite. BADGEBENCH_WEBHOOK_LOCAL_TEST_TARGETS.
   */
  localTestTargets: boolean;
  /**
   * Test-only: lets live endpoints point at loopback so tests can run live delivery on this
   * machine. No flag or environment variable sets it.
   */
  allowLoopbackForLive: boolean;
  /** extra CA certificates for https endpoints (a private CA; the tests' self-signed one) */
  ca?: string;
}

export const DEFAULT_WEBHOOK_CONFIG: WebhookConfig = {
  retryScheduleMs: [5 * SECOND, 5 * MINUTE, 30 * MINUTE, 2 * HOUR, 5 * HOUR, 10 * HOUR, 14 * HOUR, 20 * HOUR, 20 * HOUR],
  jitter: 0.1,
  timeoutMs: 15 * SECOND,
  leaseMs: 60 * SECOND,
  secretGraceMs: 24 * HOUR,
  pollMs: 500,
  concurrency: 64,
  perEndpointConcurrency: 8,
  busyRate: 200,
  resolve: systemResolver,
  localTestTargets: false,
  allowLoopbackForLive: false,
};

export class WebhookConfigError extends Error {
  override name = "WebhookConfigError";
}

export function resolveWebhookConfig(overrides: Partial<WebhookConfig> = {}): WebhookConfig {
  const config = { ...DEFAULT_WEBHOOK_CONFIG, ...overrides };
  const positive = (name: keyof WebhookConfig) => {
    const value = config[name];
    if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) {
      throw new WebhookConfigError(`webhook option ${name} must be a positive number (got ${String(value)})`);
    }
  };
  for (const name of ["timeoutMs", "leaseMs", "secretGraceMs", "pollMs", "concurrency", "perEndpointConcurrency", "busyRate"] as const) positive(name);
  if (config.retryScheduleMs.some((d) => !Number.isFinite(d) || d < 0)) {
    throw new WebhookConfigError(`webhook option retryScheduleMs must list delays of 0 ms or more (got ${config.retryScheduleMs.join(",")})`);
  }
  if (!(config.jitter >= 0 && config.jitter < 1)) throw new WebhookConfigError(`webhook option jitter must be from 0 to below 1 (got ${config.jitter})`);
  if (config.leaseMs <= config.timeoutMs) {
    throw new WebhookConfigError(`webhook option leaseMs (${config.leaseMs}) must be longer than timeoutMs (${config.timeoutMs})`);
  }
  return config;
}

const ENV_NUMBERS = {
  BADGEBENCH_WEBHOOK_TIMEOUT_MS: ["timeoutMs", "milliseconds"],
  BADGEBENCH_WEBHOOK_LEASE_MS: ["leaseMs", "milliseconds"],
  BADGEBENCH_WEBHOOK_SECRET_GRACE_MS: ["secretGraceMs", "milliseconds"],
  BADGEBENCH_WEBHOOK_POLL_MS: ["pollMs", "milliseconds"],
  BADGEBENCH_WEBHOOK_BUSY_RATE: ["busyRate", "deliveries per second"],
} as const;

/** The BADGEBENCH_WEBHOOK_* variables, as overrides; a malformed value is an error, not a default. */
export function webhookConfigFromEnv(env: NodeJS.ProcessEnv = process.env): Partial<WebhookConfig> {
  const overrides: Partial<WebhookConfig> = {};
  const number = (name: string, value: string, unit = "milliseconds") => {
    if (!/^\d+(\.\d+)?$/.test(value.trim())) throw new WebhookConfigError(`${name} must be a number of ${unit} (got '${value}')`);
    return Number(value);
  };
  for (const [name, [option, unit]] of Object.entries(ENV_NUMBERS)) {
    const value = env[name];
    if (value !== undefined && value !== "") overrides[option] = number(name, value, unit);
  }
  const local = env.BADGEBENCH_WEBHOOK_LOCAL_TEST_TARGETS;
  if (local !== undefined && local !== "") {
    if (local !== "1" && local !== "0") throw new WebhookConfigError(`BADGEBENCH_WEBHOOK_LOCAL_TEST_TARGETS must be 1 (allow) or 0 (refuse) (got '${local}')`);
    overrides.localTestTargets = local === "1";
  }
  const schedule = env.BADGEBENCH_WEBHOOK_RETRY_SCHEDULE_MS;
  if (schedule !== undefined) {
    // An empty list is no retries at all (one attempt), as the configuration table says.
    overrides.retryScheduleMs = schedule.trim() === "" ? [] : schedule.split(",").map((part) => number("BADGEBENCH_WEBHOOK_RETRY_SCHEDULE_MS", part));
  }
  return overrides;
}
