// The virtual badge against the real server: the update path and the rules around it (SPEC
// 3.4): offer, already current, refusals and the battery gate, radio only on external power,
// revoked token, deep sleep on the simulated clock, card taps queued offline.
import { performance } from "node:perf_hooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { revokeDevice } from "../../server/services/devices.ts";
import { SLEEP_AFTER_MS } from "../../badge-sim/model/badge-machine.ts";
import { startBadgeHarness, type BadgeHarness } from "../server/badge-harness.ts";
import { bytesWritten, details, deviceView, fetchesOf, newDevice, slotMd5, virtualBadge } from "./sim-harness.ts";

let h: BadgeHarness;
beforeAll(async () => {
  h = await startBadgeHarness();
  await h.publish("1.5.0", { notes: ["Faster card reads"] });
});
afterAll(() => h.close());

describe("an offered release", () => {
  it("is downloaded into the other slot, verified, switched to, booted, and reported ok at the next sync", async () => {
    const device = await newDevice(h);
    const badge = virtualBadge(h, device.token);
    await badge.runUntilState("awake.idle");
    expect({ version: badge.runningVersion(), slot: badge.runningSlot() }).toEqual({ version: "1.4.0", slot: "ota_0" });
    const runningBefore = slotMd5(badge, "ota_0");

    badge.checkForUpdate();
    await badge.runUntil((b) => b.runningVersion() === "1.5.0" && b.state() === "awake.idle");

    const states = details(badge, "state");
    const install = states.slice(states.indexOf("online.checking"));
    expect(install.slice(0, 8)).toEqual([
      "online.checking",
      "online.offered",
      "online.downloading",
      "online.switching",
      "restarting",
      "booting",
      "awake.opportunity",
      "online.syncing",
    ]);
    expect(badge.runningSlot()).toBe("ota_1");
    expect(slotMd5(badge, "ota_0")).toBe(runningBefore);
    expect(bytesWritten(badge, "ota_0")).toBe(0);
    expect(details(badge, "report.sent")).toEqual(["ota=ok|1.5.0"]);
    expect(details(badge, "report.cleared")).toEqual(["ok|1.5.0"]);
    expect(badge.pendingReport()).toBeNull();
    expect(badge.screen()).toBe("Badge 1.5.0 - ready\nUpdated to 1.5.0");
    expect(details(badge, "screen")).toContain("Updating to 1.5.0\nDownloading 50% (32 of 64 KiB)");

    const view = await deviceView(h, device.id);
    expect(view.firmware).toMatchObject({ state: "current", installed: { version: "1.5.0" }, last_report: { outcome: "ok", version: "1.5.0" } });
  });

  it("is not downloaded when the badge already runs it: the screen says up to date", async () => {
    const device = await newDevice(h);
    const badge = virtualBadge(h, device.token, { version: "1.5.0" });
    await badge.runUntilState("awake.idle");
    badge.checkForUpdate();
    await badge.runUntilState("awake.idle");
    expect(badge.screen()).toBe("Badge 1.5.0 - ready\nUp to date (latest release 1.5.0)");
    expect(details(badge, "request")).not.toContainEqual(expect.stringMatching(/^GET/));
    expect(await fetchesOf(h, device.id)).toEqual([]);
  });
});

describe("the battery gate", () => {
  it("below 3.85 V and not charging: the server refuses (X battery_low) and nothing is fetched", async () => {
    const device = await newDevice(h);
    const badge = virtualBadge(h, device.token, { battery: { volts: 3.7, charging: false, externalPower: true } });
    await badge.runUntilState("awake.idle");
    badge.checkForUpdate();
    await badge.runUntilState("awake.idle");
    expect(details(badge, "answer")).toContain("check: refused battery_low");
    expect(badge.screen()).toMatch(/^Badge 1\.4\.0 - ready\nNo update: battery 3\.7 V is below 3\.85 V/);
    expect(await fetchesOf(h, device.id)).toEqual([]);
  });

  it("holds on the badge even when the server offered: a cell that sagged to 3.84 V during the check does not install", async () => {
    const device = await newDevice(h);
    // 3.86 V at the boot sync, 3.85 V at the check (the server offers: 3.85 passes), 3.84 V after it
    const badge = virtualBadge(h, device.token, { battery: { volts: 3.86, charging: false, externalPower: true, drain: { perRequest: 0.01 } } });
    await badge.runUntilState("awake.idle");
    badge.checkForUpdate();
    await badge.runUntilState("awake.idle");
    expect(details(badge, "answer")).toContainEqual(expect.stringMatching(/^check: offer 1\.5\.0/));
    expect(badge.screen()).toBe("Badge 1.4.0 - ready\nUpdate 1.5.0 needs 3.85 V or charging (battery at 3.84 V)");
    expect(badge.runningVersion()).toBe("1.4.0");
    expect(await fetchesOf(h, device.id)).toEqual([]);
  });

  it("below 3.85 V while charging: installs", async () => {
    const device = await newDevice(h);
    const badge = virtualBadge(h, device.token, { battery: { volts: 3.7, charging: true } });
    await badge.runUntilState("awake.idle");
    badge.checkForUpdate();
    await badge.runUntil((b) => b.runningVersion() === "1.5.0" && b.state() === "awake.idle");
    expect(details(badge, "report.sent")).toEqual(["ota=ok|1.5.0"]);
  });
});

describe("the radio", () => {
  it("stays off without external power: the screen asks to plug in and no request reaches the server", async () => {
    const device = await newDevice(h);
    const badge = virtualBadge(h, device.token, { battery: { volts: 4.1, charging: false } });
    await badge.runUntilState("awake.idle");
    badge.checkForUpdate();
    await badge.settle();
    expect(badge.state()).toBe("awake.plugInPrompt");
    expect(badge.screen()).toBe("Plug in to reach the server\nThe radio only works on external power");
    expect(badge.observations("request")).toEqual([]);
    const view = await deviceView(h, device.id);
    expect({ check: view.last_check_at, sync: view.last_sync_at }).toEqual({ check: null, sync: null });
  });
});

describe("a revoked device token", () => {
  it("gets 401: the badge clears its token and shows that it is not provisioned, across restarts", async () => {
    const device = await newDevice(h);
    await revokeDevice(h.server.store.db, device.id);
    const badge = virtualBadge(h, device.token);
    await badge.runUntilState("unprovisioned");
    expect(badge.token()).toBeNull();
    expect(details(badge, "token.cleared")).toHaveLength(1);
    expect(badge.screen()).toBe("Not provisioned\nThis badge has no device token; ask IT to set it up again");

    await badge.runUntilAsleep();
    badge.pressButton();
    await badge.runUntil((b) => b.observations("boot").length === 2 && b.state() === "unprovisioned");
    expect(badge.observations("request")).toHaveLength(1);
  });
});

describe("deep sleep", () => {
  it("comes 30 s after the last wearer action, in simulated time, at no wall time", async () => {
    const device = await newDevice(h);
    const badge = virtualBadge(h, device.token, { battery: { volts: 4.0, charging: false } });
    const wallStart = performance.now();
    await badge.runUntilState("awake.idle");
    const awakeAt = badge.clock.now();
    await badge.advance(20_000);
    badge.pressButton();
    await badge.runUntilAsleep();
    const wallMs = performance.now() - wallStart;

    const sleptAt = badge.observations("state").find((o) => o.detail === "asleep")!.t;
    expect(sleptAt - awakeAt).toBe(20_000 + SLEEP_AFTER_MS);
    expect(badge.clock.now()).toBeGreaterThanOrEqual(SLEEP_AFTER_MS);
    // the simulated clock never waits on the wall: the 20 s and the sleep timer took less wall time than badge time
    expect(wallMs).toBeLessThan(sleptAt - awakeAt);
    expect(badge.screen()).toBe("");

    badge.pressButton();
    await badge.runUntilState("awake.idle");
    expect(details(badge, "boot").at(-1)).toBe("ota_0 1.4.0 (wake)");
  });
});

describe("card taps", () => {
  it("are queued in NVS while the radio is off, sent with the next sync, and cleared on A and R", async () => {
    const device = await newDevice(h);
    const badge = virtualBadge(h, device.token, { battery: { volts: 4.0, charging: false } });
    await badge.runUntilState("awake.idle");
    badge.tapCard(h.cards[0]!);
    badge.tapCard("DEADBEEF00");
    await badge.runUntilAsleep();
    badge.tapCard(h.cards[1]!); // wakes the badge, and is queued too
    await badge.runUntilState("awake.idle");
    expect(badge.queuedTaps().map((tap) => tap.uid)).toEqual([h.cards[0], "DEADBEEF00", h.cards[1]]);
    expect(badge.observations("request")).toEqual([]);

    badge.plugIn();
    await badge.runUntilState("awake.idle");
    expect(details(badge, "tap.sent").map((tap) => tap.split("|")[1])).toEqual([h.cards[0], "DEADBEEF00", h.cards[1]]);
    expect(details(badge, "tap.cleared")).toEqual(["1 accepted", "2 rejected unknown_card", "3 accepted"]);
    expect(badge.queuedTaps()).toEqual([]);
    const taps = await h.server.store.db.selectFrom("device_taps").select(["card_uid", "result", "reason"]).where("device_id", "=", device.id).orderBy("card_uid").execute();
    expect(taps).toEqual([
      { card_uid: h.cards[0], result: "accepted", reason: null },
      { card_uid: h.cards[1], result: "accepted", reason: null },
      { card_uid: "DEADBEEF00", result: "rejected", reason: "unknown_card" },
    ]);
  });

  it("go at once with Tools > Sync now on USB power; on battery the badge asks to be plugged in", async () => {
    const device = await newDevice(h);
    const badge = virtualBadge(h, device.token, { battery: { volts: 4.0, charging: false } });
    await badge.runUntilState("awake.idle");
    badge.tapCard(h.cards[2]!);
    badge.syncNow();
    await badge.settle();
    expect(badge.state()).toBe("awake.plugInPrompt");
    expect(badge.queuedTaps()).toHaveLength(1);

    badge.plugIn();
    await badge.runUntilState("awake.idle");
    badge.tapCard(h.cards[3]!);
    badge.syncNow();
    await badge.runUntilState("awake.idle");
    expect(details(badge, "tap.cleared")).toEqual(["1 accepted", "2 accepted"]);
    expect(details(badge, "request")).toEqual(["POST /api/badge/sync", "POST /api/badge/sync"]);
  });
});
