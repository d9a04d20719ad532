// The virtual badge's observation log: everything that changed, `{ t, kind, detail }` in
// simulated ms and in order, for the checks of a scenario, the reports and a serial console
// that prints it as it happens. A real badge's console lines become the same observations
// (hil/serial-target.ts writes its battery lines with `batteryText`).
import type { CheckAnswer } from "../network/badge-client.ts";

export type ObservationKind =
  | "input"
  | "state"
  | "screen"
  | "power"
  | "boot"
  | "request"
  | "answer"
  | "report.stored"
  | "report.sent"
  | "report.cleared"
  | "tap.queued"
  | "tap.sent"
  | "tap.cleared"
  | "token.cleared"
  | "flash.erase"
  | "flash.write"
  | "download"
  | "signature"
  | "battery";

export interface Observation {
  /** simulated ms */
  t: number;
  kind: ObservationKind;
  detail: string;
}

export class ObservationLog {
  readonly entries: Observation[] = [];
  /** the entries again by kind: `runUntil` predicates ask `of(kind)` after every observation, and a download logs hundreds */
  #byKind = new Map<ObservationKind, Observation[]>();
  /** replaced, never changed, as listeners come and go: an observation is heard by those there when it was made (as EventEmitter does) */
  #listeners: ReadonlyArray<(observation: Observation) => void> = [];
  /** `when` checks waiting for observations, each looking once after a burst of them; replaced like the listeners */
  #watchers: ReadonlyArray<() => void> = [];

  /** `now` stamps each observation: the badge's simulated ms. */
  constructor(private readonly now: () => number) {}

  observe(kind: ObservationKind, detail: string): void {
    const observation = { t: this.now(), kind, detail };
    this.entries.push(observation);
    const ofKind = this.#byKind.get(kind);
    if (ofKind) ofKind.push(observation);
    else this.#byKind.set(kind, [observation]);
    // indexed: a for-of made an iterator result per listener for each of a download's 700 observations
    const listeners = this.#listeners;
    for (let i = 0; i < listeners.length; i++) listeners[i]!(observation);
    const watchers = this.#watchers;
    for (let i = 0; i < watchers.length; i++) watchers[i]!();
  }

  of(kind: ObservationKind): Observation[] {
    return this.#byKind.get(kind)?.slice() ?? [];
  }

  /** Calls `listener` with every observation as it is logged; returns the unsubscribe. */
  onObservation(listener: (observation: Observation) => void): () => void {
    this.#listeners = [...this.#listeners, listener];
    return () => {
      this.#listeners = this.#listeners.filter((other) => other !== listener);
    };
  }

  /**
   * Resolves once `check()` holds after an observation, so a waiting `runUntil` looks again only
   * then: woken by every one of a download's hundreds of observations, its loop (an event loop
   * turn and a race each time) was a tenth of a simulated update's wall time (issue 25). `check`
   * runs in a microtask after the observation, when the machine has finished the step that made
   * it (its snapshot is the new one); one that throws resolves too, for the caller to meet the
   * error. `stop()` forgets it.
   */
  when(check: () => boolean): { promise: Promise<void>; stop: () => void } {
    let watcher!: () => void;
    const stop = () => {
      this.#watchers = this.#watchers.filter((other) => other !== watcher);
    };
    const promise = new Promise<void>((resolve) => {
      let queued = false;
      const look = () => {
        queued = false;
        let holds = true;
        try {
          holds = check();
        } catch {
          // the caller's own look at it throws again, and says so
        }
        if (!holds || !this.#watchers.includes(watcher)) return;
        stop();
        resolve();
      };
      watcher = () => {
        if (queued) return;
        queued = true;
        queueMicrotask(look);
      };
    });
    this.#watchers = [...this.#watchers, watcher];
    return { promise, stop };
  }
}

/** A `battery` observation's detail: `3.950 V, charging` (or `external power`, `battery`). */
export function batteryText(reading: { volts: number; externalPower: boolean; charging: boolean }): string {
  const source = reading.charging ? "charging" : reading.externalPower ? "external power" : "battery";
  return `${reading.volts.toFixed(3)} V, ${source}`;
}

/** A check `answer` observation's detail, after `check: `. */
export function describeCheck(answer: CheckAnswer): string {
  switch (answer.kind) {
    case "offer":
      return `offer ${answer.offer.version} (${answer.offer.size} bytes, md5 ${answer.offer.md5})`;
    case "current":
      return `current (latest ${answer.latest})`;
    case "refused":
      return `refused ${answer.code}`;
    case "unauthorized":
      return "401 unauthorized";
    case "failed":
      return `failed: ${answer.message}`;
  }
}
