// SerialTarget with a real badge (`badge: "real"`), where the rig's relay makes the power faults:
// a scripted badge on @serialport/binding-mock and a relay that records its switches. The
// reference badge in C runs the same paths end to end (reference-badge-rig.test.ts); these pin
// each rule down on its own: where a switch brownout is cut, what the badge printed before the
// cut, plugging in through the relay, a USB power relay beside it, and a wearer's press the
// badge cannot act on.
import { SerialPortMock } from "serialport";
import { afterEach, describe, expect, it } from "vitest";
import { formatConsoleEvent, type ConsoleEvent } from "../../firmware/index.ts";
import { ModelOracle } from "../../hil/model-oracle.ts";
import type { PowerRelay } from "../../hil/power-relay.ts";
import { SerialConsole, type SerialBinding } from "../../hil/serial-console.ts";
import { SerialTarget, SerialTargetError } from "../../hil/serial-target.ts";

const MockBinding = SerialPortMock.binding;
const MD5 = "0123456789abcdef0123456789abcdef";
const TOTAL = 262144;

/** A badge end that answers the host's lines with `respond`; `print` writes lines to the host. */
function scriptedBadge(respond: (line: string) => void) {
  const path = `/dev/ttyREALBADGE${Math.random().toString(36).slice(2)}`;
  MockBinding.createPort(path);
  let port: Awaited<ReturnType<typeof MockBinding.open>> | null = null;
  const binding: SerialBinding = {
    list: () => MockBinding.list(),
    async open(options) {
      const opened = await MockBinding.open(options);
      port = opened;
      const write = opened.write.bind(opened);
      opened.write = async (data: Buffer) => {
        await write(data);
        for (const line of data.toString().split("\n").filter(Boolean)) setImmediate(() => respond(line));
      };
      return opened;
    },
  };
  const print = (...events: ConsoleEvent[]) => port?.isOpen && port.emitData(Buffer.from(events.map((event) => `${formatConsoleEvent(event)}\r\n`).join("")));
  return { path, binding, print };
}

/** A relay that records each switch (in `switched`, named when given), and runs `then` after it. */
function recordingRelay(then: { on?: () => void; off?: () => void }, named?: { name: string; switched: string[]; on: boolean }) {
  const switched = named?.switched ?? [];
  const mark = (what: string) => switched.push(named ? `${named.name} ${what}` : what);
  let on = named?.on ?? true;
  const relay: PowerRelay = {
    topic: named?.name ?? "bench",
    on: async () => {
      mark("on");
      if (!on) then.on?.();
      on = true;
    },
    off: async () => {
      mark("off");
      on = false;
      then.off?.();
    },
    state: async () => (on ? "ON" : "OFF"),
    cycle: async () => {},
    close: async () => {},
  };
  return { relay, switched };
}

const closing: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closing.splice(0)) await close();
});

async function realTarget(badge: ReturnType<typeof scriptedBadge>, relay: PowerRelay | null, usbRelay?: PowerRelay) {
  const serial = await SerialConsole.open({ port: badge.path, binding: badge.binding });
  const target = new SerialTarget(serial, { badge: "real", relay, usbRelay, oracle: new ModelOracle(), settleMs: 5, powerOffMs: 5, stepTimeoutMs: 5000 });
  closing.push(() => target.close());
  return target;
}

const state = (path: string): ConsoleEvent => ({ kind: "state", path });
const status = (path: string, power: "battery" | "charging" = "charging"): ConsoleEvent => ({ kind: "status", version: "1.4.0", slot: "ota_0", state: path, mv: 3950, power, token: true, report: null, taps: 0 });

describe("a real badge's power cut during the partition switch", () => {
  it("is made as the badge enters online.switching; lines in flight are taken as printed before the cut, the boot after it as the power coming back", async () => {
    let now = "awake.idle";
    let cutIn: string | null = null;
    const badge = scriptedBadge((line) => {
      if (line === "status") badge.print(status(now));
      if (line === "check") {
        now = "online.switching";
        badge.print(
          state("online.checking"),
          state("online.downloading"),
          { kind: "progress", bytes: TOTAL, total: TOTAL },
          { kind: "md5", result: "ok", got: MD5, want: MD5 },
          state("online.switching"),
        );
      }
    });
    const { relay, switched } = recordingRelay({
      // the screen line was on its way when the power went: the host reads it after the cut
      off: () => {
        cutIn = target.state();
        badge.print({ kind: "screen", text: "Updating to 1.5.0\nInstalling, keep the badge plugged in" });
      },
      on: () => {
        now = "awake.idle";
        badge.print(
          { kind: "boot", slot: "ota_0", version: "1.4.0", cause: "power-on" },
          state("booting"),
          { kind: "report.stored", report: "err|1.5.0|power lost during the partition switch" },
          state("awake.idle"),
        );
      },
    });
    const target = await realTarget(badge, relay);
    badge.print(state("awake.idle"));
    await target.armBrownout({ kind: "brownout", during: "switch" });
    await target.checkForUpdate();
    await target.comeToRest();
    expect(cutIn).toBe("online.switching");
    expect(target.state()).toBe("off");
    await target.plugIn(); // the next step, played while the power is out: the relay switches it back on, then the boot
    await target.comeToRest({ poweredOnly: true });

    expect(switched).toEqual(["off", "on"]);
    expect(target.stateHistory()).toEqual(["awake.idle", "online.checking", "online.downloading", "online.switching", "off", "booting", "awake.idle"]);
    expect(target.screenHistory()).toContain("Updating to 1.5.0\nInstalling, keep the badge plugged in");
    expect(target.observations.map((o) => o.detail)).toContain('printed before the power cut: screen text="Updating to 1.5.0\\nInstalling, keep the badge plugged in"');
    expect(target.extraChecks()).toEqual([expect.objectContaining({ field: "model", passed: true })]);
  });
});

describe("a rig with a USB power relay beside the battery's", () => {
  it("cuts both, keeps USB off when the scenario unplugs while the power is out, and waits for the wake when USB power comes to a sleeping badge", async () => {
    let now = "awake.idle";
    const badge = scriptedBadge((line) => {
      if (line === "status") badge.print(status(now, usb ? "charging" : "battery"));
      if (line === "check") {
        now = "online.downloading";
        badge.print(state("online.checking"), state("online.downloading"), { kind: "progress", bytes: 65536, total: TOTAL });
      }
    });
    const switched: string[] = [];
    let usb = true;
    const boot: ConsoleEvent = { kind: "boot", slot: "ota_0", version: "1.4.0", cause: "power-on" };
    const report = "err|1.5.0|power lost during download after 25% (64 of 256 KiB)";
    const battery = recordingRelay(
      {
        on: () => {
          // back on its battery alone: no radio, so the report waits
          now = "awake.idle";
          badge.print(boot, state("booting"), { kind: "report.stored", report }, state("awake.idle"));
        },
      },
      { name: "battery", switched, on: true },
    );
    const usbRelay = recordingRelay(
      {
        on: () => {
          usb = true;
          // plugged in while asleep: it wakes, boots and sends the report
          now = "awake.idle";
          badge.print(state("wakingUp"), { ...boot, cause: "wake" }, state("booting"), state("online.syncing"), { kind: "report.sent", report }, { kind: "report.cleared", report }, state("awake.idle"));
        },
        off: () => (usb = false),
      },
      { name: "usb", switched, on: true },
    );
    const target = await realTarget(badge, battery.relay, usbRelay.relay);
    badge.print(boot, state("booting"), state("awake.idle"));
    await target.awaitBoot("at the start");
    await target.comeToRest();
    await target.armBrownout({ kind: "brownout", atPercent: 20 });
    await target.checkForUpdate();
    await target.comeToRest();
    expect(target.state()).toBe("off");
    await target.unplug(); // while the power is out: nothing to switch
    expect(switched).toEqual(["battery off", "usb off"]);
    await target.comeToRest();
    expect(switched).toEqual(["battery off", "usb off", "battery on"]);
    badge.print(state("asleep"));
    await target.wait(0.05); // it fell asleep meanwhile
    expect(target.state()).toBe("asleep");
    await target.plugIn();
    await target.comeToRest({ poweredOnly: true });

    expect(switched).toEqual(["battery off", "usb off", "battery on", "usb on"]);
    expect(target.stateHistory()).toEqual(
      expect.arrayContaining(["online.downloading", "off", "booting", "awake.idle", "asleep", "wakingUp", "online.syncing"]),
    );
    expect(target.stateHistory().slice(-6)).toEqual(["awake.idle", "asleep", "wakingUp", "booting", "online.syncing", "awake.idle"]);
    expect(target.extraChecks()).toEqual([expect.objectContaining({ field: "model", passed: true })]);
  });
});

describe("a wearer's press the badge refuses", () => {
  it("is no failure where the model ignores it (bricked), and fails the scenario where the badge should act (awake)", async () => {
    let now = "bricked";
    const badge = scriptedBadge((line) => {
      if (line === "status") badge.print(status(now));
      else badge.print({ kind: "refused", command: line, reason: `not now: the badge is ${now}` });
    });
    const target = await realTarget(badge, null);
    badge.print({ kind: "boot", slot: "ota_1", version: "1.5.0", cause: "restart" }, state("booting"), state("bricked"));
    await target.comeToRest();
    await target.syncNow();
    await target.comeToRest();
    expect(target.state()).toBe("bricked");
    expect(target.observations.map((o) => o.detail)).toContain("refused sync: not now: the badge is bricked");

    now = "awake.idle";
    badge.print({ kind: "boot", slot: "ota_1", version: "1.5.0", cause: "restart" }, state("booting"), state("awake.idle"));
    await target.comeToRest();
    await target.checkForUpdate();
    await expect(target.comeToRest()).rejects.toThrow(SerialTargetError);
  });
});
