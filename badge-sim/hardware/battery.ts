// The badge's power: a Li-ion cell read in volts, external (USB) power, and whether the charger
// is charging. External power without charging is a dock whose charger has paused (a hot or
// full cell); charging implies external power. While not charging, operations drain the cell.
//
// Power faults live here because that is where they happen: a test arms a brownout at a point
// of the update ("when the download reaches 50 %", "during the partition switch"), and the
// operation that reaches it is cut there: a flash write stops part way, the power goes, and
// whoever listens (the virtual badge) sees the chip reset.

export interface BatteryReading {
  volts: number;
  externalPower: boolean;
  charging: boolean;
}

/** Volts the cell loses per operation while it is not charging. */
export interface BatteryDrain {
  /** per HTTP request (radio transmit burst) */
  perRequest: number;
  /** per MiB received over the radio */
  perMiBReceived: number;
  /** per MiB written to flash */
  perMiBWritten: number;
}

export const DEFAULT_DRAIN: BatteryDrain = { perRequest: 0.0005, perMiBReceived: 0.004, perMiBWritten: 0.002 };

/**
 * Where the power dies. Each point fires once. Download points count image bytes written to the
 * inactive slot: `atDownloadByte: n` leaves exactly n bytes written; a percentage is of the
 * offered size, rounded down to a byte. The switch points are the steps of the otadata write
 * (see hardware/otadata.ts): after its sector is erased, half way through the entry, or after
 * the entry is written but before the restart.
 */
export type BrownoutPoint =
  | { atDownloadByte: number }
  | { atDownloadPercent: number }
  | { duringSwitch: SwitchStep };

export type SwitchStep = "after-erase" | "mid-write" | "before-restart";

/** What the badge is about to do, as the battery is asked about it. */
export type PowerMoment =
  | { activity: "download.write"; offset: number; length: number; total: number }
  | { activity: "otadata.write"; length: number }
  | { activity: "restart" };

export type BatteryEvent =
  | { type: "reading"; reading: BatteryReading; cause: "plugged" | "unplugged" | "changed" }
  | { type: "power.lost"; why: string }
  | { type: "power.restored" };

/** Thrown by the operation the power died in, so it unwinds without doing anything more. */
export class PowerLostError extends Error {
  override name = "PowerLostError";
}

export interface BatteryOptions {
  volts: number;
  charging: boolean;
  /** default: the same as `charging` */
  externalPower?: boolean;
  drain?: Partial<BatteryDrain>;
}

const MAX_VOLTS = 4.25;
const EMPTY_VOLTS = 3.0;

export class Battery {
  #reading: BatteryReading;
  #drain: BatteryDrain;
  #armed: BrownoutPoint[] = [];
  #powered = true;
  #listeners = new Set<(event: BatteryEvent) => void>();

  constructor(options: BatteryOptions) {
    const externalPower = options.externalPower ?? options.charging;
    checkVolts("battery.volts", options.volts);
    if (options.charging && !externalPower) throw new TypeError("battery.charging needs external power (externalPower: true)");
    for (const [key, value] of Object.entries(options.drain ?? {})) {
      if (!(key in DEFAULT_DRAIN)) throw new TypeError(`battery.drain.${key} is not one of ${Object.keys(DEFAULT_DRAIN).join(", ")}`);
      if (!(Number.isFinite(value) && value >= 0)) throw new TypeError(`battery.drain.${key} ${value} must be volts, 0 or more`);
    }
    this.#reading = { volts: options.volts, externalPower, charging: options.charging };
    this.#drain = { ...DEFAULT_DRAIN, ...options.drain };
  }

  reading(): BatteryReading {
    return { ...this.#reading };
  }

  get isPowered(): boolean {
    return this.#powered;
  }

  onEvent(listener: (event: BatteryEvent) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  plugIn(charging = true): void {
    this.#reading = { ...this.#reading, externalPower: true, charging };
    this.#emit({ type: "reading", reading: this.reading(), cause: "plugged" });
  }

  unplug(): void {
    this.#reading = { ...this.#reading, externalPower: false, charging: false };
    this.#emit({ type: "reading", reading: this.reading(), cause: "unplugged" });
  }

  setVolts(volts: number): void {
    checkVolts("volts", volts);
    this.#reading = { ...this.#reading, volts };
    this.#emit({ type: "reading", reading: this.reading(), cause: "changed" });
  }

  setCharging(charging: boolean): void {
    if (charging && !this.#reading.externalPower) throw new TypeError("cannot charge without external power; plugIn() first");
    this.#reading = { ...this.#reading, charging };
    this.#emit({ type: "reading", reading: this.reading(), cause: "changed" });
  }

  /** Charges `amount` units of an operation to the cell; heard as a change only when the millivolts move. */
  drain(kind: keyof BatteryDrain, amount = 1): void {
    if (this.#reading.charging) return;
    const before = Math.round(this.#reading.volts * 1000);
    this.#reading = { ...this.#reading, volts: Math.max(EMPTY_VOLTS, this.#reading.volts - this.#drain[kind] * amount) };
    if (Math.round(this.#reading.volts * 1000) !== before) this.#emit({ type: "reading", reading: this.reading(), cause: "changed" });
  }

  brownoutAt(point: BrownoutPoint): void {
    checkPoint(point);
    this.#armed.push(point);
  }

  /**
   * How much of `moment` gets done before the power dies: null when the power holds through it,
   * else the bytes written first (0 for a moment that is not a write). The point is disarmed;
   * the caller does that much and then calls cutPower().
   */
  powerFailsWithin(moment: PowerMoment): number | null {
    for (let index = 0; index < this.#armed.length; index++) {
      const done = bytesBeforeFailure(this.#armed[index]!, moment);
      if (done === null) continue;
      this.#armed.splice(index, 1);
      return done;
    }
    return null;
  }

  /** Throws PowerLostError when the power is off: nothing runs without it. */
  requirePower(what: string): void {
    if (!this.#powered) throw new PowerLostError(`${what} without power`);
  }

  /** The power dies now: listeners hear it, and the interrupted operation unwinds. */
  cutPower(why: string): never {
    this.#powered = false;
    this.#emit({ type: "power.lost", why });
    throw new PowerLostError(`power lost ${why}`);
  }

  restorePower(): void {
    if (this.#powered) return;
    this.#powered = true;
    this.#emit({ type: "power.restored" });
  }

  #emit(event: BatteryEvent): void {
    for (const listener of this.#listeners) listener(event);
  }
}

function bytesBeforeFailure(point: BrownoutPoint, moment: PowerMoment): number | null {
  if (moment.activity === "download.write" && !("duringSwitch" in point)) {
    const byte = "atDownloadByte" in point ? point.atDownloadByte : Math.floor((moment.total * point.atDownloadPercent) / 100);
    const inside = byte >= moment.offset && byte < moment.offset + moment.length;
    return inside ? byte - moment.offset : null;
  }
  if (!("duringSwitch" in point)) return null;
  if (moment.activity === "otadata.write" && point.duringSwitch === "after-erase") return 0;
  if (moment.activity === "otadata.write" && point.duringSwitch === "mid-write") return Math.floor(moment.length / 2);
  if (moment.activity === "restart" && point.duringSwitch === "before-restart") return 0;
  return null;
}

function checkVolts(name: string, volts: number): void {
  if (!(Number.isFinite(volts) && volts >= EMPTY_VOLTS && volts <= MAX_VOLTS)) {
    throw new TypeError(`${name} ${volts} must be a Li-ion cell voltage from ${EMPTY_VOLTS} to ${MAX_VOLTS}`);
  }
}

function checkPoint(point: BrownoutPoint): void {
  if ("atDownloadByte" in point && !(Number.isInteger(point.atDownloadByte) && point.atDownloadByte >= 0)) {
    throw new TypeError(`brownout atDownloadByte ${point.atDownloadByte} must be a byte offset, 0 or more`);
  }
  if ("atDownloadPercent" in point && !(point.atDownloadPercent >= 0 && point.atDownloadPercent < 100)) {
    throw new TypeError(`brownout atDownloadPercent ${point.atDownloadPercent} must be from 0 to less than 100`);
  }
  if ("duringSwitch" in point && !["after-erase", "mid-write", "before-restart"].includes(point.duringSwitch)) {
    throw new TypeError(`brownout duringSwitch ${JSON.stringify(point.duringSwitch)} must be after-erase, mid-write or before-restart`);
  }
}
