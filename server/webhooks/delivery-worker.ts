// Delivers the outbox. Everything a delivery needs to survive a crash is in the database: the
// worker fans each new event out into one `webhook_deliveries` row per matching endpoint (in
// one transaction that also marks the event dispatched), claims due rows by writing a lease
// (next_attempt_at moves to the end of the lease, so a worker killed mid-attempt leaves the
// row to fall due again), and records each attempt and the next time in one transaction per
// batch of finished attempts. Duplicates are possible (killed after the POST, before the
// record); loss is not. Requests never wait for any of this: they only wake the worker. While
// requests keep the server busy (server-load.ts), the worker ticks at most every
// BUSY_TICK_INTERVAL_MS and fans out and claims only its busy share (WebhookConfig busyRate).
import { randomUUID } from "node:crypto";
import type { Kysely, Transaction } from "kysely";
import type { Logger } from "pino";
import { newId } from "../ids.ts";
import type { Database, Livemode, WebhookAttemptsTable } from "../store/schema.ts";
import * as store from "../store/webhooks-store.ts";
import { deliveryHeaders } from "./standard-webhooks.ts";
import type { WebhookConfig } from "./webhook-config.ts";
import type { AttemptResult, WebhookSender } from "./webhook-sender.ts";
import type { AddressPolicy } from "./address-guard.ts";
import type { LoadSignal } from "./server-load.ts";

const FAN_OUT_BATCH = 500;
/** Ticks are at least this far apart, so wakes in between fold into one transaction. */
const MIN_TICK_INTERVAL_MS = 5;
/** Ticks are at least this far apart while the server is busy. */
export const BUSY_TICK_INTERVAL_MS = 100;

const NEVER_BUSY: LoadSignal = { busy: () => false };

type EnabledEndpoint = { id: string; livemode: Livemode; enabled_events: string[]; enabled_at: string };

export function matchesEvent(enabledEvents: readonly string[], type: string): boolean {
  return enabledEvents.includes("*") || enabledEvents.includes(type);
}

/** Secrets that sign now: the current one, and the rolled one until its grace period ends. */
export function signingSecrets(row: { secret: string; previous_secret: string | null; previous_secret_expires_at: string | null }, now: Date): string[] {
  const previousValid = row.previous_secret !== null && row.previous_secret_expires_at !== null && row.previous_secret_expires_at > now.toISOString();
  return previousValid ? [row.secret, row.previous_secret!] : [row.secret];
}

export function addressPolicy(livemode: Livemode, config: WebhookConfig): AddressPolicy {
  const localTest = livemode === 0 && config.localTestTargets;
  return { allowLoopback: localTest || config.allowLoopbackForLive, allowPrivate: localTest };
}

/**
 * The attempt as it may be kept and shown: without the receiver's answer when the live rules
 * would refuse the URL (http: the address policy already held it to live's addresses) and the
 * operator has not allowed local test targets, so a test key never reads through a test
 * endpoint what a live one could not reach.
 */
export function shownResult(result: AttemptResult, endpoint: { livemode: Livemode; url: string }, config: WebhookConfig): AttemptResult {
  const liveWouldAccept = endpoint.livemode === 1 || new URL(endpoint.url).protocol === "https:";
  return liveWouldAccept || config.localTestTargets ? result : { ...result, responseExcerpt: null };
}

interface Finished {
  delivery: store.DueDelivery;
  token: string;
  attemptedAt: Date;
  result: AttemptResult;
}

export class DeliveryWorker {
  readonly #db: Kysely<Database>;
  readonly #sender: WebhookSender;
  readonly #config: WebhookConfig;
  readonly #logger: Logger;
  readonly #load: LoadSignal;
  readonly #workerId = randomUUID();
  readonly #perEndpoint = new Map<string, number>();
  #inFlight = 0;
  #finished: Finished[] = [];
  #pumping: Promise<void> | null = null;
  #pumpAgain = false;
  #timer: NodeJS.Timeout | null = null;
  #stopping = false;
  #idle: (() => void) | null = null;
  #ticks = 0;
  #lastTickAt = 0;

  /** `load`: when the server's requests need the event loop (default: never, as for a worker alone) */
  constructor(deps: { db: Kysely<Database>; sender: WebhookSender; config: WebhookConfig; logger: Logger; load?: LoadSignal }) {
    this.#db = deps.db;
    this.#sender = deps.sender;
    this.#config = deps.config;
    this.#logger = deps.logger;
    this.#load = deps.load ?? NEVER_BUSY;
  }

  start(): void {
    this.wake();
  }

  /** How many ticks have run: while busy each claims at most its share, so deliveries never outrun ticks x share. */
  get ticks(): number {
    return this.#ticks;
  }

  /** Look for work now (called after every write request, so new events go out at once). */
  wake = (): void => {
    if (this.#stopping && this.#finished.length === 0 && this.#inFlight === 0) return;
    if (this.#pumping) {
      this.#pumpAgain = true;
      return;
    }
    this.#pumping = this.#pump().finally(() => {
      this.#pumping = null;
      if (this.#pumpAgain) this.wake();
    });
  };

  // One tick is one transaction: record the attempts that finished, fan new events out, claim
  // what is due. Wakes that arrive during a tick fold into the next one, so under load the
  // worker commits once per batch rather than once per event.
  async #pump(): Promise<void> {
    try {
      do {
        let busy = this.#load.busy();
        const wait = this.#lastTickAt + (busy ? BUSY_TICK_INTERVAL_MS : MIN_TICK_INTERVAL_MS) - Date.now();
        if (wait > 0 && !this.#stopping) {
          await new Promise((resolve) => setTimeout(resolve, wait));
          busy = this.#load.busy();
        }
        this.#pumpAgain = false;
        const finished = this.#finished;
        this.#finished = [];
        // The busy share: busyRate deliveries a second, in ticks BUSY_TICK_INTERVAL_MS apart.
        const limit = busy ? Math.max(1, Math.round((this.#config.busyRate * BUSY_TICK_INTERVAL_MS) / 1000)) : Infinity;
        const { moreToFanOut, claimed } = await this.#tick(finished, limit);
        for (const { delivery, token } of claimed) void this.#attempt(delivery, token);
        if (moreToFanOut) this.#pumpAgain = true;
      } while (this.#pumpAgain && !this.#stopping);
      if (this.#stopping && this.#finished.length > 0) await this.#tick(this.#finished.splice(0));
      if (this.#inFlight === 0) this.#idle?.();
      await this.#armTimer();
    } catch (err) {
      this.#logger.error({ err }, "webhook delivery worker failed; retrying at the next poll");
      this.#armTimerAfter(this.#config.pollMs);
    }
  }

  /** `limit`: the most events to fan out and deliveries to claim in this tick */
  async #tick(finished: Finished[], limit = Infinity) {
    this.#ticks++;
    this.#lastTickAt = Date.now();
    // The slots of finished attempts are free whatever happens to this transaction: if it
    // fails, their leases run out and they are attempted again (a duplicate, never a loss).
    for (const { delivery } of finished) {
      this.#inFlight--;
      const n = this.#perEndpoint.get(delivery.endpoint_id)! - 1;
      if (n === 0) this.#perEndpoint.delete(delivery.endpoint_id);
      else this.#perEndpoint.set(delivery.endpoint_id, n);
    }
    const claiming = !this.#stopping;
    const disabledModes = new Set<Livemode>();
    // Committed without a log sync of its own (the serving connection runs synchronous=NORMAL,
    // see store/database.ts): losing the worker's last commits to a power cut re-sends
    // deliveries, never drops one, and the next synced group commit makes them durable anyway.
    const result = await this.#db.transaction().execute(async (trx) => {
      const now = new Date();
      if (finished.length > 0) await this.#record(trx, finished, now, disabledModes);
      if (!claiming) return { moreToFanOut: false, claimed: [] };
      const batch = Math.min(FAN_OUT_BATCH, limit);
      // The events first, then the endpoints: on PostgreSQL each statement reads what was
      // committed when it began, and an event waiting for an endpoint was committed after that
      // endpoint (its insert waits on the mode's row, which the endpoint's creation holds). Read
      // the other way round, an endpoint and an event both committed between the two reads: the
      // event was fanned out without the endpoint and never reached it.
      const events = await store.undispatchedEvents(trx, batch);
      const endpoints = (await store.enabledEndpoints(trx)).map((e) => ({ ...e, enabled_events: JSON.parse(e.enabled_events) as string[] }));
      await this.#fanOut(trx, now, events, endpoints);
      // A full batch means more events may be waiting.
      return { moreToFanOut: events.length === batch, claimed: await this.#claim(trx, now, endpoints, limit) };
    });
    for (const { delivery } of result.claimed) {
      this.#inFlight++;
      this.#perEndpoint.set(delivery.endpoint_id, (this.#perEndpoint.get(delivery.endpoint_id) ?? 0) + 1);
    }
    for (const livemode of disabledModes) await this.#refreshMode(livemode);
    return result;
  }

  /**
   * A mode whose endpoint was disabled may have none enabled now: its events can then be written
   * dispatched. Its own transaction, after the tick's: the mode's lock is taken first by every
   * endpoint write (webhooks-store.ts: lockEndpointMode), never after the endpoint rows the tick
   * locked, so the two cannot deadlock. Its failure fails no tick (the deliveries the tick claimed
   * would wait for their leases to run out): the mode still says it has an endpoint, so its events
   * come to the worker as before, and the next endpoint write sets it right.
   */
  async #refreshMode(livemode: Livemode): Promise<void> {
    try {
      await this.#db.transaction().execute(async (trx) => {
        await store.lockEndpointMode(trx, livemode);
        await store.refreshEndpointMode(trx, livemode);
      });
    } catch (err) {
      this.#logger.warn({ err, livemode }, "could not record whether the mode still has an enabled webhook endpoint");
    }
  }

  async #fanOut(trx: Transaction<Database>, now: Date, events: store.UndispatchedEvent[], endpoints: EnabledEndpoint[]): Promise<void> {
    if (events.length === 0) return;
    const at = now.toISOString();
    const rows = [];
    for (const event of events) {
      for (const endpoint of endpoints) {
        // An endpoint receives the events committed while it was enabled, in its own mode only.
        if (endpoint.livemode !== event.livemode || endpoint.enabled_at > event.created_at) continue;
        if (!matchesEvent(endpoint.enabled_events, event.type)) continue;
        rows.push({ endpoint_id: endpoint.id, event_id: event.id, state: "pending" as const, attempts: 0, next_attempt_at: at, lease_token: null, created_at: at, updated_at: at });
      }
    }
    await store.insertDeliveries(trx, rows);
    await store.markDispatched(trx, events.map((e) => e.id), at);
  }

  // Endpoint by endpoint, each up to its free slots, through an index on (endpoint, due time):
  // a backlog behind a busy endpoint is never scanned while that endpoint has no slot free.
  async #claim(trx: Transaction<Database>, now: Date, endpoints: { id: string }[], limit: number) {
    const taken: { delivery: store.DueDelivery; token: string }[] = [];
    const token = `${this.#workerId}:${randomUUID()}`;
    const at = now.toISOString();
    // Start at a different endpoint each tick, so none is always served last.
    const start = endpoints.length === 0 ? 0 : this.#ticks % endpoints.length;
    for (let i = 0; i < endpoints.length; i++) {
      const capacity = Math.min(this.#config.concurrency - this.#inFlight, limit) - taken.length;
      if (capacity <= 0) break;
      const endpoint = endpoints[(start + i) % endpoints.length]!;
      const free = Math.min(capacity, this.#config.perEndpointConcurrency - (this.#perEndpoint.get(endpoint.id) ?? 0));
      if (free <= 0) continue;
      for (const delivery of await store.dueDeliveriesOf(trx, endpoint.id, at, free)) taken.push({ delivery, token });
    }
    await store.leaseDeliveries(trx, taken.map((t) => t.delivery), new Date(now.getTime() + this.#config.leaseMs).toISOString(), token);
    return taken;
  }

  async #attempt(delivery: store.DueDelivery, token: string): Promise<void> {
    const attemptedAt = new Date();
    const headers = deliveryHeaders(delivery.event_id, delivery.payload, signingSecrets(delivery, attemptedAt), Math.floor(attemptedAt.getTime() / 1000));
    const sent = await this.#sender.send(delivery.url, delivery.payload, headers, addressPolicy(delivery.livemode, this.#config));
    const result = shownResult(sent, delivery, this.#config);
    this.#finished.push({ delivery, token, attemptedAt, result });
    this.wake();
  }

  async #record(trx: Transaction<Database>, batch: Finished[], now: Date, disabledModes: Set<Livemode>): Promise<void> {
    const attempts: WebhookAttemptsTable[] = [];
    const lastSuccess = new Map<string, string>();
    const existing = await store.existingEndpointIds(trx, batch.map((f) => f.delivery.endpoint_id));
    for (const { delivery, token, attemptedAt, result } of batch) {
      if (!existing.has(delivery.endpoint_id)) continue; // deleted meanwhile, with its deliveries and log
      const key = { endpoint_id: delivery.endpoint_id, event_id: delivery.event_id, lease_token: token };
      const succeeded = result.statusCode !== null && result.statusCode >= 200 && result.statusCode < 300;
      if (this.#stopping && !succeeded) {
        // Cut short by shutdown, not by the receiver: due again at once, and not counted.
        await store.settleDelivery(trx, key, { state: "pending", attempts: delivery.attempts, next_attempt_at: now.toISOString(), updated_at: now.toISOString() });
        continue;
      }
      const attemptCount = delivery.attempts + 1;
      const outcome = this.#nextStep(result, attemptCount, now);
      attempts.push(attemptRow(delivery, "delivery", attemptedAt, result, outcome.next_attempt_at));
      const settled = await store.settleDelivery(trx, key, { ...outcome, attempts: attemptCount, updated_at: now.toISOString() });
      if (!settled) continue;
      if (succeeded) {
        lastSuccess.set(delivery.endpoint_id, attemptedAt.toISOString());
      } else if (result.statusCode === 410) {
        disabledModes.add(delivery.livemode);
        await this.#disable(trx, delivery.endpoint_id, `The endpoint answered 410 Gone to event ${delivery.event_id} at ${attemptedAt.toISOString()}.`, now);
      } else if (outcome.state === "failed") {
        const endpoint = await store.findEndpoint(trx, delivery.livemode, delivery.endpoint_id);
        const succeededSince = lastSuccess.has(delivery.endpoint_id) || (endpoint?.last_success_at ?? "") >= delivery.created_at;
        if (endpoint && !succeededSince) {
          disabledModes.add(delivery.livemode);
          await this.#disable(
            trx,
            delivery.endpoint_id,
            `Every attempt failed for the whole retry schedule: ${attemptCount} attempts at event ${delivery.event_id} from ${delivery.created_at} to ${attemptedAt.toISOString()}, the last ${describe(result)}.`,
            now,
          );
        }
      }
    }
    await store.insertAttempts(trx, attempts);
    for (const [endpointId, at] of lastSuccess) await store.updateEndpoint(trx, endpointId, { last_success_at: at });
  }

  #nextStep(result: AttemptResult, attempts: number, now: Date) {
    const succeeded = result.statusCode !== null && result.statusCode >= 200 && result.statusCode < 300;
    if (succeeded) return { state: "succeeded" as const, next_attempt_at: null };
    const schedule = this.#config.retryScheduleMs;
    if (result.statusCode === 410 || attempts > schedule.length) return { state: "failed" as const, next_attempt_at: null };
    let delay = schedule[attempts - 1]! * (1 - this.#config.jitter * Math.random());
    // Retry-After may ask for a longer wait (never beyond the schedule's longest step).
    if (result.retryAfterMs !== null) delay = Math.max(delay, Math.min(result.retryAfterMs, Math.max(...schedule)));
    return { state: "pending" as const, next_attempt_at: new Date(now.getTime() + delay).toISOString() };
  }

  async #disable(trx: Transaction<Database>, endpointId: string, reason: string, now: Date): Promise<void> {
    await store.updateEndpoint(trx, endpointId, { status: "disabled", disabled_reason: reason, updated_at: now.toISOString() });
    this.#logger.warn({ endpoint: endpointId, reason }, "webhook endpoint disabled");
  }

  async #armTimer(): Promise<void> {
    if (this.#stopping) return;
    const next = await store.nextDueAt(this.#db);
    const untilDue = next === null ? Infinity : Date.parse(next) - Date.now();
    this.#armTimerAfter(Math.max(0, Math.min(untilDue, this.#config.pollMs)));
  }

  #armTimerAfter(ms: number): void {
    if (this.#stopping) return;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = setTimeout(this.wake, ms);
    this.#timer.unref();
  }

  /** Stops claiming, cuts running attempts short and hands their deliveries back; resolves when all is recorded. */
  async stop(): Promise<void> {
    this.#stopping = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.#sender.close();
    await this.#pumping;
    // Each cut-short attempt wakes a tick that hands its delivery back; the last one signals idle.
    while (this.#inFlight > 0 || this.#finished.length > 0) {
      await new Promise<void>((resolve) => {
        this.#idle = resolve;
        if (!this.#pumping) this.wake();
      });
      await this.#pumping;
    }
  }
}

function describe(result: AttemptResult): string {
  return result.statusCode !== null ? `answered HTTP ${result.statusCode}` : `failed: ${result.error}`;
}

export function attemptRow(
  delivery: { endpoint_id: string; event_id: string; event_type: string },
  kind: WebhookAttemptsTable["kind"],
  attemptedAt: Date,
  result: AttemptResult,
  nextAttemptAt: string | null,
): WebhookAttemptsTable {
  const succeeded = result.statusCode !== null && result.statusCode >= 200 && result.statusCode < 300;
  return {
    id: newId("wha", attemptedAt.getTime()),
    endpoint_id: delivery.endpoint_id,
    event_id: delivery.event_id,
    event_type: delivery.event_type,
    kind,
    attempted_at: attemptedAt.toISOString(),
    duration_ms: result.durationMs,
    status_code: result.statusCode,
    error: result.error,
    response_excerpt: result.responseExcerpt === null ? null : result.responseExcerpt.slice(0, 500),
    outcome: succeeded ? "succeeded" : "failed",
    next_attempt_at: nextAttemptAt,
  };
}
