// A cut download resumes (issue 23): the virtual badge keeps a checkpoint every 64 KiB with the
// MD5 state and the offer it belongs to, and the next download of the same offer asks for the
// rest with Range and If-Range. Every way a server or proxy can answer a resume wrongly ends in
// a verified image, never in bytes appended to the wrong place. Real server, real fault proxy.
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { md5Hex } from "../../firmware/index.ts";
import { CHECKPOINT_BYTES } from "../../badge-sim/model/badge-storage.ts";
import type { Fault } from "../../badge-sim/network/fault-proxy/faults.ts";
import { startFaultProxy, type FaultProxy } from "../../badge-sim/network/fault-proxy/proxy.ts";
import type { VirtualBadge } from "../../badge-sim/virtual-badge/virtual-badge.ts";
import { startBadgeHarness, type BadgeHarness } from "../server/badge-harness.ts";
import { details, fetchesOf, newDevice, virtualBadge } from "./sim-harness.ts";

const IMAGE_BYTES = 256 * 1024;
/** 90 % of the image, the cut of the figure; the last checkpoint before it is 192 KiB. */
const CUT_AT = Math.floor(IMAGE_BYTES * 0.9);
const CHECKPOINT = Math.floor(CUT_AT / CHECKPOINT_BYTES) * CHECKPOINT_BYTES;

let h: BadgeHarness;
let release: Uint8Array;
beforeAll(async () => {
  h = await startBadgeHarness();
  release = await h.publish("1.5.0", { size: IMAGE_BYTES });
});
afterAll(() => h.close());

let proxy: FaultProxy | null = null;
afterEach(async () => {
  await proxy?.close();
  proxy = null;
});

/** A badge behind a fault proxy whose first download is cut at 90 %, back at idle with its report sent. */
async function cutBadge(laterFaults: Fault[] = []) {
  const device = await newDevice(h);
  proxy = await startFaultProxy({ target: h.url, faults: [{ kind: "drop", atByte: CUT_AT, nth: 1 }, ...laterFaults] });
  const badge = virtualBadge(h, device.token, { serverUrl: proxy.url });
  await badge.runUntilState("awake.idle");
  badge.checkForUpdate();
  await badge.runUntil((b) => b.observations("report.cleared").length === 1 && b.state() === "awake.idle");
  expect(badge.storage.resumePoint()).toMatchObject({ version: "1.5.0", size: IMAGE_BYTES, bytes: CHECKPOINT });
  return { device, badge };
}

async function checkAgain(badge: VirtualBadge, reports: number): Promise<void> {
  badge.checkForUpdate();
  await badge.runUntil((b) => b.observations("report.cleared").length === reports && b.state() === "awake.idle");
}

const installedRelease = (badge: VirtualBadge) => {
  expect(badge.runningVersion()).toBe("1.5.0");
  expect(md5Hex(badge.flash.slot(badge.runningSlot()!).subarray(0, IMAGE_BYTES))).toBe(md5Hex(release));
};

const served = async (deviceId: string) => (await fetchesOf(h, deviceId)).sort((a, b) => a.started_at.localeCompare(b.started_at)).map((f) => ({ first: f.first_byte, sent: f.bytes_sent }));

describe("a download cut at 90 %", () => {
  it("resumes from the last checkpoint with Range and If-Range, and installs the verified release: at most the image + 64 KiB sent", async () => {
    const { device, badge } = await cutBadge();
    await checkAgain(badge, 2);
    installedRelease(badge);
    expect(details(badge, "request")).toContain(`GET /api/badge/ota/download?v=1.5.0 Range: bytes=${CHECKPOINT}-`);
    expect(details(badge, "download")).toContain(`resuming at ${CHECKPOINT} of ${IMAGE_BYTES}`);
    const fetches = await served(device.id);
    expect(fetches.map((f) => f.first)).toEqual([0, CHECKPOINT]);
    expect(fetches[1]!.sent).toBe(IMAGE_BYTES - CHECKPOINT);
    expect(fetches.reduce((sum, f) => sum + f.sent, 0)).toBeLessThanOrEqual(IMAGE_BYTES + CHECKPOINT_BYTES);
    expect(details(badge, "report.stored").at(-1)).toBe("ok|1.5.0");
    expect(badge.storage.resumePoint()).toBeNull();
  });
});

describe("a power cut during the download", () => {
  it("resumes after the reboot from the checkpoint NVS kept", async () => {
    const device = await newDevice(h);
    const badge = virtualBadge(h, device.token, { faults: { brownout: { atDownloadPercent: 60 } } });
    await badge.runUntilState("awake.idle");
    badge.checkForUpdate();
    await badge.runUntil((b) => b.observations("report.cleared").length === 1 && b.state() === "awake.idle");
    expect(details(badge, "report.stored")).toEqual(["err|1.5.0|power lost during download after 50% (128 of 256 KiB)"]);
    await checkAgain(badge, 2);
    installedRelease(badge);
    expect((await served(device.id)).map((f) => f.first)).toEqual([0, 2 * CHECKPOINT_BYTES]);
  });
});

describe("a resume answered wrongly", () => {
  it("a proxy that ignores Range: the 200 overwrites from byte 0, never appends, and the verified image installs", async () => {
    const { device, badge } = await cutBadge([{ kind: "range", mode: "ignore" }]);
    await checkAgain(badge, 2);
    installedRelease(badge);
    expect(details(badge, "download")).toContain(`the server sent the whole image instead of bytes ${CHECKPOINT}-: starting over from byte 0`);
    expect(await served(device.id)).toEqual([
      { first: 0, sent: expect.any(Number) },
      { first: 0, sent: IMAGE_BYTES },
    ]);
  });

  it("a 206 at another offset is refused and the checkpoint dropped; the next attempt starts from 0", async () => {
    const { device, badge } = await cutBadge([{ kind: "range", mode: "shift" }]);
    await checkAgain(badge, 2);
    expect(details(badge, "report.stored").at(-1)).toMatch(/^err\|1\.5\.0\|resume refused: the server sent bytes "bytes 192512-262143\/262144"; the badge asked for bytes 196608- of 262144$/);
    expect(badge.runningVersion()).toBe("1.4.0");
    expect(badge.storage.resumePoint()).toBeNull();
    await checkAgain(badge, 3);
    installedRelease(badge);
    expect((await served(device.id)).map((f) => f.first)).toEqual([0, CHECKPOINT - 4096, 0]);
  });

  it("a 416 starts over from byte 0 at once", async () => {
    const { device, badge } = await cutBadge([{ kind: "range", mode: "unsatisfiable" }]);
    await checkAgain(badge, 2);
    installedRelease(badge);
    expect(details(badge, "download")).toContain(`the server cannot resume at ${CHECKPOINT} (HTTP 416): starting over from byte 0`);
    // the 416 serves nothing and is not a fetch; the whole image follows
    expect((await served(device.id)).map((f) => f.first)).toEqual([0, 0]);
  });

  it("a release replaced between the cut and the resume: the changed offer starts from 0", async () => {
    const { device, badge } = await cutBadge();
    const replaced = await h.publish("1.6.0", { size: IMAGE_BYTES, canary: device.id });
    badge.checkForUpdate();
    await badge.runUntil((b) => b.observations("report.cleared").length === 2 && b.state() === "awake.idle");
    expect(badge.runningVersion()).toBe("1.6.0");
    expect(md5Hex(badge.flash.slot(badge.runningSlot()!).subarray(0, IMAGE_BYTES))).toBe(md5Hex(replaced));
    expect(details(badge, "download")).toContain("checkpoint of 1.5.0 dropped: the offer changed");
    expect((await fetchesOf(h, device.id)).map((f) => [f.version, f.first_byte])).toEqual([
      ["1.5.0", 0],
      ["1.6.0", 0],
    ]);
  });
});

describe("a server at its download cap", () => {
  it("503: the badge keeps its checkpoint, waits at least what the server asked, then resumes", async () => {
    const { device, badge } = await cutBadge([{ kind: "status", code: 503, retryAfterS: 120, nth: 2 }]);
    badge.checkForUpdate();
    await badge.runUntil((b) => b.observations("screen").some((o) => o.detail.includes("Server busy")));
    expect(badge.storage.resumePoint()).toMatchObject({ bytes: CHECKPOINT });
    expect(badge.pendingReport()).toBeNull();
    // pressed again at once: the badge does not even ask
    const requests = details(badge, "request").length;
    badge.checkForUpdate();
    await badge.runUntil((b) => b.state() === "awake.idle" && b.screen().includes("the server is busy; it asked to wait"));
    expect(details(badge, "request").length).toBe(requests);
    // Retry-After 120, S 300 (the proxy's answer to trouble): the badge waits the longer; asleep by then
    await badge.advance(300_000);
    badge.pressButton();
    await badge.runUntilState("awake.idle");
    await checkAgain(badge, 2);
    installedRelease(badge);
    expect((await served(device.id)).map((f) => f.first)).toEqual([0, CHECKPOINT]);
  });
});
