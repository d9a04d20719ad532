// GET /v1/devices: every badge's installed version and firmware state, as an administrator sees
// the fleet (SPEC 4.10: a USB-flashed unpublished version is Unreleased, never Current).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NO_REPORT_AFTER_MS } from "../../server/services/devices.ts";
import { lines, startBadgeHarness, type BadgeHarness } from "./badge-harness.ts";

let h: BadgeHarness;
beforeAll(async () => {
  h = await startBadgeHarness();
  await h.publish("1.4.0");
  await h.publish("1.5.0");
});
afterAll(() => h.close());

async function firmwareOf(deviceId: string) {
  const res = await h.api(`/v1/devices/${deviceId}`, h.keys.admin);
  expect(res.status).toBe(200);
  return res.body.firmware;
}

const check = (token: string, sv: string) => h.check(token, lines("v=1", `sv=${sv}`, "bat=4.05"));
const download = async (token: string, version: string) => {
  const res = await fetch(`${h.url}/api/badge/ota/download?v=${version}`, { headers: { authorization: `Bearer ${token}` } });
  expect(res.status).toBe(200);
  await res.arrayBuffer();
};

describe("firmware state", () => {
  it("is unknown before a badge checks in", async () => {
    expect(await firmwareOf(h.devices.r1.id)).toMatchObject({ state: "unknown", installed: null, target_version: "1.5.0" });
  });

  it("is outdated on an older published release, current on the fleet's release", async () => {
    await check(h.devices.r1.token, "1.4.0");
    expect(await firmwareOf(h.devices.r1.id)).toMatchObject({ state: "outdated", installed: { version: "1.4.0" } });
    await check(h.devices.r1b.token, "1.5.0");
    expect((await firmwareOf(h.devices.r1b.id)).state).toBe("current");
  });

  it("is unreleased for a version never published, even a newer one, never current", async () => {
    await check(h.devices.r2.token, "1.6.0-dev");
    expect((await firmwareOf(h.devices.r2.id)).state).toBe("unreleased");
    await check(h.devices.r2.token, "1.4.9");
    expect((await firmwareOf(h.devices.r2.id)).state).toBe("unreleased");
  });

  it("is updating once the badge fetches its image, and failed when it reports ota=err", async () => {
    await check(h.devices.r1.token, "1.4.0");
    await download(h.devices.r1.token, "1.5.0");
    // The server records the end of a fetch just after the last byte leaves, so poll for it.
    await expect.poll(async () => (await firmwareOf(h.devices.r1.id)).last_fetch?.outcome).toBe("completed");
    expect(await firmwareOf(h.devices.r1.id)).toMatchObject({ state: "updating", last_fetch: { version: "1.5.0" } });
    await h.sync(h.devices.r1.token, lines("v=1", "sv=1.4.0", "bat=3.9", "ota=err|1.5.0|MD5 mismatch"));
    expect(await firmwareOf(h.devices.r1.id)).toMatchObject({
      state: "failed",
      last_report: { version: "1.5.0", outcome: "err", message: "MD5 mismatch" },
    });
  });

  it("is current after a new fetch and an ota=ok report", async () => {
    await download(h.devices.r1.token, "1.5.0");
    expect((await firmwareOf(h.devices.r1.id)).state).toBe("updating");
    await h.sync(h.devices.r1.token, lines("v=1", "sv=1.5.0", "bat=3.9", "ota=ok|1.5.0"));
    expect(await firmwareOf(h.devices.r1.id)).toMatchObject({ state: "current", installed: { version: "1.5.0" }, last_report: { outcome: "ok" } });
  });

  it("is no_report when a fetch ended longer ago than the bound without a report", async () => {
    await check(h.devices.r1b.token, "1.4.0");
    await download(h.devices.r1b.token, "1.5.0");
    await expect.poll(async () => (await firmwareOf(h.devices.r1b.id)).last_fetch?.outcome).toBe("completed");
    expect((await firmwareOf(h.devices.r1b.id)).state).toBe("updating");
    const past = new Date(Date.now() - NO_REPORT_AFTER_MS - 60_000).toISOString();
    await h.server.store.db.updateTable("ota_fetches").set({ started_at: past, ended_at: past }).where("device_id", "=", h.devices.r1b.id).execute();
    expect((await firmwareOf(h.devices.r1b.id)).state).toBe("no_report");
  });
});

describe("the list", () => {
  it("lists every badge with its state, battery and last contact", async () => {
    const res = await h.api("/v1/devices", h.keys.admin);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ object: "list", has_more: false });
    expect(res.body.data.map((d: any) => d.id).sort()).toEqual([h.devices.r1.id, h.devices.r1b.id, h.devices.r2.id].sort());
    const r1 = res.body.data.find((d: any) => d.id === h.devices.r1.id);
    expect(r1).toMatchObject({ object: "device", room: "R1", model: "badge-v2", battery: { volts: 3.9, charging: false }, firmware: { state: "current" } });
    expect(r1.last_sync_at).not.toBeNull();
    expect(JSON.stringify(res.body)).not.toMatch(/token_hash|dtk_test_[A-Za-z0-9_-]{20}/);
  });

  it("pages with a cursor and filters by room", async () => {
    const first = await h.api("/v1/devices?limit=2", h.keys.admin);
    expect(first.body.data).toHaveLength(2);
    expect(first.body.has_more).toBe(true);
    const second = await h.api(`/v1/devices?limit=2&cursor=${first.body.next_cursor}`, h.keys.admin);
    expect(second.body.data).toHaveLength(1);
    expect(second.body.has_more).toBe(false);
    const r2 = await h.api("/v1/devices?room=R2", h.keys.admin);
    expect(r2.body.data.map((d: any) => d.id)).toEqual([h.devices.r2.id]);
  });

  it("needs the devices:read scope", async () => {
    const res = await h.api("/v1/devices", h.keys.read);
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe("scope_missing");
  });

  it("refuses a device token on /v1", async () => {
    const res = await h.api("/v1/devices", h.devices.r1.token);
    expect(res.status).toBe(401);
    expect(res.body.error.message).toMatch(/Device tokens open the badge endpoints only/);
  });

  it("answers 404 for an unknown device", async () => {
    const res = await h.api("/v1/devices/dev_nope", h.keys.admin);
    expect(res.status).toBe(404);
  });
});
