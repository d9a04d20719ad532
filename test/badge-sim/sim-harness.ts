// What the virtual-badge tests share: a fresh device per test on the real badge server
// (test/server/badge-harness.ts), a virtual badge with sensible defaults that is stopped after
// the test, and the server's view of a device.
import { afterEach } from "vitest";
import { md5Hex } from "../../firmware/index.ts";
import { createDevice } from "../../server/services/devices.ts";
import { createVirtualBadge, type VirtualBadge, type VirtualBadgeOptions } from "../../badge-sim/virtual-badge/virtual-badge.ts";
import type { FlashRegion } from "../../badge-sim/hardware/flash.ts";
import type { SlotName } from "../../badge-sim/hardware/otadata.ts";
import type { BadgeHarness } from "../server/badge-harness.ts";

const badges: VirtualBadge[] = [];
afterEach(() => {
  for (const badge of badges.splice(0)) badge.stop();
});

export async function newDevice(h: BadgeHarness, room = "R1"): Promise<{ id: string; token: string }> {
  const { id, token } = await createDevice(h.server.store.db, { mode: "test", room, model: "badge-v2" });
  return { id, token };
}

/** A badge at 1.4.0 on a charging battery (so its radio works), talking to `serverUrl` (default: the server). */
export function virtualBadge(h: BadgeHarness, token: string | null, options: Partial<VirtualBadgeOptions> = {}): VirtualBadge {
  const badge = createVirtualBadge({ serverUrl: h.url, token, version: "1.4.0", battery: { volts: 4.1, charging: true }, ...options });
  badges.push(badge);
  return badge;
}

export async function deviceView(h: BadgeHarness, deviceId: string): Promise<any> {
  const response = await h.api(`/v1/devices/${deviceId}`, h.keys.admin);
  if (response.status !== 200) throw new Error(`GET /v1/devices/${deviceId}: ${response.status}`);
  return response.body;
}

export function fetchesOf(h: BadgeHarness, deviceId: string) {
  return h.server.store.db.selectFrom("ota_fetches").selectAll().where("device_id", "=", deviceId).execute();
}

export const slotMd5 = (badge: VirtualBadge, slot: SlotName) => md5Hex(badge.flash.slot(slot));

/** Bytes the badge wrote to a region (the factory's USB flash is not the badge's doing). */
export const bytesWritten = (badge: VirtualBadge, region: FlashRegion) =>
  badge.flash
    .writesTo(region)
    .filter((operation) => operation.op === "write")
    .reduce((sum, operation) => sum + operation.length, 0);

export const details = (badge: VirtualBadge, kind: Parameters<VirtualBadge["observations"]>[0]) => badge.observations(kind).map((o) => o.detail);
