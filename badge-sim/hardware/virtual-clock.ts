// Simulated time for the virtual badge, in milliseconds since the clock was made. It has the
// shape of xstate's Clock (setTimeout, clearTimeout), so `createActor(machine, { clock })` runs
// the machine's `after` delays on it: a 30 s deep-sleep delay passes when someone calls
// advance(), not in wall time.
// Timers fire in the order they fall due (ties in the order they were set), and `now()` reads
// each timer's due time while it runs, so whatever it logs carries the right timestamp.
interface Timer {
  due: number;
  /** its id: timers due together fire in the order they were set */
  order: number;
  fn: (...args: unknown[]) => void;
  args: unknown[];
}

export class VirtualClock {
  #now = 0;
  #nextId = 1;
  #timers = new Map<number, Timer>();
  /**
   * The earliest timer, kept as timers come and go; null when it must be looked for again. Time
   * moves at every flash write and radio transfer (a download makes about a thousand advances)
   * while timers change only a few times per chunk read.
   */
  #soonest: Timer | undefined | null = undefined;

  now(): number {
    return this.#now;
  }

  setTimeout(fn: (...args: unknown[]) => void, timeout: number, ...args: unknown[]): number {
    const id = this.#nextId++;
    // no closure per timer: the badge client sets one for every chunk a download reads
    const timer = { due: this.#now + Math.max(0, timeout), order: id, fn, args };
    this.#timers.set(id, timer);
    // a later one set at the same due time fires after it: only an earlier due time goes first
    if (this.#soonest === undefined || (this.#soonest !== null && timer.due < this.#soonest.due)) this.#soonest = timer;
    return id;
  }

  clearTimeout(id: number): void {
    if (this.#soonest?.order === id) this.#soonest = null;
    this.#timers.delete(id);
  }

  /** When the earliest timer falls due, or undefined when none is set. */
  nextDueAt(): number | undefined {
    return this.#earliest()?.due;
  }

  advance(ms: number): void {
    if (!(ms >= 0)) throw new RangeError(`advance(${ms}): simulated time only moves forward`);
    this.advanceTo(this.#now + ms);
  }

  /**
   * Moves time to `at`, firing every timer due by then, including those set by the timers
   * themselves. A timer may advance the clock further (hardware charging the time an operation
   * takes); time never moves back.
   */
  advanceTo(at: number): void {
    for (let timer = this.#earliest(); timer && timer.due <= at; timer = this.#earliest()) {
      this.clearTimeout(timer.order);
      this.#now = Math.max(this.#now, timer.due);
      timer.fn(...timer.args);
    }
    this.#now = Math.max(this.#now, at);
  }

  /** Fires timers until none is left; throws when that would take longer than `limitMs`. */
  runUntilIdle(limitMs = 24 * 3600_000): void {
    const limit = this.#now + limitMs;
    for (let due = this.nextDueAt(); due !== undefined; due = this.nextDueAt()) {
      if (due > limit) throw new Error(`timers are still set ${limitMs} ms after runUntilIdle began (next at ${due} ms)`);
      this.advanceTo(due);
    }
  }

  #earliest(): Timer | undefined {
    if (this.#soonest !== null) return this.#soonest;
    let best: Timer | undefined;
    for (const timer of this.#timers.values()) {
      if (!best || timer.due < best.due || (timer.due === best.due && timer.order < best.order)) best = timer;
    }
    return (this.#soonest = best);
  }
}
