// One delivery attempt, below the API: the address guard refuses before connecting, whether
// the URL names the address or a name resolves to it, and Retry-After is read in both forms.
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { addressRefusal, type Resolver } from "../../server/webhooks/address-guard.ts";
import { parseRetryAfter, WebhookSender } from "../../server/webhooks/webhook-sender.ts";
import { startReceiver, type Receiver } from "./webhook-receiver.ts";

const resolver: Resolver = async (host) => [{ address: host === "metadata.example.test" ? "169.254.169.254" : "127.0.0.1", family: 4 }];
const sender = new WebhookSender({ resolve: resolver, timeoutMs: 1000, maxSocketsPerOrigin: 2 });
afterAll(() => sender.close());

// Each test has a receiver of its own, so what one counts or reads was sent by that test alone.
const receivers: Receiver[] = [];
async function ownReceiver(): Promise<{ receiver: Receiver; port: string }> {
  const receiver = await startReceiver();
  receivers.push(receiver);
  return { receiver, port: new URL(receiver.url).port };
}
afterEach(async () => {
  while (receivers.length) await receivers.pop()!.close();
});

describe("WebhookSender", () => {
  const body = JSON.stringify({ id: "evt_1", type: "attendance.recorded" });

  it("refuses an IP address in the URL that the policy forbids, without connecting", async () => {
    const { receiver, port } = await ownReceiver();
    for (const url of [`http://127.0.0.1:${port}/hooks`, `http://[::1]:${port}/hooks`, `http://[::ffff:127.0.0.1]:${port}/hooks`]) {
      const result = await sender.send(url, body, {}, { allowLoopback: false, allowPrivate: false });
      expect(result.statusCode).toBeNull();
      expect(result.error).toMatch(/^refused: .*loopback/);
    }
    expect(receiver.connections()).toBe(0);
  });

  it("refuses a name resolving to a forbidden address inside the connection's lookup, without connecting", async () => {
    const { receiver, port } = await ownReceiver();
    const loopbackName = await sender.send(`http://hooks.example.test:${port}/hooks`, body, {}, { allowLoopback: false, allowPrivate: false });
    expect(loopbackName.error).toMatch(/hooks\.example\.test resolves to 127\.0\.0\.1 is a loopback address/);
    const metadata = await sender.send(`http://metadata.example.test:${port}/`, body, {}, { allowLoopback: true, allowPrivate: false });
    expect(metadata.error).toMatch(/169\.254\.169\.254 is a special-purpose address \(link-local/);
    expect(receiver.connections()).toBe(0);
  });

  it("delivers to loopback when the policy allows it", async () => {
    const { receiver, port } = await ownReceiver();
    const result = await sender.send(`http://hooks.example.test:${port}/hooks`, body, { "X-Service-Signature": "t=1,v1=00" }, { allowLoopback: true, allowPrivate: false });
    expect(result).toMatchObject({ statusCode: 200, error: null, responseExcerpt: "ok" });
    expect(receiver.deliveries).toHaveLength(1);
    expect(receiver.deliveries[0]!.raw.toString()).toBe(body);
    expect(receiver.deliveries[0]!.headers["x-service-signature"]).toBe("t=1,v1=00");
  });

  it("classifies addresses", () => {
    const policy = { allowLoopback: false, allowPrivate: false };
    for (const address of ["10.1.2.3", "172.31.0.1", "192.168.1.1", "100.127.255.254", "169.254.169.254", "0.0.0.0", "fd00:ec2::254", "fe80::1", "::", "224.0.0.1", "64:ff9b::a00:1"]) {
      expect(addressRefusal(address, policy), address).not.toBeNull();
    }
    for (const address of ["93.184.216.34", "8.8.8.8", "2606:4700::1111", "100.128.0.1", "172.32.0.1"]) {
      expect(addressRefusal(address, policy), address).toBeNull();
    }
  });

  it("reads Retry-After as seconds or as a date", () => {
    const now = Date.parse("2026-11-25T08:00:00Z");
    expect(parseRetryAfter("120", now)).toBe(120_000);
    expect(parseRetryAfter("Wed, 25 Nov 2026 08:01:00 GMT", now)).toBe(60_000);
    expect(parseRetryAfter("soon", now)).toBeNull();
    expect(parseRetryAfter(undefined, now)).toBeNull();
  });
});
