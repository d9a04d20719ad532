// A badge behind its serial console as a `BadgeTarget` (badge-sim/runners/badge-target.ts), so the
// scenario runner plays a scenario file on it unchanged: the wearer's actions are console
// commands, and state, screen, running version and token come from the `@bb` events it prints.
//
// What differs between the badges behind a console is injected (target-strategies.ts): how the
// power is switched and cut (console commands to the simulated badge, or the rig's relays) and
// how time passes (the simulated badge's clock, or the wall). sim-serial-badge.ts serves the
// simulated one; hil run drives a rig's. Every event is also handed to the model oracle when
// there is one; its first deviation fails the scenario.
import type { BadgeTarget, PowerFault } from "../badge-sim/runners/badge-target.ts";
import { batteryText, type Observation, type ObservationKind } from "../badge-sim/virtual-badge/observation-log.ts";
import { formatConsoleCommand, type BenchSetup, type ConsoleCommand, type ConsoleEvent } from "../firmware/index.ts";
import { describeEvent } from "./model-oracle.ts";
import type { SerialConsole } from "./serial-console.ts";
import { restingList, SerialTargetError, SWITCHING_STATE, type ClockStrategy, type PowerStrategy, type TargetControls } from "./target-strategies.ts";

export { SerialTargetError };

/** What hil/model-oracle.ts's ModelOracle offers: the model's verdict on each console event. */
export interface ConsoleOracle {
  observe(event: ConsoleEvent): { previous: string; observed: string; allowed: string[]; message: string } | null;
}

export interface SerialTargetOptions {
  /** how the power is switched and cut: consolePower() or relayPower() (target-strategies.ts) */
  power: PowerStrategy;
  /** how time passes: simulatedClock() or wallClock() */
  clock: ClockStrategy;
  /** how long one step may take before the badge counts as stuck (wall ms; default 10 s, a wall clock's rest 5 min) */
  stepTimeoutMs?: number;
  oracle?: ConsoleOracle | null;
  /** where the console's transcript is saved, for failure messages */
  transcriptPath?: string;
  /** what the rig does once the console is closed (hil run: give the badge the rig's token back) */
  afterClose?: () => Promise<void>;
}

/** What the wearer does on the badge (Tools menu, a card): commands the model may simply ignore. */
const WEARER_COMMANDS = new Set(["check", "sync", "tap"]);

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
  #deviation: { previous: string; observed: string; allowed: string[]; message: string } | null = null;

  /** what the strategies may do with this target */
  readonly #controls: TargetControls;

  constructor(serial: SerialConsole, options: SerialTargetOptions) {
    this.#serial = serial;
    this.#options = options;
    this.#controls = {
      state: () => this.#state,
      send: (command) => this.#send(command),
      status: () => this.#status(),
      nextEvent: (timeoutMs, what, until) => this.#nextEvent(timeoutMs, what, until),
      catchUp: () => this.#catchUp(),
      enter: (path) => this.#enter(path),
      note: (kind, detail) => this.#note(kind, detail),
      stuck: (restOptions, ms) => this.#stuck(restOptions, ms),
      stepTimeoutMs: options.stepTimeoutMs,
    };
  }

  checkForUpdate = () => this.#send({ name: "check" });
  syncNow = () => this.#send({ name: "sync" });
  tapCard = (uid: string) => this.#send({ name: "tap", uid });
  plugIn = () => this.#options.power.plugIn(this.#controls);
  unplug = () => this.#options.power.unplug(this.#controls);
  armBrownout = (fault: PowerFault) => this.#options.power.armBrownout(this.#controls, fault);

  async wait(seconds: number): Promise<void> {
    await this.#options.power.goOn(this.#controls);
    await this.#options.clock.wait(this.#controls, seconds);
  }

  async comeToRest(options: { poweredOnly?: boolean } = {}): Promise<void> {
    await this.#options.power.goOn(this.#controls);
    await this.#options.clock.comeToRest(this.#controls, options);
  }

  state = () => this.#state;
  runningVersion = () => this.#version;
  isProvisioned = () => this.#provisioned;
  stateHistory = () => [...this.#states];
  screenHistory = () => [...this.#screens];
  elapsedMs = () => Math.round(performance.now() - this.#started);

  extraChecks() {
    const cuts = this.#options.power.checks();
    if (!this.#options.oracle) return cuts;
    const deviation = this.#deviation;
    const transcript = ` (${this.#transcriptPath()})`;
    return [
      ...cuts,
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

  /**
   * A real badge at the start of a session that the rig left without power: switched on (USB
   * power as the scenario starts, `usbPlugged`) and its boot awaited; false when it had power.
   */
  async powerUp(usbPlugged: boolean, timeoutMs = 10_000): Promise<boolean> {
    if (!(await this.#options.power.powerUp(this.#controls, usbPlugged))) return false;
    await this.awaitBoot("after the relays powered the badge", timeoutMs);
    return true;
  }

  /** A real badge at the start of a session: reset it, so its state is known, and wait for its boot. */
  async reset(timeoutMs = 10_000): Promise<void> {
    await this.#send({ name: "reboot" });
    await this.awaitBoot("after reboot (is the badge asleep? press its button)", timeoutMs);
  }

  /** The simulated badge at the start of a session: set up as the scenario starts (`setup`), and its boot. */
  async setUp(bench: BenchSetup, timeoutMs = 10_000): Promise<void> {
    await this.#send({ name: "setup", ...bench });
    await this.awaitBoot("after setup (is `badgebench sim serial` on the other end of the port?)", timeoutMs);
  }

  /** A real badge at the start of a session that something else restarts: waits for its boot. */
  async awaitBoot(why: string, timeoutMs = 10_000): Promise<void> {
    await this.#options.power.sessionStarts();
    await this.#nextEvent(timeoutMs, `a boot event ${why}`, (event) => event.kind === "boot");
  }

  /**
   * Asks for `status` and reads events up to its answer; null when the rig's relay cut the power
   * first (a real badge loses a question the power cut reached before its answer).
   */
  async #status(): Promise<Extract<ConsoleEvent, { kind: "status" }> | null> {
    await this.#send({ name: "status" });
    const timeout = this.#options.stepTimeoutMs ?? 10_000;
    const power = this.#options.power;
    const cuts = power.cutsMade;
    const event = await this.#nextEvent(timeout, "the answer to status", (e) => e.kind === "status" || power.cutsMade !== cuts);
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
    const power = this.#options.power;
    if (power.printedBeforeCut && event.kind === "boot") {
      power.booted();
      this.#observe({ kind: "state", path: "off" });
    }
    this.#observe(event);
    if (power.printedBeforeCut) {
      // shown and passed through before the cut: in the histories, but the badge is off now
      if (event.kind === "screen") this.#screens.push(event.text);
      if (event.kind === "state") this.#states.splice(this.#states.lastIndexOf("off"), 0, event.path);
      power.heardBeforeCut(event);
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
        await this.#options.power.reached(this.#controls, { progress: event });
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
    if (path === SWITCHING_STATE) await this.#options.power.reached(this.#controls, { switch: true });
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
