// One HTTP attempt: POST the raw body, never follow a redirect, stop at the per-attempt
// timeout, and read at most a small excerpt of the answer (a receiver that sends 50 MB back
// costs us 4 KiB and a closed socket). Only the status decides success; the caller logs it.
import http from "node:http";
import https from "node:https";
import net from "node:net";
import { addressRefusal, checkHost, guardedLookup, type AddressPolicy, type Resolver } from "./address-guard.ts";

export const RESPONSE_EXCERPT_BYTES = 4096;

export interface SenderOptions {
  resolve: Resolver;
  timeoutMs: number;
  /** extra certificate authorities to trust for https endpoints (tests use a self-signed one) */
  ca?: string | Buffer;
  /** sockets per endpoint origin kept open between attempts */
  maxSocketsPerOrigin: number;
}

export interface AttemptResult {
  durationMs: number;
  statusCode: number | null;
  /** why the attempt failed before an HTTP status arrived (refused address, timeout, reset) */
  error: string | null;
  responseExcerpt: string | null;
  /** the receiver's Retry-After, in ms, when it sent one */
  retryAfterMs: number | null;
}

/** Retry-After is either delay-seconds or an HTTP date (RFC 9110 10.2.3). */
export function parseRetryAfter(value: string | undefined, now = Date.now()): number | null {
  if (!value) return null;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const date = Date.parse(value);
  return Number.isNaN(date) ? null : Math.max(0, date - now);
}

export class WebhookSender {
  readonly #options: SenderOptions;
  readonly #agents = new Map<string, { http: http.Agent; https: https.Agent }>();

  constructor(options: SenderOptions) {
    this.#options = options;
  }

  #agentsFor(policy: AddressPolicy) {
    const key = `${policy.allowLoopback ? "loopback" : "public"}-${policy.allowPrivate ? "private" : "public"}`;
    let agents = this.#agents.get(key);
    if (!agents) {
      const lookup = guardedLookup(policy, this.#options.resolve);
      const common = { keepAlive: true, maxSockets: this.#options.maxSocketsPerOrigin, lookup };
      agents = { http: new http.Agent(common), https: new https.Agent({ ...common, ca: this.#options.ca }) };
      this.#agents.set(key, agents);
    }
    return agents;
  }

  /** Sends one attempt; never throws: every failure is a result. */
  async send(url: string, body: string, headers: Record<string, string>, policy: AddressPolicy): Promise<AttemptResult> {
    const started = performance.now();
    const failed = (error: string): AttemptResult => ({
      durationMs: Math.round(performance.now() - started),
      statusCode: null,
      error,
      responseExcerpt: null,
      retryAfterMs: null,
    });
    let target: URL;
    try {
      target = new URL(url);
    } catch {
      return failed(`not a URL: ${url}`);
    }
    // Node skips the lookup for an IP address in the URL, so the guard checks it here.
    const literal = target.hostname.startsWith("[") ? target.hostname.slice(1, -1) : target.hostname;
    const refusal = net.isIP(literal) ? addressRefusal(literal, policy) : null;
    if (refusal) return failed(`refused: ${refusal}`);
    const agents = this.#agentsFor(policy);
    const secure = target.protocol === "https:";
    return new Promise<AttemptResult>((resolve) => {
      let settled = false;
      const finish = (result: AttemptResult) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(result);
      };
      const request = (secure ? https : http).request(
        target,
        {
          method: "POST",
          agent: secure ? agents.https : agents.http,
          headers: { ...headers, "content-type": "application/json", "content-length": Buffer.byteLength(body), "user-agent": "badgebench-webhooks/1" },
        },
        (response) => {
          const chunks: Buffer[] = [];
          let size = 0;
          const done = (truncated: boolean) => {
            const excerpt = Buffer.concat(chunks).subarray(0, RESPONSE_EXCERPT_BYTES).toString("utf8");
            if (truncated) response.destroy();
            finish({
              durationMs: Math.round(performance.now() - started),
              statusCode: response.statusCode ?? null,
              error: null,
              responseExcerpt: excerpt,
              retryAfterMs: parseRetryAfter(response.headers["retry-after"]),
            });
          };
          response.on("data", (chunk: Buffer) => {
            if (size < RESPONSE_EXCERPT_BYTES) chunks.push(chunk);
            size += chunk.length;
            if (size > RESPONSE_EXCERPT_BYTES) done(true);
          });
          response.on("end", () => done(false));
          response.on("error", () => done(true));
          response.on("close", () => done(true));
        },
      );
      const timer = setTimeout(() => {
        request.destroy(new Error(`no answer within ${this.#options.timeoutMs} ms`));
      }, this.#options.timeoutMs);
      request.on("error", (error: NodeJS.ErrnoException) => finish(failed(error.code && !error.message.includes(error.code) ? `${error.code}: ${error.message}` : error.message)));
      request.end(body);
    });
  }

  /** Refuses a URL whose host is, or resolves to, an address the policy forbids. */
  checkUrl(url: URL, policy: AddressPolicy): Promise<void> {
    return checkHost(url.hostname, policy, this.#options.resolve);
  }

  close(): void {
    for (const agents of this.#agents.values()) {
      agents.http.destroy();
      agents.https.destroy();
    }
    this.#agents.clear();
  }
}
