// The Wi-Fi radio. It is up only while the badge is powered and on external power (SPEC 3.4:
// the badge brings its radio up only on external power), so a request on battery alone never
// leaves the badge. The bytes travel over real sockets to a real server; what a slow Wi-Fi link
// would cost in time is charged to the simulated clock here: a round trip per request and the
// link rate per byte received (field figures: 1 MiB in 10-24 s on good Wi-Fi, notes #8).
import type { VirtualClock } from "./virtual-clock.ts";
import type { Battery } from "./battery.ts";

export interface RadioLink {
  bytesPerSecond: number;
  requestMs: number;
}

export const DEFAULT_LINK: RadioLink = { bytesPerSecond: 64 * 1024, requestMs: 250 };

const MiB = 1024 * 1024;

/** A request asked of a radio that is down. */
export class RadioOffError extends Error {
  override name = "RadioOffError";
}

export class Radio {
  #link: RadioLink;
  #clock: VirtualClock;
  #battery: Battery;

  constructor(deps: { clock: VirtualClock; battery: Battery; link?: Partial<RadioLink> }) {
    this.#clock = deps.clock;
    this.#battery = deps.battery;
    this.#link = { ...DEFAULT_LINK, ...deps.link };
    if (!(this.#link.bytesPerSecond > 0)) throw new TypeError(`link.bytesPerSecond ${this.#link.bytesPerSecond} must be more than 0`);
    if (!(this.#link.requestMs >= 0)) throw new TypeError(`link.requestMs ${this.#link.requestMs} must be 0 or more`);
  }

  get isUp(): boolean {
    return this.#battery.isPowered && this.#battery.reading().externalPower;
  }

  /** Before a request goes out: throws RadioOffError when the radio is down. */
  request(what: string): void {
    if (!this.isUp) throw new RadioOffError(`radio is off (no external power): ${what} not sent`);
    this.#clock.advance(this.#link.requestMs);
    this.#battery.drain("perRequest");
  }

  /** Charges the time and energy of receiving `bytes`. */
  receive(bytes: number): void {
    this.#clock.advance((bytes / this.#link.bytesPerSecond) * 1000);
    this.#battery.drain("perMiBReceived", bytes / MiB);
  }
}
