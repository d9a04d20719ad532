// The badge client's wall-clock stall backstop (`wallStallTimeoutMs`): a simulation whose stalls
// are found on the simulated clock keeps it long, so that a slow answer on a busy machine is
// never taken for a stall (the fault sweep: 200 ms of badge time, 60 s of wall).
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { BadgeClient } from "../../badge-sim/network/badge-client.ts";
import { startFaultProxy, type FaultProxy } from "../../badge-sim/network/fault-proxy/proxy.ts";
import { BADGE_PATHS } from "../../firmware/index.ts";
import { startBadgeHarness, type BadgeHarness } from "../server/badge-harness.ts";

const STATUS = { version: "1.4.0", display: null, volts: 4.1, charging: true };
let h: BadgeHarness;
let proxy: FaultProxy;

beforeAll(async () => {
  h = await startBadgeHarness();
  await h.publish("1.5.0", { size: 64 * 1024 });
});
afterEach(() => proxy?.close());
afterAll(() => h.close());

/** A proxy holding the check's answer silent for 300 ms of wall time, without saying so (no SilentPeers). */
async function slowCheckAnswers(): Promise<string> {
  proxy = await startFaultProxy({ target: h.url, faults: [{ kind: "stall", atByte: 0, forMs: 300, path: BADGE_PATHS.check }] });
  return proxy.url;
}

describe("the wall's stall backstop", () => {
  it("longer than the stall timeout: an answer slower than the stall timeout still arrives", async () => {
    const client = new BadgeClient({ baseUrl: await slowCheckAnswers(), stallTimeoutMs: 100, wallStallTimeoutMs: 60_000 });
    const answer = await client.check(h.devices.r1.token, STATUS);
    expect(answer).toMatchObject({ kind: "offer", offer: { version: "1.5.0" } });
  });

  it("by default the stall timeout: the same answer is a stall", async () => {
    const client = new BadgeClient({ baseUrl: await slowCheckAnswers(), stallTimeoutMs: 100 });
    expect(await client.check(h.devices.r1.token, STATUS)).toMatchObject({ kind: "failed", message: expect.stringContaining("100 ms") });
  });

  it("shorter than the stall timeout is refused, naming both", () => {
    expect(() => new BadgeClient({ baseUrl: h.url, stallTimeoutMs: 500, wallStallTimeoutMs: 100 })).toThrow(
      "wallStallTimeoutMs 100 must be a number of milliseconds no less than stallTimeoutMs 500",
    );
  });
});
