// One full update of an image the size of the OTA slot (0x1E0000 bytes, 1.875 MiB) against the
// in-process server: the wall time it costs and the simulated badge time it stands for are
// printed, not asserted (the benchmark under scripts/ is where speed is judged).
import { performance } from "node:perf_hooks";
import { afterAll, beforeAll, expect, it } from "vitest";
import { md5Hex, OTA_SLOT_BYTES } from "../../firmware/index.ts";
import { startBadgeHarness, type BadgeHarness } from "../server/badge-harness.ts";
import { bytesWritten, newDevice, virtualBadge } from "./sim-harness.ts";

let h: BadgeHarness;
let image: Uint8Array;
beforeAll(async () => {
  h = await startBadgeHarness();
  image = await h.publish("1.5.0", { size: OTA_SLOT_BYTES });
});
afterAll(() => h.close());

it("installs a 1.875 MiB image, byte for byte, and reports ok", async () => {
  const runs: Array<{ wallMs: number; simMs: number }> = [];
  for (let i = 0; i < 3; i++) {
    const device = await newDevice(h);
    const badge = virtualBadge(h, device.token);
    await badge.runUntilState("awake.idle");
    const simStart = badge.clock.now();
    const wallStart = performance.now();
    badge.checkForUpdate();
    await badge.runUntil((b) => b.observations("report.cleared").length === 1);
    runs.push({ wallMs: performance.now() - wallStart, simMs: badge.clock.now() - simStart });

    expect(badge.runningVersion()).toBe("1.5.0");
    expect(bytesWritten(badge, "ota_1")).toBe(OTA_SLOT_BYTES);
    expect(md5Hex(badge.flash.slot("ota_1"))).toBe(md5Hex(image));
    expect(bytesWritten(badge, "ota_0")).toBe(0);
  }
  const median = [...runs].sort((a, b) => a.wallMs - b.wallMs)[1]!;
  console.log(
    `full ${OTA_SLOT_BYTES}-byte update, check to ok report delivered: wall ${runs.map((r) => r.wallMs.toFixed(0)).join(" / ")} ms ` +
      `(median ${median.wallMs.toFixed(0)} ms), simulated ${(median.simMs / 1000).toFixed(1)} s, ratio ${(median.simMs / median.wallMs).toFixed(0)}x`,
  );
});
