// SerialTarget with a real badge (relayPower and wallClock), where the rig's relay makes the power faults:
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
import { relayPower, wallClock } from "../../hil/target-strategies.ts";

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
    off: async (options) => {
      mark("off");
      on = false;
      options?.onSent?.();
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
  const target = new SerialTarget(serial, {
    power: relayPower({ relay, usbRelay, powerOffMs: 5 }),
    clock: wallClock({ settleMs: 5 }),
    oracle: new ModelOracle(),
    stepTimeoutMs: 5000,
  });
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
    expect(target.extraChecks()).toEqual([
      { field: "power.cut", expected: "during the partition switch, before otadata was written", observed: "during the partition switch, before otadata was written", passed: true },
      expect.objectContaining({ field: "model", passed: true }),
    ]);
  });
});

describe("a rig with a USB power relay beside the battery's", () => {
  it("cuts both, keeps USB off when the scenario unplugs while the power is out, and waits for the wake when USB power comes to a sleeping badge", async () => {
    let now = "awake.idle";
    const badge = scriptedBadge((line) => {
      if (line === "status") badge.print(status(now, usb ? "charging" : "battery"));
      if (line === "check") {
        now = "online.downloading";
        badge.print(state("online.checking"), state("online.downloading"), { kind: "progress", bytes: 53248, total: TOTAL });
      }
    });
    const switched: string[] = [];
    let usb = true;
    const boot: ConsoleEvent = { kind: "boot", slot: "ota_0", version: "1.4.0", cause: "power-on" };
    const report = "err|1.5.0|power lost during download after 0% (0 of 256 KiB)";
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
    expect(target.extraChecks()).toEqual([
      { field: "power.cut", expected: "at download byte 52428, before byte 65536", observed: "at download byte 52428, before byte 65536 (the badge had printed 53248)", passed: true },
      expect.objectContaining({ field: "model", passed: true }),
    ]);
  });
});

describe("where a power cut lands", () => {
  /** A badge that downloads to `printedFirst` on `check`; the relay's cut reaches it after it printed `inFlight`. */
  async function cutAfter(fault: { kind: "brownout"; atPercent: number } | { kind: "brownout"; during: "switch" }, printedFirst: ConsoleEvent[], inFlight: ConsoleEvent[]) {
    let now = "awake.idle";
    const badge = scriptedBadge((line) => {
      if (line === "status") badge.print(status(now));
      if (line === "check") {
        now = "online.downloading";
        badge.print(state("online.checking"), state("online.downloading"), ...printedFirst);
      }
    });
    const { relay } = recordingRelay({
      off: () => badge.print(...inFlight),
      on: () => {
        now = "awake.idle";
        badge.print({ kind: "boot", slot: "ota_0", version: "1.4.0", cause: "power-on" }, state("booting"), state("awake.idle"));
      },
    });
    const target = await realTarget(badge, relay);
    badge.print(state("awake.idle"));
    await target.armBrownout(fault);
    await target.checkForUpdate();
    await target.comeToRest();
    await target.comeToRest({ poweredOnly: true });
    return target.extraChecks().find((check) => check.field === "power.cut");
  }
  const progress = (bytes: number): ConsoleEvent => ({ kind: "progress", bytes, total: TOTAL });
  const md5: ConsoleEvent = { kind: "md5", result: "ok", got: MD5, want: MD5 };

  it("passes when the badge had not reached the next install checkpoint when the power went", async () => {
    // 99 % of 262144 is byte 259522; the window ends with the download
    expect(await cutAfter({ kind: "brownout", atPercent: 99 }, [progress(257024), progress(260096)], [progress(261120)])).toEqual({
      field: "power.cut",
      expected: "at download byte 259522, before byte 262144",
      observed: "at download byte 259522, before byte 262144 (the badge had printed 261120)",
      passed: true,
    });
  });

  it("fails, saying how far the badge got, when the relay's latency let it finish the download or pass the checkpoint", async () => {
    const late = await cutAfter({ kind: "brownout", atPercent: 99 }, [progress(260096)], [progress(TOTAL), md5, state("online.switching")]);
    expect(late).toMatchObject({ passed: false, observed: "late: the badge entered online.switching before the power went" });
    const past = await cutAfter({ kind: "brownout", atPercent: 10 }, [progress(27648)], [progress(65536)]);
    expect(past).toMatchObject({ passed: false, expected: "at download byte 26214, before byte 65536", observed: "late: the badge had downloaded 65536 bytes before the power went" });
    // the badge found its USB power gone before the battery's: it failed the download itself
    const unplugged = await cutAfter({ kind: "brownout", atPercent: 10 }, [progress(27648)], [state("updateFailed")]);
    expect(unplugged).toMatchObject({ passed: false, observed: "late: the badge entered updateFailed before the power went" });
  });

  it("fails a cut meant for the partition switch that came once otadata was written", async () => {
    const late = await cutAfter({ kind: "brownout", during: "switch" }, [progress(TOTAL), md5, state("online.switching")], [{ kind: "switch", slot: "ota_1" }]);
    expect(late).toEqual({
      field: "power.cut",
      expected: "during the partition switch, before otadata was written",
      observed: "late: the badge printed switch slot=ota_1 before the power went",
      passed: false,
    });
  });
});

describe("a badge whose clock runs faster than the wall (the rig file's clockFactor)", () => {
  it("waits the scenario's seconds of badge time, divided by the factor, and powers a badge the rig left off as the scenario starts", async () => {
    let on = false;
    const badge = scriptedBadge((line) => {
      if (line === "status") badge.print(status("awake.idle"));
    });
    const battery = recordingRelay({ on: () => ((on = true), badge.print({ kind: "boot", slot: "ota_0", version: "1.4.0", cause: "power-on" }), badge.print(state("awake.idle"))) }, { name: "battery", switched: [], on: false });
    const usb = recordingRelay({}, { name: "usb", switched: battery.switched, on: false });
    const serial = await SerialConsole.open({ port: badge.path, binding: badge.binding });
    const target = new SerialTarget(serial, { power: relayPower({ relay: battery.relay, usbRelay: usb.relay, clockFactor: 1000 }), clock: wallClock({ factor: 1000 }), oracle: new ModelOracle() });
    closing.push(() => target.close());
    expect(await target.powerUp(true)).toBe(true);
    expect(on).toBe(true);
    expect(battery.switched).toEqual(["usb on", "battery on"]);
    expect(await target.powerUp(true)).toBe(false); // it has power: nothing switched
    await target.comeToRest();
    // 30 s of badge time; at the wall's pace this would outlast the test's 5 s timeout
    await target.wait(30);
    expect(target.observations.map((o) => o.detail)).toContain("wait 30 s of badge time (0.03 s at 1000x)");
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
