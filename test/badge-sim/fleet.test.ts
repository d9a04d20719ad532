// The fleet runner against the real server: a small fleet in which most badges just check in,
// every third wearer asks for the update, and a few badges differ (a revoked token, a low cell
// off the charger, no USB power). What the summary counts must be what the server recorded.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { BatteryOptions } from "../../badge-sim/hardware/battery.ts";
import { formatFleetSummary, runFleet, type FleetOutcome, type FleetSummary } from "../../badge-sim/runners/fleet.ts";
import { startSimServer, type SimServer } from "../../scripts/harness/sim-server.ts";
import { run } from "../server/cli-process.ts";

const BADGES = 30;
/** Every third badge's wearer asks: indexes 2, 5, 8 ... 29. */
const UPDATE_SHARE = 1 / 3;
const REVOKED = 0;
const ON_BATTERY = [1, 5];
const LOW_OFF_CHARGER = 2;

const docked: BatteryOptions = { volts: 4.1, charging: true };
const onBattery: BatteryOptions = { volts: 4.0, charging: false };
/** On USB power (so the radio works) but not charging, below the server's 3.85 V gate. */
const lowOffCharger: BatteryOptions = { volts: 3.7, charging: false, externalPower: true };

let server: SimServer;
let devices: Array<{ id: string; token: string }>;
let summary: FleetSummary;

beforeAll(async () => {
  server = await startSimServer();
  await server.publish({ version: "1.4.0", size: 64 * 1024 });
  await server.publish({ version: "1.5.0", size: 64 * 1024 });
  devices = await Promise.all(Array.from({ length: BADGES }, (_, i) => server.addDevice(`fleet test ${i}`)));
  await server.revokeDevice(devices[REVOKED]!.id);
  const batteryOf = (i: number) => (ON_BATTERY.includes(i) ? onBattery : i === LOW_OFF_CHARGER ? lowOffCharger : docked);
  summary = await runFleet({
    serverUrl: server.url,
    badges: devices.map((device, i) => ({ token: device.token, version: "1.4.0", battery: batteryOf(i) })),
    updateShare: UPDATE_SHARE,
    spreadMs: 500,
    seed: 7,
  });
});
afterAll(() => server?.close());

/** What each badge should end as, from how it was set up. */
function expectedOutcome(i: number): FleetOutcome {
  if (i === REVOKED) return "unauthorized";
  if (ON_BATTERY.includes(i)) return "no radio";
  const asks = (i + 1) % 3 === 0;
  if (!asks) return "checked in";
  return i === LOW_OFF_CHARGER ? "refused" : "updated";
}

async function fleetView(): Promise<Map<string, any>> {
  const response = await fetch(`${server.url}/v1/devices?limit=200`, { headers: { authorization: `Bearer ${server.apiKey}` } });
  expect(response.status).toBe(200);
  const body = (await response.json()) as { data: any[] };
  return new Map(body.data.map((device) => [device.id, device]));
}

describe("a fleet of 30 badges", () => {
  it("ends each badge as its setup says, with no simulation crashed", () => {
    expect(summary.crashed).toBe(0);
    expect(summary.results.map((result) => result.outcome)).toEqual(devices.map((_, i) => expectedOutcome(i)));
    expect(summary.results[LOW_OFF_CHARGER]).toMatchObject({ asked: true, reason: "battery_low", version: "1.4.0" });
    expect(summary.asked).toBe(10);
    expect(summary.outcomes).toEqual([
      { outcome: "checked in", reason: null, count: 18 },
      { outcome: "updated", reason: null, count: 8 },
      { outcome: "no radio", reason: null, count: 2 },
      { outcome: "refused", reason: "battery_low", count: 1 },
      { outcome: "unauthorized", reason: null, count: 1 },
    ]);
  });

  it("counts what the server recorded: its firmware states, reports and fetches agree with the summary", async () => {
    const view = await fleetView();
    const count = (outcome: FleetOutcome) => summary.outcomes.filter((row) => row.outcome === outcome).reduce((sum, row) => sum + row.count, 0);
    const states = new Map<string, number>();
    for (const device of devices) {
      const state = view.get(device.id).firmware.state as string;
      states.set(state, (states.get(state) ?? 0) + 1);
    }
    // The unauthorized badge's token was revoked before it checked in: the fleet shows it as such.
    expect(Object.fromEntries(states)).toEqual({
      current: count("updated"),
      outdated: count("checked in") + count("refused"),
      unknown: count("no radio"),
      revoked: count("unauthorized"),
    });

    devices.forEach((device, i) => {
      const recorded = view.get(device.id);
      switch (summary.results[i]!.outcome) {
        case "updated":
          expect(recorded.firmware).toMatchObject({ installed: { version: "1.5.0" }, last_report: { outcome: "ok", version: "1.5.0" }, last_fetch: { outcome: "completed" } });
          break;
        case "checked in":
          expect(recorded).toMatchObject({ firmware: { installed: { version: "1.4.0" }, last_fetch: null }, last_check_at: null });
          expect(recorded.last_sync_at).not.toBeNull();
          break;
        case "refused":
          expect(recorded).toMatchObject({ firmware: { last_fetch: null }, battery: { charging: false } });
          expect(recorded.battery.volts).toBeLessThan(3.85);
          expect(recorded.last_check_at).not.toBeNull();
          break;
        case "no radio":
          expect(recorded).toMatchObject({ last_check_at: null, last_sync_at: null });
          break;
        case "unauthorized":
          expect(recorded.revoked_at).not.toBeNull();
          expect(recorded.last_sync_at).toBeNull();
          break;
      }
    });
  });

  it("times every request the badges made, as they made them", () => {
    // checks: 8 updated + 1 refused; syncs: one at each boot on USB power (28, the revoked
    // badge's 401 included) and one more per install, which reboots and reports ok.
    expect(summary.latencyMs.check?.count).toBe(9);
    expect(summary.latencyMs.sync?.count).toBe(28 + 8);
    expect(summary.latencyMs.downloadHead?.count).toBe(8);
    expect(summary.latencyMs.download?.count).toBe(8);
    for (const stats of Object.values(summary.latencyMs)) {
      expect(stats!.p50).toBeGreaterThan(0);
      expect(stats!.p50).toBeLessThanOrEqual(stats!.p99);
      expect(stats!.p99).toBeLessThanOrEqual(stats!.max);
    }
    expect(summary.maxConcurrentDownloads).toBeGreaterThanOrEqual(1);
    expect(summary.maxConcurrentDownloads).toBeLessThanOrEqual(8);
    expect(summary.startLagMs?.count).toBe(BADGES);
    expect(summary.peakRssBytes).toBeGreaterThan(0);
  });

  it("prints a table naming each outcome and each kind of request", () => {
    const text = formatFleetSummary(summary);
    for (const name of ["updated", "checked in", "no radio", "refused", "battery_low", "unauthorized"]) expect(text).toContain(name);
    for (const kind of ["check", "sync", "download, to headers", "download, whole image"]) expect(text).toMatch(new RegExp(`^${kind} +\\d`, "m"));
    expect(text).toMatch(/^max concurrent downloads \d/m);
  });
});

describe("badgebench sim fleet", () => {
  it("runs a small fleet against a server in its own process and prints one JSON object", async () => {
    const result = await run(["sim", "fleet", "--badges", "20", "--downloading", "5", "--json"]);
    expect(result.code, result.stderr).toBe(0);
    const body = JSON.parse(result.stdout);
    expect(body).toMatchObject({ object: "sim_fleet", badges: 20, asked: 5, release: { from: "1.4.0", to: "1.5.0" } });
    expect(Object.fromEntries(body.outcomes.map((o: { outcome: string; count: number }) => [o.outcome, o.count]))).toEqual({ "checked in": 15, updated: 5 });
    expect(body.latencyMs.check.count).toBe(5);
  });

  it("refuses --server without an API key in one line (exit 2)", async () => {
    const result = await run(["sim", "fleet", "--badges", "5", "--server", "http://127.0.0.1:9"]);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/^badgebench: --server needs an API key: --key KEY or BADGEBENCH_API_KEY .*\n$/);
  });
});

describe("runFleet's threadNice", () => {
  it.each([-1, 20, 2.5])("refuses %s before any badge starts: the badges' threads may only be made nicer, 0 to 19", async (threadNice) => {
    const fleet = runFleet({ serverUrl: "http://127.0.0.1:9", badges: [{ token: "dtk_test_x", version: "1.4.0", battery: { volts: 4.1, charging: true } }], updateShare: 0, spreadMs: 0, threadNice });
    await expect(fleet).rejects.toThrow(new RangeError(`threadNice ${threadNice} must be a whole number from 0 to 19`));
  });
});
