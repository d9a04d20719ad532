// Whether the server is busy serving requests, for the delivery worker: deliveries share the
// event loop with the requests, and a delivery costs the server several times what the create
// that caused it costs (a signed POST per endpoint, its answer, the attempt's rows). When
// requests keep the loop busy, deliveries step back to a small steady share (WebhookConfig
// busyRate) and the backlog, safe in the outbox, is sent at full speed once the load eases.
import { performance, type EventLoopUtilization } from "node:perf_hooks";

/** How much of the event loop's time, over a window where deliveries ran free, makes the server busy. */
export const BUSY_UTILIZATION = 0.85;
/**
 * How much of the event loop's time, over a busy window (deliveries at their small share), keeps
 * the server busy. Lower than BUSY_UTILIZATION because what fills that window is the requests'
 * own work: requests using half the loop are a load that deliveries at full speed would slow,
 * and a server saturated by requests still has idle moments (waiting for the log's sync with
 * `--sync full`) that must not let deliveries run free.
 */
export const STAY_BUSY_UTILIZATION = 0.5;
/** The window over which the loop's utilization is measured. */
export const LOAD_WINDOW_MS = 100;
/** How long a window that showed the requests leaving time to spare lets deliveries run free. */
export const FREE_MS = 500;

/** Where the load signal reads the time and the event loop's utilization since a mark (injectable for tests). */
export interface LoopMeter {
  now(): number;
  /** A mark of the loop's work so far, and the share of the time since `since` the loop was working. */
  mark(): EventLoopUtilization;
  utilizationSince(since: EventLoopUtilization): number;
}

const NODE_LOOP: LoopMeter = {
  now: () => performance.now(),
  mark: () => performance.eventLoopUtilization(),
  utilizationSince: (since) => performance.eventLoopUtilization(since).utilization,
};

export interface LoadSignal {
  /** true while requests are being served and the event loop has little time to spare */
  busy(): boolean;
}

/**
 * The loop's utilization counts the deliveries' own work too: a backlog sent at full speed fills
 * the loop whatever the requests need. So a full loop with requests arriving only makes the
 * server busy for the next window, in which deliveries step back to their small share; that
 * window measures what the requests alone take. If they use at least STAY_BUSY_UTILIZATION of
 * it, the server stays busy (window by window); if not, deliveries run free for FREE_MS before
 * the next look.
 */
export class ServerLoad implements LoadSignal {
  readonly #windowMs: number;
  readonly #freeMs: number;
  readonly #meter: LoopMeter;
  #windowStart: number;
  #mark: EventLoopUtilization;
  #lastRequestAt = -Infinity;
  #busy = false;
  #freeUntil = -Infinity;

  constructor({ windowMs = LOAD_WINDOW_MS, freeMs = FREE_MS, meter = NODE_LOOP }: { windowMs?: number; freeMs?: number; meter?: LoopMeter } = {}) {
    this.#windowMs = windowMs;
    this.#freeMs = freeMs;
    this.#meter = meter;
    this.#windowStart = meter.now();
    this.#mark = meter.mark();
  }

  /** Called for every request the server receives. */
  noteRequest = (): void => {
    this.#lastRequestAt = this.#meter.now();
  };

  busy(): boolean {
    const now = this.#meter.now();
    if (now - this.#windowStart >= this.#windowMs) {
      const utilization = this.#meter.utilizationSince(this.#mark);
      const threshold = this.#busy ? STAY_BUSY_UTILIZATION : BUSY_UTILIZATION;
      const full = this.#lastRequestAt >= this.#windowStart && utilization >= threshold;
      if (this.#busy && !full) this.#freeUntil = now + this.#freeMs;
      this.#busy = full && now >= this.#freeUntil;
      this.#mark = this.#meter.mark();
      this.#windowStart = now;
    }
    return this.#busy;
  }
}
