// A badge behind its serial console as a `BadgeTarget` (badge-sim/badge-target.ts), so the
// scenario runner plays a scenario file on it unchanged: the wearer's actions are console
// commands, and state, screen, running version and token come from the `@bb` events it prints.
//
// Two kinds of badge sit behind a console. A real one lives in wall time: a power fault is a
// relay cut at the console progress byte (powerCutPlan), `wait` sleeps, and "at rest" is a
// resting `state` event confirmed by `status`; with a second relay on its USB power, plugging
// in and unplugging switch that one. The simulated one served on a serial line
// (sim-serial-badge.ts) lives on a simulated clock, so the world's part is played by the
// simulator-only commands `brownout`, `wait` and `rest`. Every event is also handed to the
// model oracle when there is one; its first deviation fails the scenario.
import { setTimeout as sleep } from "node:timers/promises";
import { isRestingState, type BadgeTarget, type PowerFault } from "../badge-sim/badge-target.ts";
import { batteryText, type Observation, type ObservationKind } from "../badge-sim/virtual-badge.ts";
import { formatConsoleCommand, type ConsoleCommand, type ConsoleEvent } from "../firmware/index.ts";
import { describeEvent } from "./model-oracle.ts";
import { powerCutPlan, type PowerCutPlan, type PowerRelay } from "./power-relay.ts";
import type { SerialConsole } from "./serial-console.ts";

/** What hil/model-oracle.ts's ModelOracle offers: the model's verdict on each console event. */
export interface ConsoleOracle {
  observe(event: ConsoleEvent): { previous: string; observed: string; allowed: string[]; message: string } | null;
}

export interface SerialTargetOptions {
  /** `simulated`: the serial-served simulated badge (simulator-only commands); `real`: a badge in wall time */
  badge: "simulated" | "real";
  /** a real badge's power relay; without one, a scenario with a power fault cannot run on a real badge */
  relay?: PowerRelay | null;
  /** a real badge's USB power relay: then `relay` is its battery, and plug/unplug switch this one */
  usbRelay?: PowerRelay | null;
  /** how long a real badge stays without power after a cut (wall ms, default 1000) */
  powerOffMs?: number;
  /** how long one step may take before the badge counts as stuck (wall ms; default 10 s simulated, 5 min real) */
  stepTimeoutMs?: number;
  /** a real badge: wall ms to let a command take effect before asking for `status` (default 300) */
  settleMs?: number;
  oracle?: ConsoleOracle | null;
  /** where the console's transcript is saved, for failure messages */
  transcriptPath?: string;
  /** what the rig does once the console is closed (hil run: give the badge the rig's token back) */
  afterClose?: () => Promise<void>;
}

/** The machine state whose switchBootSlot actor writes otadata: a power cut "during the switch" aims here. */
const SWITCHING_STATE = "online.switching";

/** What the wearer does on the badge (Tools menu, a card): commands the model may simply ignore. */
const WEARER_COMMANDS = new Set(["check", "sync", "tap"]);

/** The target could not do what a scenario asks (no relay for a power fault, the badge refused a command). */
export class SerialTargetError extends Error {
  override name = "SerialTargetError";
}

export class SerialTarget implements BadgeTarget {
  readonly observations: Observation[] = [];
  readonly #serial: SerialConsole;
  readonly #options: SerialTargetOptions;
  readonly #started = performance.now();
  #state = "unknown";
  #version: string | null = null;
  #provisioned = true;
  #states: string[] = [];
  #screens: string[] = [];
  #cuts: PowerFault[] = [];
  #plan: PowerCutPlan | null = null;
  /** power cuts the relay made so far */
  #cutsMade = 0;
  /** the relay cut the power and the badge has not booted since: what it prints now it printed before */
  #printedBeforeCut = false;
  /** when the power comes back after a cut (performance.now() ms), or null when it is not cut */
  #restoreAt: number | null = null;
  /** USB power as the scenario has it: the USB relay is switched back to this after a cut */
  #usbPlugged = false;
  #deviation: { previous: string; observed: string; allowed: string[]; message: string } | null = null;

  constructor(serial: SerialConsole, options: SerialTargetOptions) {
    this.#serial = serial;
    this.#options = options;
  }

  get simulated(): boolean {
    return this.#options.badge === "simulated";
  }

  checkForUpdate = () => this.#send({ name: "check" });
  syncNow = () => this.#send({ name: "sync" });
  tapCard = (uid: string) => this.#send({ name: "tap", uid });

  /**
   * On a rig with one relay, that relay is the badge's external power, so plugging in is switching
   * it on (nothing to do when it is on); with a USB power relay, it is switching that one on. A
   * badge that was off then boots, and one asleep on its battery wakes, before the next step.
   */
  async plugIn(): Promise<void> {
    const { relay, usbRelay } = this.#options;
    if (this.simulated || !relay) return this.#send({ name: "plug" });
    await this.#catchUp();
    const wakes = this.#state === "off" || (usbRelay && !this.#usbPlugged && this.#state === "asleep");
    this.#usbPlugged = true;
    this.#note("input", usbRelay ? "plug in (USB relay on)" : "plug in (relay on)");
    if (this.#restoreAt !== null) return this.#restorePower();
    await (usbRelay ?? relay).on();
    if (wakes) await this.#nextEvent(this.#options.stepTimeoutMs ?? 10_000, "a boot event after the relay powered the badge", (event) => event.kind === "boot");
  }

  /** With a USB power relay, switching it off (while the power is cut, it stays off when the power comes back). */
  async unplug(): Promise<void> {
    const usbRelay = this.#options.usbRelay;
    if (this.simulated || !usbRelay) return this.#send({ name: "unplug" });
    this.#usbPlugged = false;
    this.#note("input", "unplug (USB relay off)");
    if (this.#restoreAt === null) await usbRelay.off();
  }

  async wait(seconds: number): Promise<void> {
    if (this.simulated) return this.#send({ name: "wait", seconds });
    if (this.#restoreAt !== null) await this.#restorePower();
    this.#note("input", `wait ${seconds} s`);
    await sleep(seconds * 1000);
    // what the badge printed meanwhile (it may have gone to sleep), so the next step knows where it is
    await this.#catchUp();
  }

  async armBrownout(fault: PowerFault): Promise<void> {
    if (this.simulated) return this.#send({ name: "brownout", at: "during" in fault ? "switch" : fault.atPercent });
    if (!this.#options.relay) throw new SerialTargetError("the scenario cuts the power, and this rig has no power relay (`power` in the rig file)");
    this.#cuts.push(fault);
  }

  async comeToRest(options: { poweredOnly?: boolean } = {}): Promise<void> {
    if (this.simulated) {
      // The simulated badge runs on its own clock: ask it to run to rest, then ask where it is.
      await this.#send({ name: "rest", powered: options.poweredOnly === true });
      const status = (await this.#status())!;
      if (!isRestingState(status.state, options)) throw new SerialTargetError(`the simulated badge said it rested, then reported state ${status.state}`);
      return;
    }
    if (this.#restoreAt !== null) await this.#restorePower();
    const limit = performance.now() + (this.#options.stepTimeoutMs ?? 300_000);
    for (;;) {
      if (isRestingState(this.#state, options)) {
        // The console is off without power and in deep sleep: the last state printed is the answer.
        if (this.#state === "off" || this.#state === "asleep") return;
        await sleep(this.#options.settleMs ?? 300);
        const status = await this.#status();
        if (isRestingState(status?.state ?? this.#state, options)) return;
        if (status === null) continue; // the relay cut the power while the badge was asked
      }
      const left = limit - performance.now();
      if (left <= 0) throw this.#stuck(options, this.#options.stepTimeoutMs ?? 300_000);
      await this.#nextEvent(left, `a resting state (${restingList(options)}); the badge is in ${this.#state}`);
    }
  }

  state = () => this.#state;
  runningVersion = () => this.#version;
  isProvisioned = () => this.#provisioned;
  stateHistory = () => [...this.#states];
  screenHistory = () => [...this.#screens];
  elapsedMs = () => Math.round(performance.now() - this.#started);

  extraChecks() {
    if (!this.#options.oracle) return [];
    const deviation = this.#deviation;
    const transcript = ` (${this.#transcriptPath()})`;
    return [
      deviation
        ? { field: "model", expected: `from ${deviation.previous}: ${deviation.allowed.join(", ")}`, observed: `${deviation.observed}: ${deviation.message}${transcript}`, passed: false }
        : { field: "model", expected: "every console event allowed by the badge model", observed: "every console event allowed by the badge model", passed: true },
    ];
  }

  async close(): Promise<void> {
    try {
      await this.#serial.close();
    } finally {
      await this.#options.afterClose?.();
    }
  }

  /** A real badge at the start of a session: reset it, so its state is known, and wait for its boot. */
  async reset(timeoutMs = 10_000): Promise<void> {
    await this.#send({ name: "reboot" });
    await this.awaitBoot("after reboot (is the badge asleep? press its button)", timeoutMs);
  }

  /** A real badge at the start of a session that something else restarts: waits for its boot. */
  async awaitBoot(why: string, timeoutMs = 10_000): Promise<void> {
    // USB power is as the rig left it
    if (this.#options.usbRelay) this.#usbPlugged = (await this.#options.usbRelay.state()) === "ON";
    await this.#nextEvent(timeoutMs, `a boot event ${why}`, (event) => event.kind === "boot");
  }

  /**
   * Asks for `status` and reads events up to its answer; null when the rig's relay cut the power
   * first (a real badge loses a question the power cut reached before its answer).
   */
  async #status(): Promise<Extract<ConsoleEvent, { kind: "status" }> | null> {
    await this.#send({ name: "status" });
    const timeout = this.#options.stepTimeoutMs ?? 10_000;
    const cuts = this.#cutsMade;
    const event = await this.#nextEvent(timeout, "the answer to status", (e) => e.kind === "status" || this.#cutsMade !== cuts);
    return event.kind === "status" ? event : null;
  }

  async #send(command: ConsoleCommand): Promise<void> {
    this.#note("input", formatConsoleCommand(command));
    await this.#serial.send(command);
  }

  /** Takes the events already received, without waiting. */
  async #catchUp(): Promise<void> {
    for (const event of this.#serial.takeEvents()) await this.#take(event);
  }

  /** Reads events until one `until` accepts (default: the next one), noting each; fails on `refused`. */
  async #nextEvent(timeoutMs: number, what: string, until: (event: ConsoleEvent) => boolean = () => true): Promise<ConsoleEvent> {
    for (;;) {
      let event: ConsoleEvent;
      try {
        event = await this.#serial.expectEvent(() => true, { timeoutMs });
      } catch (error) {
        throw new SerialTargetError(`waiting for ${what}: ${(error as Error).message}`, { cause: error });
      }
      await this.#take(event);
      if (until(event)) return event;
    }
  }

  async #take(event: ConsoleEvent): Promise<void> {
    // Lines still in flight when the relay cut the power were printed before the cut: the model
    // hears them first, and the power loss only when the badge boots again.
    if (this.#printedBeforeCut && event.kind === "boot") {
      this.#printedBeforeCut = false;
      this.#observe({ kind: "state", path: "off" });
    }
    this.#observe(event);
    if (this.#printedBeforeCut) {
      // shown and passed through before the cut: in the histories, but the badge is off now
      if (event.kind === "screen") this.#screens.push(event.text);
      if (event.kind === "state") this.#states.splice(this.#states.lastIndexOf("off"), 0, event.path);
      this.#note("power", `printed before the power cut: ${describeEvent(event)}`);
      return;
    }
    switch (event.kind) {
      case "boot":
        this.#version = event.version;
        this.#note("boot", `${event.slot} ${event.version} (${event.cause})`);
        return;
      case "state":
        await this.#enter(event.path);
        return;
      case "screen":
        this.#screens.push(event.text);
        this.#note("screen", event.text);
        return;
      case "status":
        this.#version = event.version;
        this.#provisioned = event.token;
        if (event.state !== this.#state) await this.#enter(event.state);
        this.#note("answer", `status: ${event.version} ${event.slot} ${event.state} ${event.mv} mV ${event.power} token=${event.token ? "yes" : "no"}`);
        this.#note("battery", batteryText({ volts: event.mv / 1000, externalPower: event.power !== "battery", charging: event.power === "charging" }));
        return;
      case "token.cleared":
        this.#provisioned = false;
        this.#note("token.cleared", `the server refused the device token (401) on ${event.request}`);
        return;
      case "report.stored":
      case "report.cleared":
        this.#note(event.kind, event.report);
        return;
      case "report.sent":
        this.#note(event.kind, `ota=${event.report}`);
        return;
      case "tap.queued":
        this.#note(event.kind, `${event.n}|${event.uid}|${event.at}`);
        return;
      case "progress":
        this.#note("download", `${event.bytes} of ${event.total}`);
        await this.#maybeCut({ progress: event });
        return;
      case "md5":
        this.#note("answer", `md5 ${event.result}: got ${event.got}, want ${event.want}`);
        return;
      case "switch":
        this.#note("flash.write", `otadata: boot ${event.slot}`);
        return;
      case "refused":
        this.#note("answer", `refused ${event.command}: ${event.reason}`);
        // A wearer's press that the badge cannot act on now (unprovisioned, bricked, busy) does
        // nothing in the model either (it acts on them awake); refusing it is the console contract's answer.
        if (WEARER_COMMANDS.has(event.command.split(" ")[0]!) && !this.#state.startsWith("awake.")) return;
        throw new SerialTargetError(`the badge refused ${JSON.stringify(event.command)}: ${event.reason}`);
    }
  }

  async #enter(path: string): Promise<void> {
    this.#state = path;
    this.#states.push(path);
    this.#note("state", path);
    // The `switch` line comes once otadata is written, too late to cut the power during it.
    if (path === SWITCHING_STATE) await this.#maybeCut({ switch: true });
  }

  /**
   * A real badge's power fault: the relay cuts at the planned progress byte, or as the badge
   * enters the partition switch (its otadata erase and write take tens of ms on flash). The power
   * comes back when the scenario goes on (its next step, or the rest at its end), at least
   * `powerOffMs` after the cut: as on the simulated badge, the next step happens while it is off.
   */
  async #maybeCut(at: { progress?: { bytes: number; total: number }; switch?: boolean }): Promise<void> {
    const relay = this.#options.relay;
    if (!relay || this.simulated) return;
    if (!this.#plan && this.#cuts.length > 0 && at.progress) this.#plan = powerCutPlan(this.#cuts[0]!, at.progress.total);
    if (!this.#plan && this.#cuts.length > 0 && at.switch) this.#plan = powerCutPlan(this.#cuts[0]!, 1);
    const plan = this.#plan;
    if (!plan) return;
    const due = plan.cutAt === "switch" ? at.switch === true : at.progress !== undefined && at.progress.bytes >= plan.byte;
    if (!due) return;
    this.#cuts.shift();
    this.#plan = null;
    this.#note("power", `relay off (${plan.cutAt === "switch" ? "at the switch" : `at byte ${plan.byte}`})`);
    // Both at once: one after the other, the badge would run on for the first relay's round
    // trip (a 99 % cut then lands after the switch). The battery's command is sent first.
    await Promise.all([relay.off(), this.#options.usbRelay?.off()]);
    this.#cutsMade++;
    await this.#enter("off");
    this.#printedBeforeCut = true;
    this.#restoreAt = performance.now() + (this.#options.powerOffMs ?? 1000);
  }

  /** The power back after a cut (USB too when the scenario has it plugged in), and the boot that follows. */
  async #restorePower(): Promise<void> {
    await sleep(Math.max(0, this.#restoreAt! - performance.now()));
    this.#restoreAt = null;
    // USB first, so a badge that has it boots on it
    if (this.#usbPlugged) await this.#options.usbRelay?.on();
    await this.#options.relay!.on();
    this.#note("power", this.#options.usbRelay ? `relay on, USB relay ${this.#usbPlugged ? "on" : "off"}` : "relay on");
    await this.#nextEvent(this.#options.stepTimeoutMs ?? 10_000, "a boot event after the relay powered the badge", (event) => event.kind === "boot");
  }

  #observe(event: ConsoleEvent): void {
    const deviation = this.#options.oracle?.observe(event) ?? null;
    if (deviation && !this.#deviation) this.#deviation = deviation;
  }

  #stuck(options: { poweredOnly?: boolean }, ms: number): SerialTargetError {
    return new SerialTargetError(`the badge did not come to rest (${restingList(options)}) within ${ms} ms; it is in ${this.#state}\n${this.#transcriptPath()}`);
  }

  #transcriptPath(): string {
    return this.#options.transcriptPath ? `transcript: ${this.#options.transcriptPath}` : `console ${this.#serial.path}, no transcript saved`;
  }

  #note(kind: ObservationKind, detail: string): void {
    this.observations.push({ t: Math.round(performance.now() - this.#started), kind, detail });
  }
}

function restingList(options: { poweredOnly?: boolean }): string {
  return ["awake.idle", "awake.plugInPrompt", "asleep", "unprovisioned", "bricked", ...(options.poweredOnly ? [] : ["off"])].join(", ");
}
