// The fleet runner against several instances of one server, as a district runs several on one
// PostgreSQL database: each badge talks to one instance for its whole run, badge i to instance
// i mod n, and a burst of the wearers who ask (`ask.badges`) changes neither who asks nor how
// each badge ends. The two "instances" are TCP relays in front of one server, each noting the
// device tokens of the requests it carried (a badge's request is one HTTP/1.0 connection).
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runFleet, type FleetSummary } from "../../badge-sim/runners/fleet.ts";
import { startSimServer, type SimServer } from "../../scripts/harness/sim-server.ts";

const BADGES = 8;
const BURST = 3;

interface Relay {
  url: string;
  /** device tokens of the requests relayed */
  tokens: Set<string>;
  close(): Promise<void>;
}

/** A TCP relay to `target` on a port of its own. */
async function relayTo(target: URL): Promise<Relay> {
  const tokens = new Set<string>();
  const relay = net.createServer((client) => {
    const upstream = net.connect(Number(target.port), target.hostname);
    client.once("data", (head: Buffer) => {
      const token = /^Authorization: Bearer (\S+)\r$/m.exec(head.toString("latin1"))?.[1];
      if (token) tokens.add(token);
    });
    client.pipe(upstream).pipe(client);
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.once("error", end);
    upstream.once("error", end);
  });
  await new Promise<void>((resolve) => relay.listen(0, "127.0.0.1", resolve));
  const { port } = relay.address() as net.AddressInfo;
  return { url: `http://127.0.0.1:${port}`, tokens, close: () => new Promise((resolve) => relay.close(() => resolve())) };
}

let sim: SimServer;
let relays: Relay[];
let tokens: string[];
let summary: FleetSummary;

beforeAll(async () => {
  sim = await startSimServer();
  await sim.publish({ version: "1.4.0", size: 64 * 1024 });
  await sim.publish({ version: "1.5.0", size: 64 * 1024 });
  tokens = (await Promise.all(Array.from({ length: BADGES }, (_, i) => sim.addDevice(`instances test ${i}`)))).map((device) => device.token);
  relays = await Promise.all([relayTo(new URL(sim.url)), relayTo(new URL(sim.url))]);
  summary = await runFleet({
    serverUrl: relays.map((relay) => relay.url),
    badges: tokens.map((token) => ({ token, version: "1.4.0", battery: { volts: 4.1, charging: true } })),
    updateShare: 1,
    spreadMs: 300,
    ask: { atMs: 200, spreadMs: 0, badges: BURST },
    seed: 5,
  });
});
afterAll(async () => {
  await Promise.all((relays ?? []).map((relay) => relay.close()));
  await sim?.close();
});

describe("a fleet over two instances", () => {
  it("ends every badge on the release, the burst's wearers and the others alike", () => {
    expect(summary.crashed).toBe(0);
    expect(summary.asked).toBe(BADGES);
    expect(summary.results.map((result) => [result.outcome, result.version])).toEqual(tokens.map(() => ["updated", "1.5.0"]));
  });

  it("sends each badge's every request to one instance, badge i to instance i mod 2", () => {
    const [even, odd] = relays as [Relay, Relay];
    expect([...even.tokens].sort()).toEqual(tokens.filter((_, i) => i % 2 === 0).sort());
    expect([...odd.tokens].sort()).toEqual(tokens.filter((_, i) => i % 2 === 1).sort());
  });
});
