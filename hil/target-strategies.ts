// How a SerialTarget (serial-target.ts) does what differs between the badges behind a console,
// injected as strategies (as labgrid's drivers and strategies are) instead of a flag branched on:
//
// - power: how the power is switched and cut. `consolePower()` asks the simulated badge with
//   console commands (`plug`, `unplug`, `brownout`); `relayPower()` switches the rig's relays,
//   cutting at the planned progress byte (powerCutPlan) or as the badge enters the switch.
// - time: how time passes and how the target knows the badge rests. `simulatedClock()` asks the
//   simulated badge (`wait`, `rest`, then `status`); `wallClock()` sleeps, and waits for a
//   resting `state` event confirmed by `status`.
import { setTimeout as sleep } from "node:timers/promises";
import { isRestingState, RESTING_STATES, type PowerFault } from "../badge-sim/runners/badge-target.ts";
import type { ObservationKind } from "../badge-sim/virtual-badge/observation-log.ts";
import type { ConsoleCommand, ConsoleEvent } from "../firmware/index.ts";
import { CHECKPOINT_BYTES } from "../badge-sim/model/badge-storage.ts";
import type { FaultProxy } from "../badge-sim/network/fault-proxy/proxy.ts";
import { powerCutPlan, type PowerCutPlan, type PowerRelay } from "./power-relay.ts";

/** The target could not do what a scenario asks (no relay for a power fault, the badge refused a command). */
export class SerialTargetError extends Error {
  override name = "SerialTargetError";
}

/** What a strategy may do with the target it serves. */
export interface TargetControls {
  /** the state the badge last reported */
  state(): string;
  send(command: ConsoleCommand): Promise<void>;
  /** `status`, and the events up to its answer; null when a power cut came first */
  status(): Promise<Extract<ConsoleEvent, { kind: "status" }> | null>;
  /** reads events until one `until` accepts, noting each; throws SerialTargetError after `timeoutMs` */
  nextEvent(timeoutMs: number, what: string, until?: (event: ConsoleEvent) => boolean): Promise<ConsoleEvent>;
  /** takes the events already received, without waiting */
  catchUp(): Promise<void>;
  /** the badge is now in `path` (a cut: `off`) */
  enter(path: string): Promise<void>;
  note(kind: ObservationKind, detail: string): void;
  /** the error for a badge that did not rest within `ms` */
  stuck(options: { poweredOnly?: boolean }, ms: number): Error;
  /** the SerialTargetOptions' stepTimeoutMs, when given */
  stepTimeoutMs: number | undefined;
}

/** Where a power cut may land: a download's progress line, or the badge entering the partition switch. */
export type CutPoint = { progress: { bytes: number; total: number } } | { switch: true };

/** How the badge's power is switched, and cut for a power fault. */
export interface PowerStrategy {
  plugIn(target: TargetControls): Promise<void>;
  unplug(target: TargetControls): Promise<void>;
  armBrownout(target: TargetControls, fault: PowerFault): Promise<void>;
  /**
   * Before a session: a badge the rig left without power is switched on as the scenario starts
   * (USB power plugged in or not); true when it was, and it boots now.
   */
  powerUp(target: TargetControls, usbPlugged: boolean): Promise<boolean>;
  /** a session starts (the rig restarts the badge): learn the power as the rig left it */
  sessionStarts(): Promise<void>;
  /** the badge reached `at`: a planned cut may strike now */
  reached(target: TargetControls, at: CutPoint): Promise<void>;
  /** the scenario goes on (a step, a wait, the rest at its end): the power back after a cut */
  goOn(target: TargetControls): Promise<void>;
  /** power cuts made so far (a `status` asked before one is lost with it) */
  readonly cutsMade: number;
  /** the power was cut and the badge has not booted since: what it prints now it printed before */
  readonly printedBeforeCut: boolean;
  /** the badge booted: nothing it prints from now on came before the cut */
  booted(): void;
  /** an event the badge printed after the rig decided to cut and before the power went */
  heardBeforeCut(event: ConsoleEvent): void;
  /** one check per power cut made: did it land where the scenario says */
  checks(): CutCheck[];
}

/** A power cut's landing, as a scenario check. */
export interface CutCheck {
  field: "power.cut";
  expected: string;
  observed: string;
  passed: boolean;
}

/**
 * Where a cut must land for the badge to fail as the scenario says. A cut at a byte lands while
 * the badge is still downloading, before it passes the next install checkpoint after the byte
 * (CHECKPOINT_BYTES: the byte it records and reports) and before the download ends; a cut at the
 * switch lands in the switch, before otadata is written (the `switch` line). `printed`: what
 * the badge printed between the rig's decision and the power going (the relay's latency); a
 * state it entered meanwhile (the switch, or a failure it found first) means the cut came late.
 */
export function cutLanding(plan: PowerCutPlan, printed: ConsoleEvent[]): CutCheck {
  const stayIn = plan.cutAt === "switch" ? SWITCHING_STATE : "online.downloading";
  const moved = printed.find((event): event is Extract<ConsoleEvent, { kind: "state" }> => event.kind === "state" && event.path !== stayIn);
  if (plan.cutAt === "switch") {
    const written = printed.find((event) => event.kind === "switch");
    const expected = "during the partition switch, before otadata was written";
    const late = moved ? `the badge entered ${moved.path}` : written ? `the badge printed switch slot=${written.slot}` : null;
    return { field: "power.cut", expected, observed: late ? `late: ${late} before the power went` : expected, passed: late === null };
  }
  const progress = printed.filter((event) => event.kind === "progress");
  const reached = progress.at(-1)?.bytes;
  const end = cutWindowEnd(plan.byte, progress[0]?.total);
  const expected = `at download byte ${plan.byte}, before byte ${end}`;
  const late = moved ? `the badge entered ${moved.path}` : reached !== undefined && reached >= end ? `the badge had downloaded ${reached} bytes` : null;
  return {
    field: "power.cut",
    expected,
    observed: late ? `late: ${late} before the power went` : `${expected}${reached === undefined ? "" : ` (the badge had printed ${reached})`}`,
    passed: late === null,
  };
}

/** The first byte a cut at `byte` must land before: the next install checkpoint after it, or the end of a `total`-byte image. */
export function cutWindowEnd(byte: number, total: number | undefined): number {
  const checkpoint = (Math.floor(byte / CHECKPOINT_BYTES) + 1) * CHECKPOINT_BYTES;
  return total === undefined ? checkpoint : Math.min(checkpoint, total);
}

/** How time passes for the badge, and how the target knows it rests. */
export interface ClockStrategy {
  wait(target: TargetControls, seconds: number): Promise<void>;
  comeToRest(target: TargetControls, options: { poweredOnly?: boolean }): Promise<void>;
}

/** The simulated badge's power: console commands it answers (a real badge refuses them). */
export function consolePower(): PowerStrategy {
  return {
    plugIn: (target) => target.send({ name: "plug" }),
    unplug: (target) => target.send({ name: "unplug" }),
    armBrownout: (target, fault) => target.send({ name: "brownout", at: "during" in fault ? "switch" : fault.atPercent }),
    powerUp: async () => false,
    sessionStarts: async () => {},
    reached: async () => {},
    goOn: async () => {},
    cutsMade: 0,
    printedBeforeCut: false,
    booted: () => {},
    heardBeforeCut: () => {},
    checks: () => [],
  };
}

export interface RelayPowerOptions {
  /** the badge's power relay (with `usbRelay`: its battery's); without one, power faults cannot run */
  relay?: PowerRelay | null;
  /** the badge's USB power relay: then `relay` is its battery, and plug/unplug switch this one */
  usbRelay?: PowerRelay | null;
  /** how long the badge stays without power after a cut (ms on the badge's clock, default 1000) */
  powerOffMs?: number;
  /** how many times faster than the wall the badge's clock runs (the rig file's clockFactor; 1 for a real badge) */
  clockFactor?: number;
  /** the fault proxy in the badge's path: a cut at a byte holds the download there until the power goes */
  proxy?: Pick<FaultProxy, "addFaults"> | null;
  /** the size of the image the scenario's server offers (its release), which a cut's byte is a percent of */
  imageBytes?: number;
}

/** The simulated badge's clock: `wait` and `rest` are console commands it runs in simulated time. */
export function simulatedClock(): ClockStrategy {
  return {
    wait: (target, seconds) => target.send({ name: "wait", seconds }),
    async comeToRest(target, options) {
      await target.send({ name: "rest", powered: options.poweredOnly === true });
      const status = (await target.status())!;
      if (!isRestingState(status.state, options)) throw new SerialTargetError(`the simulated badge said it rested, then reported state ${status.state}`);
    },
  };
}

/**
 * A real badge's clock: `wait` sleeps and then takes what the badge printed meanwhile; at rest is
 * a resting `state` event, settled for `settleMs` (default 300) and confirmed by `status` (not
 * asked in `asleep` or `off`, when the console is off), within the step timeout (default 5 min).
 * A badge whose clock runs `factor` times faster than the wall (the reference badge's
 * `--clock-factor`) gets `wait` and the settle divided by it; the step timeout is a limit on the
 * wall, and stays.
 */
export function wallClock(options: { settleMs?: number; factor?: number } = {}): ClockStrategy {
  const factor = options.factor ?? 1;
  return {
    async wait(target, seconds) {
      target.note("input", factor === 1 ? `wait ${seconds} s` : `wait ${seconds} s of badge time (${seconds / factor} s at ${factor}x)`);
      await sleep((seconds * 1000) / factor);
      // what the badge printed meanwhile (it may have gone to sleep), so the next step knows where it is
      await target.catchUp();
    },
    async comeToRest(target, restOptions) {
      const timeoutMs = target.stepTimeoutMs ?? 300_000;
      const limit = performance.now() + timeoutMs;
      for (;;) {
        if (isRestingState(target.state(), restOptions)) {
          // The console is off without power and in deep sleep: the last state printed is the answer.
          if (target.state() === "off" || target.state() === "asleep") return;
          await sleep((options.settleMs ?? 300) / factor);
          const status = await target.status();
          if (isRestingState(status?.state ?? target.state(), restOptions)) return;
          if (status === null) continue; // the relay cut the power while the badge was asked
        }
        const left = limit - performance.now();
        if (left <= 0) throw target.stuck(restOptions, timeoutMs);
        await target.nextEvent(left, `a resting state (${restingList(restOptions)}); the badge is in ${target.state()}`);
      }
    },
  };
}

export function restingList(options: { poweredOnly?: boolean }): string {
  return [...RESTING_STATES].filter((state) => isRestingState(state, options)).join(", ");
}

/** The machine state whose switchBootSlot actor writes otadata: a power cut "during the switch" aims here. */
export const SWITCHING_STATE = "online.switching";

/**
 * A real badge's power through the rig's relays. A power fault is a cut at the planned progress
 * byte, or as the badge enters the partition switch (its otadata erase and write take tens of ms
 * on flash). The power comes back when the scenario goes on (its next step, or the rest at its
 * end), at least `powerOffMs` after the cut: as on the simulated badge, the next step happens
 * while it is off. With one relay, that relay is the badge's external power: plugging in is
 * switching it on; with a USB power relay, plug and unplug switch that one.
 */
export class RelayPower implements PowerStrategy {
  readonly #options: RelayPowerOptions;
  #cuts: PowerFault[] = [];
  #plan: PowerCutPlan | null = null;
  #cutsMade = 0;
  /** downloads the fault proxy was told to hold */
  #holds = 0;
  #printedBeforeCut = false;
  /** when the power comes back after a cut (performance.now() ms), or null when it is not cut */
  #restoreAt: number | null = null;
  /** USB power as the scenario has it: the USB relay is switched back to this after a cut */
  #usbPlugged = false;
  /** each cut made and what the badge printed between the decision and the power going */
  #landings: Array<{ plan: PowerCutPlan; printed: ConsoleEvent[] }> = [];

  constructor(options: RelayPowerOptions) {
    this.#options = options;
  }

  get cutsMade(): number {
    return this.#cutsMade;
  }

  get printedBeforeCut(): boolean {
    return this.#printedBeforeCut;
  }

  booted(): void {
    this.#printedBeforeCut = false;
  }

  heardBeforeCut(event: ConsoleEvent): void {
    this.#landings.at(-1)?.printed.push(event);
  }

  /** Where each cut landed: in its window (cutLanding), or the check fails saying how far the badge got. */
  checks(): CutCheck[] {
    return this.#landings.map(({ plan, printed }) => cutLanding(plan, printed));
  }

  /** A badge that was off then boots, and one asleep on its battery wakes, before the next step. */
  async plugIn(target: TargetControls): Promise<void> {
    const { relay, usbRelay } = this.#options;
    if (!relay) return target.send({ name: "plug" });
    await target.catchUp();
    const wakes = target.state() === "off" || (usbRelay && !this.#usbPlugged && target.state() === "asleep");
    this.#usbPlugged = true;
    target.note("input", usbRelay ? "plug in (USB relay on)" : "plug in (relay on)");
    if (this.#restoreAt !== null) return this.#restorePower(target);
    await (usbRelay ?? relay).on();
    if (wakes) await target.nextEvent(target.stepTimeoutMs ?? 10_000, "a boot event after the relay powered the badge", (event) => event.kind === "boot");
  }

  /** With a USB power relay, switching it off (while the power is cut, it stays off when the power comes back). */
  async unplug(target: TargetControls): Promise<void> {
    const usbRelay = this.#options.usbRelay;
    if (!usbRelay) return target.send({ name: "unplug" });
    this.#usbPlugged = false;
    target.note("input", "unplug (USB relay off)");
    if (this.#restoreAt === null) await usbRelay.off();
  }

  /**
   * A cut at a byte, with the fault proxy in the badge's path, holds the download at the last
   * byte of the cut's window (cutWindowEnd): the badge gets every byte up to it, so it prints the
   * progress line the cut is due at, and nothing more until the power is gone (the badge dies, its
   * connection closes, the hold ends). However slow the relay, the cut lands in its window, as long
   * as it comes before the badge's own stall timeout gives up on the silent download.
   */
  async armBrownout(target: TargetControls, fault: PowerFault): Promise<void> {
    if (!this.#options.relay) throw new SerialTargetError("the scenario cuts the power, and this rig has no power relay (`power` in the rig file)");
    this.#cuts.push(fault);
    const { proxy, imageBytes } = this.#options;
    if (!proxy || !imageBytes || "during" in fault) return;
    const plan = powerCutPlan(fault, imageBytes);
    if (plan.cutAt !== "progress") return;
    const holdAt = cutWindowEnd(plan.byte, imageBytes) - 1;
    // one hold per download: the nth cut at a byte holds the nth download from now, at that byte
    // of the image, where a download resumed from a checkpoint (a 206 from there) gets to it too
    proxy.addFaults([{ kind: "stall", atByte: holdAt, of: "image", nth: ++this.#holds }]);
    target.note("power", `the fault proxy holds download ${this.#holds} at byte ${holdAt} until the power is cut (at byte ${plan.byte})`);
  }

  async powerUp(target: TargetControls, usbPlugged: boolean): Promise<boolean> {
    const { relay, usbRelay } = this.#options;
    if (!relay || (await relay.state()) === "ON" || (usbRelay && (await usbRelay.state()) === "ON")) return false;
    target.note("power", usbRelay ? `the badge is off: relay on, USB relay ${usbPlugged ? "on" : "off"}` : "the badge is off: relay on");
    // USB first, so a badge that has it boots on it
    if (usbPlugged) await usbRelay?.on();
    await relay.on();
    return true;
  }

  async sessionStarts(): Promise<void> {
    // USB power is as the rig left it
    if (this.#options.usbRelay) this.#usbPlugged = (await this.#options.usbRelay.state()) === "ON";
  }

  async goOn(target: TargetControls): Promise<void> {
    if (this.#restoreAt !== null) await this.#restorePower(target);
  }

  async reached(target: TargetControls, at: CutPoint): Promise<void> {
    const relay = this.#options.relay;
    if (!relay) return;
    const progress = "progress" in at ? at.progress : undefined;
    if (!this.#plan && this.#cuts.length > 0) this.#plan = powerCutPlan(this.#cuts[0]!, progress ? progress.total : 1);
    const plan = this.#plan;
    if (!plan) return;
    const due = plan.cutAt === "switch" ? "switch" in at : progress !== undefined && progress.bytes >= plan.byte;
    if (!due) return;
    this.#cuts.shift();
    this.#plan = null;
    target.note("power", `relay off (${plan.cutAt === "switch" ? "at the switch" : `at byte ${plan.byte}`})`);
    // Both at once: one after the other, the badge would run on for the first relay's round
    // trip (a 99 % cut then lands after the switch). The USB relay's command goes once the broker
    // has the battery's, so the badge never sees its USB power go before its battery: it would
    // fail the download for the unplugging instead of losing its power.
    const usbRelay = this.#options.usbRelay;
    let batterySent!: () => void;
    const sent = new Promise<void>((resolve) => (batterySent = resolve));
    await Promise.all([relay.off({ onSent: batterySent }), usbRelay && sent.then(() => usbRelay.off())]);
    // the progress line that was due counts too: it may already be past the window
    this.#landings.push({ plan, printed: progress ? [{ kind: "progress", ...progress }] : [] });
    this.#cutsMade++;
    await target.enter("off");
    this.#printedBeforeCut = true;
    this.#restoreAt = performance.now() + (this.#options.powerOffMs ?? 1000) / (this.#options.clockFactor ?? 1);
  }

  /** The power back after a cut (USB too when the scenario has it plugged in), and the boot that follows. */
  async #restorePower(target: TargetControls): Promise<void> {
    await sleep(Math.max(0, this.#restoreAt! - performance.now()));
    this.#restoreAt = null;
    // USB first, so a badge that has it boots on it
    if (this.#usbPlugged) await this.#options.usbRelay?.on();
    await this.#options.relay!.on();
    target.note("power", this.#options.usbRelay ? `relay on, USB relay ${this.#usbPlugged ? "on" : "off"}` : "relay on");
    await target.nextEvent(target.stepTimeoutMs ?? 10_000, "a boot event after the relay powered the badge", (event) => event.kind === "boot");
  }
}

export function relayPower(options: RelayPowerOptions): PowerStrategy {
  return new RelayPower(options);
}
