// A power cut at a byte lands on time however slow the relay (hil/target-strategies.ts,
// RelayPower.armBrownout): with the fault proxy in the badge's path, the rig holds the download
// at the end of the cut's window until the power is gone. A badge downloads through the real
// fault proxy from a real HTTP server, printing progress as the reference badge does (every
// 1024-byte write that changes the percent); its relay takes a whole second to cut the power.
import http from "node:http";
import net from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { BADGE_PATHS, type ConsoleEvent } from "../../firmware/index.ts";
import { startFaultProxy, type FaultProxy } from "../../badge-sim/network/fault-proxy/proxy.ts";
import type { PowerRelay } from "../../hil/power-relay.ts";
import { relayPower, type TargetControls } from "../../hil/target-strategies.ts";

const TOTAL = 262144;
const WRITE_BYTES = 1024;
const RELAY_LATENCY_MS = 1000;

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

/** The release image over HTTP/1.0, as the server sends it: all of it at once. */
async function imageServer(): Promise<string> {
  const server = http.createServer((_request, response) => {
    response.writeHead(200, { "content-length": TOTAL, connection: "close" });
    response.end(Buffer.alloc(TOTAL, 0x5a));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  closers.push(() => new Promise((resolve) => server.close(() => resolve())));
  return `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
}

/**
 * A badge downloading the image through `proxyUrl`, printing a progress event each time a
 * 1024-byte write changes the percent; `kill()` is its power going (the socket dies with it).
 */
function downloadingBadge(proxyUrl: string, print: (event: ConsoleEvent) => void) {
  const { port } = new URL(proxyUrl);
  const socket = net.connect(Number(port), "127.0.0.1");
  socket.write(`GET ${BADGE_PATHS.download}?version=1.5.0 HTTP/1.0\r\nHost: badge\r\n\r\n`);
  let head = Buffer.alloc(0);
  let received = 0;
  let written = 0;
  let percent = 0;
  print({ kind: "progress", bytes: 0, total: TOTAL });
  socket.on("data", (chunk: Buffer) => {
    let body = chunk;
    if (head.indexOf("\r\n\r\n") === -1) {
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf("\r\n\r\n");
      if (end === -1) return;
      body = head.subarray(end + 4);
    }
    received += body.length;
    while (received - written >= WRITE_BYTES || (received === TOTAL && written < TOTAL)) {
      written += Math.min(WRITE_BYTES, received - written);
      const now = Math.floor((written * 100) / TOTAL);
      if (now !== percent || written === TOTAL) print({ kind: "progress", bytes: written, total: TOTAL });
      percent = now;
    }
  });
  socket.on("error", () => {});
  const finished = new Promise<void>((resolve) => socket.on("data", () => received === TOTAL && resolve()));
  return { kill: () => socket.destroy(), received: () => received, finished };
}

/** A relay that switches once `latency` resolves, as a Tasmota relay over a busy broker might. */
function slowRelay(latency: () => Promise<void>, onOff: () => void): PowerRelay {
  return {
    topic: "slow",
    on: async () => {},
    off: async (options) => {
      options?.onSent?.();
      await latency();
      onOff();
    },
    state: async () => "ON",
    cycle: async () => {},
    close: async () => {},
  };
}

/**
 * Plays a download with a cut at `atPercent`, the fault proxy holding it when `hold`; the relay
 * takes RELAY_LATENCY_MS, or without the hold until the badge has the whole image.
 */
async function cutDownload(atPercent: number, options: { hold: boolean }) {
  const proxy: FaultProxy = await startFaultProxy({ target: await imageServer() });
  closers.push(() => proxy.close());
  const notes: string[] = [];
  let entered = "online.downloading";
  const controls = { note: (_kind: string, detail: string) => notes.push(detail), enter: async (path: string) => void (entered = path) } as unknown as TargetControls;
  let badge: ReturnType<typeof downloadingBadge> | null = null;
  let receivedAtCut = -1;
  const power = relayPower({
    relay: slowRelay(options.hold ? () => new Promise((resolve) => setTimeout(resolve, RELAY_LATENCY_MS)) : () => badge!.finished, () => {
      receivedAtCut = badge!.received();
      badge!.kill();
    }),
    proxy: options.hold ? proxy : null,
    imageBytes: TOTAL,
  });
  await power.armBrownout(controls, { kind: "brownout", atPercent });
  // the rig reads the badge's console as SerialTarget does: a progress line may strike the cut,
  // and what the badge prints while the relay switches is printed before the cut
  const events: ConsoleEvent[] = [];
  let wake: () => void = () => {};
  badge = downloadingBadge(proxy.url, (event) => {
    events.push(event);
    wake();
  });
  while (power.cutsMade === 0) {
    const event = events.shift() ?? (await new Promise<void>((resolve) => (wake = resolve)), events.shift());
    if (event?.kind === "progress") await power.reached(controls, { progress: event });
  }
  for (const event of events.splice(0)) power.heardBeforeCut(event);
  return { checks: power.checks(), receivedAtCut, entered, notes };
}

describe("a power cut at a byte, with the fault proxy in the badge's path", () => {
  it("holds the download at the end of the cut's window, so a relay a second slow still cuts before the next checkpoint", async () => {
    const { checks, receivedAtCut, entered, notes } = await cutDownload(10, { hold: true });
    // 10 % is byte 26214: the cut must land before the first install checkpoint, byte 65536
    expect(receivedAtCut).toBe(65535);
    expect(entered).toBe("off");
    expect(checks).toEqual([{ field: "power.cut", expected: "at download byte 26214, before byte 65536", observed: expect.stringMatching(/^at download byte 26214, before byte 65536 \(the badge had printed 6\d{4}\)$/), passed: true }]);
    expect(notes).toContain("the fault proxy holds download 1 at byte 65535 until the power is cut (at byte 26214)");
  });

  it("holds a cut at 99 % one byte short of the image's end: the badge never finishes the download", async () => {
    const { checks, receivedAtCut } = await cutDownload(99, { hold: true });
    expect(receivedAtCut).toBe(TOTAL - 1);
    expect(checks[0]).toMatchObject({ expected: "at download byte 259522, before byte 262144", passed: true });
  });

  it("without the hold, a relay slower than the download cuts late, and the check says how far the badge got", async () => {
    const { checks, receivedAtCut } = await cutDownload(10, { hold: false });
    expect(receivedAtCut).toBe(TOTAL);
    expect(checks[0]).toMatchObject({ passed: false, observed: "late: the badge had downloaded 262144 bytes before the power went" });
  });
});
