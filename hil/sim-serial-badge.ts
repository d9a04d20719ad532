// The simulated badge served on a serial line (issue 5): the badge end of the cable speaks the
// badge test console (firmware/console.ts) for a VirtualBadge, so the host drives it through
// the same SerialConsole and serial target a real badge gets, and CI exercises the whole serial
// path. Two transports: node-serialport's @serialport/binding-mock in this process, and a pty
// pair made by socat (the bridge opens the badge end with node-serialport).
//
// What the badge observes is printed as `@bb` events, between ESP-IDF-style log lines and boot
// ROM output (noise the host must skip). Commands from the host are executed one at a time, in
// order; after each one the bridge runs the virtual badge, on its simulated clock, until it
// rests (as the scenario runner does), so a 30 s sleep or a 2 MB download over serial still
// costs milliseconds. The simulator-only commands `wait`, `brownout` and `rest` stand in for
// what the world does to a real badge (time passing, a relay cutting its power), and `setup`
// for what a bench does before a scenario (esptool writing the app and NVS, a bench supply): the
// badge starts over as a new one, made by the maker with the setup (benchBadgeMaker).
import { createHash } from "node:crypto";
import { join } from "node:path";
import { SerialPort, SerialPortMock } from "serialport";
import { brownoutPoint, isRestingState, virtualBadgeFor, type BadgeTargetFactory } from "../badge-sim/runners/badge-target.ts";
import type { SlotName } from "../badge-sim/hardware/otadata.ts";
import type { Observation } from "../badge-sim/virtual-badge/observation-log.ts";
import { createVirtualBadge, type VirtualBadge, type VirtualBadgeOptions } from "../badge-sim/virtual-badge/virtual-badge.ts";
import {
  formatConsoleEvent,
  type BenchSetup,
  parseConsoleCommand,
  type BootCause,
  type ConsoleCommand,
  type ConsoleEvent,
  type TokenRequest,
} from "../firmware/index.ts";
import { SerialConsole, type SerialBinding } from "./serial-console.ts";
import { SerialTarget, type ConsoleOracle } from "./serial-target.ts";
import { consolePower, simulatedClock } from "./target-strategies.ts";
import { openPtyPair } from "./pty-pair.ts";

// @serialport/binding-mock, by way of serialport: its own types do not resolve under NodeNext.
const MockBinding = SerialPortMock.binding;

/** The badge prints progress at least this often, and at the last byte. */
const PROGRESS_STEP_BYTES = 64 * 1024;

/** Makes the badge behind the console: at power-on (no `bench`), and after each `setup` command. */
type BadgeMaker = (bench?: BenchSetup) => VirtualBadge;

/**
 * A maker for SimSerialBadge: the badge `options` describe, or, after a `setup`, a new one
 * running the setup's version from ota_0 on its supply (and token), talking to the same server.
 */
export function benchBadgeMaker(options: VirtualBadgeOptions): BadgeMaker {
  return (bench) =>
    createVirtualBadge(
      bench
        ? {
            ...options,
            version: bench.version,
            display: undefined,
            token: bench.token ?? options.token,
            battery: { volts: bench.mv / 1000, charging: bench.power === "charging", externalPower: bench.power !== "battery" },
          }
        : options,
    );
}

/**
 * One simulated badge behind a console. `start()` powers it on (the transport calls it when the
 * host is there); `hear()` takes the bytes the host wrote; what the badge prints goes to `print`.
 */
export class SimSerialBadge {
  #makeBadge: BadgeMaker;
  #print: (text: string) => void;
  #badge: VirtualBadge | null = null;
  #heard = "";
  #queue: Promise<void> = Promise.resolve();
  #stopped = false;
  // What the printer needs to remember between observations.
  #offer: { total: number; md5: string } | null = null;
  #downloadSlot: SlotName | null = null;
  #progressPrinted = 0;
  #md5Due = false;
  #lastState = "";
  #lastRequest: TokenRequest = "check";

  constructor(makeBadge: BadgeMaker, print: (text: string) => void) {
    this.#makeBadge = makeBadge;
    this.#print = print;
  }

  get badge(): VirtualBadge | null {
    return this.#badge;
  }

  /** Powers the badge on (once): from now on it prints what it observes. */
  start(): void {
    if (this.#badge || this.#stopped) return;
    this.#powerOn(this.#makeBadge());
  }

  #powerOn(badge: VirtualBadge): void {
    this.#noise("ets Jul 29 2019 12:21:46", "", "rst:0x1 (POWERON_RESET),boot:0x13 (SPI_FAST_FLASH_BOOT)");
    this.#badge = badge;
    // what the printer remembers belongs to the badge that was
    this.#offer = null;
    this.#downloadSlot = null;
    this.#md5Due = false;
    this.#lastState = "";
    this.#held = null;
    for (const observation of badge.log) this.#observed(observation);
    badge.onObservation((observation) => {
      if (this.#badge === badge) this.#observed(observation);
    });
  }

  /** Bytes the host wrote: every whole line is a command, run after the ones before it. */
  hear(bytes: Buffer | string): void {
    this.#heard += bytes.toString();
    for (let end = this.#heard.search(/[\r\n]/); end !== -1; end = this.#heard.search(/[\r\n]/)) {
      const line = this.#heard.slice(0, end);
      this.#heard = this.#heard.slice(end + 1);
      this.#queue = this.#queue.then(() => this.#execute(line));
    }
  }

  /** Powers the badge off for good; commands still queued are dropped. */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#badge?.stop();
  }

  async #execute(line: string): Promise<void> {
    if (this.#stopped) return;
    const poweringOn = this.#badge === null;
    this.start();
    const badge = this.#badge!;
    const parsed = parseConsoleCommand(line);
    if (parsed === null) return;
    if (!parsed.ok) return this.#event({ kind: "refused", command: line.trim(), reason: parsed.message });
    const command = parsed.command;
    try {
      this.#log(`console: ${line.trim()}`);
      await this.#run(badge, command, poweringOn);
    } catch (error) {
      if (this.#stopped) return;
      this.#event({ kind: "refused", command: line.trim(), reason: `the simulated badge failed: ${(error as Error).message}` });
    }
  }

  /** `poweringOn`: the command is the first the badge hears, and it powered on to hear it. */
  async #run(badge: VirtualBadge, command: ConsoleCommand, poweringOn: boolean): Promise<void> {
    const toRest = () => badge.runUntil((b) => isRestingState(b.state()));
    switch (command.name) {
      case "check":
        badge.checkForUpdate();
        return toRest();
      case "sync":
        badge.syncNow();
        return toRest();
      case "tap":
        badge.tapCard(command.uid);
        return toRest();
      case "plug":
        badge.plugIn();
        return toRest();
      case "unplug":
        badge.unplug();
        return toRest();
      case "wait":
        await badge.advance(command.seconds * 1000);
        return toRest();
      case "brownout":
        badge.battery.brownoutAt(brownoutPoint(command.at === "switch" ? { kind: "brownout", during: "switch" } : { kind: "brownout", atPercent: command.at }));
        return;
      case "rest":
        return badge.runUntil((b) => isRestingState(b.state(), { poweredOnly: command.powered }));
      case "status":
        return this.#status(badge);
      case "setup": {
        // the bench's flash and supply: the old badge is gone, a new one powers on as set up
        badge.stop();
        const { name: _, ...bench } = command;
        this.#powerOn(this.#makeBadge(bench));
        return this.#badge!.runUntil((b) => isRestingState(b.state()));
      }
      case "reboot":
        // esp_restart(): the ROM's reset banner, then a boot from what flash and NVS hold. A badge
        // that has just powered on to hear the command has nothing to restart.
        if (!poweringOn && badge.state() !== "off") {
          this.#noise("ets Jul 29 2019 12:21:46", "", "rst:0xc (SW_CPU_RESET),boot:0x13 (SPI_FAST_FLASH_BOOT)");
          badge.restart();
        }
        return toRest();
    }
  }

  #status(badge: VirtualBadge): void {
    const version = badge.runningVersion();
    const slot = badge.runningSlot() ?? (this.#lastBootSlot as SlotName | null);
    if (version === null || slot === null) return this.#event({ kind: "refused", command: "status", reason: "no app has started yet" });
    const { volts, externalPower, charging } = badge.battery.reading();
    this.#event({
      kind: "status",
      version,
      slot,
      // A real badge without power says nothing; the simulated one says `off` (a rig knows it cut the power).
      state: badge.state(),
      mv: Math.round(volts * 1000),
      power: externalPower ? (charging ? "charging" : "external") : "battery",
      token: badge.token() !== null,
      report: badge.pendingReport(),
      taps: badge.queuedTaps().length,
    });
  }

  #lastBootSlot: string | null = null;

  /** One observation as the firmware would print it: an event, log noise, or both. */
  #observed(observation: Observation): void {
    const { kind, detail } = observation;
    switch (kind) {
      case "boot": {
        const boot = /^(ota_[01]) (\S+) \(([a-z-]+)\)/.exec(detail);
        if (!boot) return this.#log(`boot: ${detail}`);
        this.#lastBootSlot = boot[1]!;
        const held = this.#held ?? [];
        this.#held = null;
        this.#noise(`I (${this.#ms()}) boot: Loaded app from partition ${boot[1]}`);
        this.#event({ kind: "boot", slot: boot[1] as SlotName, version: boot[2]!, cause: boot[3] as BootCause });
        for (const line of held) this.#write(line);
        return;
      }
      case "state": {
        // The model enters `booting` before the app descriptor is read; the firmware prints its
        // boot line first (it is the app starting), so the state waits for it.
        if (this.#held && detail !== "booting") this.#flushHeld();
        if (detail === "booting") this.#held = [];
        if (this.#md5Due && this.#lastState === "online.downloading") this.#printMd5();
        if (this.#lastState === "online.switching" && detail === "restarting" && this.#downloadSlot) this.#event({ kind: "switch", slot: this.#downloadSlot });
        this.#lastState = detail;
        // A real badge prints nothing as its power dies, beyond the brownout detector's line.
        if (detail === "off") this.#noise("", "Brownout detector was triggered", "");
        return this.#event({ kind: "state", path: detail });
      }
      case "screen":
        return this.#event({ kind: "screen", text: detail });
      case "request":
        this.#lastRequest = detail.startsWith("GET ") ? "download" : detail.includes("/sync") ? "sync" : "check";
        if (this.#lastRequest === "download") {
          this.#progressPrinted = 0;
          this.#md5Due = false;
        }
        return this.#log(`http: ${detail}`);
      case "answer": {
        const offer = /^check: offer \S+ \((\d+) bytes, md5 ([0-9a-f]{32})\)/.exec(detail);
        if (offer) this.#offer = { total: Number(offer[1]), md5: offer[2]! };
        // a whole image (200) or the rest of one after a resume (206; the bytes count from byte 0)
        const download = /^download: HTTP 20[06], (\d+) of (\d+) bytes, complete/.exec(detail);
        if (download && download[1] === download[2]) this.#md5Due = true;
        return this.#log(`http: ${detail}`);
      }
      case "flash.write": {
        const write = /^(ota_[01]) 0x([0-9a-f]+) \+(\d+)$/.exec(detail);
        if (!write || !this.#offer) return;
        this.#downloadSlot = write[1] as SlotName;
        const bytes = parseInt(write[2]!, 16) + Number(write[3]);
        const total = this.#offer.total;
        if (Math.floor(bytes / PROGRESS_STEP_BYTES) > Math.floor(this.#progressPrinted / PROGRESS_STEP_BYTES) || bytes === total) {
          this.#progressPrinted = bytes;
          this.#event({ kind: "progress", bytes, total });
        }
        return;
      }
      case "report.stored":
      case "report.cleared":
        return this.#event({ kind, report: detail });
      case "report.sent":
        return this.#event({ kind, report: detail.replace(/^ota=/, "") });
      case "token.cleared":
        return this.#event({ kind, request: this.#lastRequest });
      case "tap.queued": {
        const [n, uid, at] = detail.split("|");
        return this.#event({ kind, n: Number(n), uid: uid!, at: Number(at) });
      }
      case "power":
        return this.#log(`power: ${detail}`, "W");
      case "tap.sent":
      case "tap.cleared":
        return this.#log(`sync: ${kind} ${detail}`);
      default:
        return;
    }
  }

  /** The MD5 of what the download wrote, compared as the badge does once the last buffer is flushed. */
  #printMd5(): void {
    this.#md5Due = false;
    const badge = this.#badge;
    if (!badge || !this.#offer || !this.#downloadSlot) return;
    const got = createHash("md5").update(badge.flash.peekSlot(this.#downloadSlot, 0, this.#offer.total)).digest("hex");
    this.#event({ kind: "md5", result: got === this.#offer.md5 ? "ok" : "mismatch", got, want: this.#offer.md5 });
  }

  #ms(): number {
    return Math.round(this.#badge?.clock.now() ?? 0);
  }

  #event(event: ConsoleEvent): void {
    this.#write(`${formatConsoleEvent(event)}\r\n`);
  }

  /** An ESP-IDF log line, colour codes and all: noise to the host. */
  #log(text: string, level: "I" | "W" = "I"): void {
    const colour = level === "I" ? "32" : "33";
    this.#noise(`\x1b[0;${colour}m${level} (${this.#ms()}) ${text.replace(/[\r\n]/g, " ")}\x1b[0m`);
  }

  #noise(...lines: string[]): void {
    this.#write(lines.map((line) => `${line}\r\n`).join(""));
  }

  /** Lines printed after `state booting`, held until the boot line (null: nothing held). */
  #held: string[] | null = null;

  #flushHeld(): void {
    const held = this.#held ?? [];
    this.#held = null;
    for (const line of held) this.#write(line);
  }

  #write(text: string): void {
    if (this.#stopped) return;
    if (this.#held) this.#held.push(text);
    else this.#print(text);
  }
}

/** A simulated badge on a serial line: open a SerialConsole on `path` (with `binding`, when given). */
export interface ServedBadge {
  path: string;
  /** the binding to open `path` with; undefined for a pty (the platform's own) */
  binding?: SerialBinding;
  bridge: SimSerialBadge;
  close(): Promise<void>;
}

let mockPorts = 0;

/**
 * Serves a simulated badge on a new @serialport/binding-mock port. The badge powers on when the
 * host opens the port (as a USB badge resets when a monitor opens it) and off when it closes it.
 */
export function serveOnMockPort(makeBadge: BadgeMaker, options: { path?: string } = {}): ServedBadge {
  const path = options.path ?? `/dev/ttySIMBADGE${++mockPorts}`;
  MockBinding.createPort(path);
  let bridge!: SimSerialBadge;
  let port: Awaited<ReturnType<typeof MockBinding.open>> | null = null;
  bridge = new SimSerialBadge(makeBadge, (text) => {
    if (port?.isOpen) port.emitData(Buffer.from(text));
  });
  const binding: SerialBinding = {
    list: () => MockBinding.list(),
    async open(openOptions) {
      const opened = await MockBinding.open(openOptions);
      port = opened;
      // binding-mock has no hook for what the host writes or for closing: wrap this port's own.
      const write = opened.write.bind(opened);
      opened.write = async (data: Buffer) => {
        await write(data);
        bridge.hear(data);
      };
      const close = opened.close.bind(opened);
      opened.close = async () => {
        await close();
        await bridge.stop();
      };
      bridge.start();
      return opened;
    },
  };
  return {
    path,
    binding,
    bridge,
    close: async () => {
      await bridge.stop();
      if (port?.isOpen) await port.close();
    },
  };
}

/**
 * Serves a simulated badge on a pty pair made by socat: the host opens `path` with the
 * platform's binding, exactly as it opens /dev/ttyACM0. The badge powers on at the first line
 * the host sends (a pty cannot tell when its other end opens).
 */
export async function serveOnPty(makeBadge: BadgeMaker): Promise<ServedBadge> {
  const pair = await openPtyPair();
  let served: { bridge: SimSerialBadge; close(): Promise<void> };
  try {
    served = await serveOnPort(pair.device, makeBadge);
  } catch (error) {
    await pair.close();
    throw error;
  }
  return {
    path: pair.host,
    bridge: served.bridge,
    close: async () => {
      await served.close();
      await pair.close();
    },
  };
}

/**
 * Serves a simulated badge on the badge end of a serial line that exists already (one end of a
 * socat pty pair, or a real port with a null-modem cable to the host), opened with the
 * platform's binding. The badge powers on at the first line the host sends.
 */
export async function serveOnPort(path: string, makeBadge: BadgeMaker, options: { baudRate?: number } = {}): Promise<{ bridge: SimSerialBadge; close(): Promise<void> }> {
  const port = new SerialPort({ path, baudRate: options.baudRate ?? 115200, autoOpen: false, lock: false });
  await new Promise<void>((resolve, reject) => port.open((error) => (error ? reject(error) : resolve())));
  port.on("error", () => {});
  const bridge = new SimSerialBadge(makeBadge, (text) => {
    if (port.isOpen) port.write(text);
  });
  port.on("data", (chunk: Buffer) => bridge.hear(chunk));
  return {
    bridge,
    close: async () => {
      await bridge.stop();
      if (port.isOpen) await new Promise((resolve) => port.close(resolve));
    },
  };
}

export interface SimSerialTargetOptions {
  /** the serial line: binding-mock in this process (default), or a socat pty pair */
  transport?: "mock" | "pty";
  /** a model oracle per scenario (hil/model-oracle.ts) */
  oracle?: () => ConsoleOracle;
  /** a directory to save each session's transcript in */
  transcriptDir?: string;
}

let sessions = 0;

/**
 * A `BadgeTargetFactory` for the scenario runner: the scenario's virtual badge served on a serial
 * line, driven through SerialConsole and SerialTarget exactly as a real badge is.
 */
export function simSerialTarget(options: SimSerialTargetOptions = {}): BadgeTargetFactory {
  return async (setup) => {
    const served = options.transport === "pty" ? await serveOnPty(() => virtualBadgeFor(setup)) : serveOnMockPort(() => virtualBadgeFor(setup));
    const transcriptPath = options.transcriptDir && join(options.transcriptDir, `${++sessions}-${setup.scenario.name.replace(/[^A-Za-z0-9]+/g, "-")}.txt`);
    let serial: SerialConsole;
    try {
      serial = await SerialConsole.open({ port: served.path, binding: served.binding, transcriptPath });
    } catch (error) {
      await served.close();
      throw error;
    }
    const target = new SerialTarget(serial, { power: consolePower(), clock: simulatedClock(), oracle: options.oracle?.() ?? null, transcriptPath });
    const close = target.close.bind(target);
    target.close = async () => {
      await close();
      await served.close();
    };
    return target;
  };
}
