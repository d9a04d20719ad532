// Slow clients (issue 28, row 5): connections that dribble a request head are closed within the
// head timeout while everyone else is served; a slow body is cut at the request timeout; past the
// connection cap a new connection is refused until slow ones are shed. Bounds are generous (the
// timeout plus 10 s) so a busy machine passes; before the limits, node waited 60 s for a head.
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CONNECTION_LIMITS } from "../../server/http/connection-limits.ts";
import { sendRaw } from "./fuzz-http.ts";
import { startHarness, type Harness } from "./harness.ts";

const SLACK_MS = 10_000;

interface SlowConnection {
  connected: Promise<void>;
  /** resolves with what the server sent before it closed the connection */
  closed: Promise<string>;
  stop(): void;
}

/** Connects and sends `head`, then one byte of `dribble` a second, forever. */
function slowConnection(url: string, head: string, dribble: string): SlowConnection {
  const { hostname, port } = new URL(url);
  const socket = net.connect(Number(port), hostname);
  let received = "";
  socket.on("data", (data: Buffer) => (received += data.toString("latin1")));
  socket.on("error", () => {});
  const connected = new Promise<void>((resolve) => socket.once("connect", () => resolve()));
  socket.write(head);
  let next = 0;
  const timer = setInterval(() => socket.write(dribble[next++ % dribble.length]!), 1_000);
  const closed = new Promise<string>((resolve) =>
    socket.once("close", () => {
      clearInterval(timer);
      resolve(received);
    }),
  );
  return { connected, closed, stop: () => socket.destroy() };
}

/** Rejects after `ms`: the bound a test's wait must end within. */
const deadline = (ms: number, what: string) =>
  new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`${what} not within ${ms} ms`)), ms).unref());

describe("with the default limits", () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness();
  });
  afterAll(() => h.close());

  it("closes 50 connections dribbling a request head a byte a second within the head timeout, serving other requests meanwhile", async () => {
    const slow = Array.from({ length: 50 }, () => slowConnection(h.url, "GET /v1/attendance HTTP/1.1\r\nHost: badgebench\r\nX-Slow: ", "abcdef"));
    const allClosed = Promise.all(slow.map((c) => c.closed));
    let shed = false;
    void allClosed.then(() => (shed = true));
    const statuses: number[] = [];
    try {
      const served = (async () => {
        while (!shed) {
          statuses.push((await h.request("GET", "/v1/attendance?limit=1", { key: h.keys.read })).status);
          await new Promise((resolve) => setTimeout(resolve, 500));
        }
      })();
      const answers = await Promise.race([allClosed, deadline(CONNECTION_LIMITS.headersTimeoutMs + SLACK_MS, "the slow connections closed")]);
      await served;
      for (const answer of answers) expect(answer).toMatch(/^HTTP\/1\.1 408 /);
      expect(statuses.length).toBeGreaterThan(0);
      expect(statuses.every((status) => status === 200)).toBe(true);
    } finally {
      for (const c of slow) c.stop();
    }
  }, CONNECTION_LIMITS.headersTimeoutMs + 2 * SLACK_MS);
});

describe("with a cap of 10 connections and short timeouts", () => {
  const limits = { maxConnections: 10, headersTimeoutMs: 2_000, requestTimeoutMs: 3_000 };
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness({ connections: limits });
  });
  afterAll(() => h.close());

  it("cuts a body sent a byte a second at the request timeout, with a valid key", async () => {
    const head = `POST /v1/attendance HTTP/1.1\r\nHost: badgebench\r\nAuthorization: Bearer ${h.keys.write}\r\nContent-Type: application/json\r\nIdempotency-Key: slow-body\r\nContent-Length: 1000\r\n\r\n`;
    const slow = slowConnection(h.url, head, '{"session_id": ');
    try {
      const answer = await Promise.race([slow.closed, deadline(limits.requestTimeoutMs + SLACK_MS, "the slow body cut")]);
      expect(answer).toMatch(/^HTTP\/1\.1 408 /);
    } finally {
      slow.stop();
    }
  }, limits.requestTimeoutMs + 2 * SLACK_MS);

  it("refuses a connection past the cap, and serves again once the slow ones are shed", async () => {
    const slow = Array.from({ length: limits.maxConnections }, () => slowConnection(h.url, "GET / HTTP/1.1\r\nX-Slow: ", "abc"));
    try {
      await Promise.all(slow.map((c) => c.connected));
      // Each attempt is a new connection (sendRaw): one may land before node accepted all ten;
      // at the cap the server closes it unanswered.
      const request = { method: "GET", path: "/v1/attendance?limit=1", headers: [["Authorization", `Bearer ${h.keys.read}`]] as [string, string][], body: undefined };
      await expect(async () => {
        for (;;) await sendRaw(h.url, request);
      }).rejects.toThrow(/socket hang up|ECONNRESET/);
      await Promise.race([Promise.all(slow.map((c) => c.closed)), deadline(limits.headersTimeoutMs + SLACK_MS, "the slow connections closed")]);
      expect((await h.request("GET", "/v1/attendance?limit=1", { key: h.keys.read })).status).toBe(200);
    } finally {
      for (const c of slow) c.stop();
    }
  }, limits.headersTimeoutMs + 2 * SLACK_MS);
});
