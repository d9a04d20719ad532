// Delivery steps back while requests keep the server busy: the load signal (ServerLoad, from the
// event loop's utilization and the requests arriving) and the delivery worker's busy share, on
// the real store with a real receiver.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import pino from "pino";
import { afterAll, describe, expect, it } from "vitest";
import { newId } from "../../server/ids.ts";
import { createEndpoint } from "../../server/services/webhook-endpoints.ts";
import { openStore, type Store } from "../../server/store/database.ts";
import { BUSY_TICK_INTERVAL_MS, DeliveryWorker } from "../../server/webhooks/delivery-worker.ts";
import { ServerLoad, type LoopMeter } from "../../server/webhooks/server-load.ts";
import { resolveWebhookConfig } from "../../server/webhooks/webhook-config.ts";
import { WebhookSender } from "../../server/webhooks/webhook-sender.ts";
import { createTestDatabase } from "./test-database.ts";
import { startReceiver } from "./webhook-receiver.ts";

const cleanups: (() => unknown)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

/**
 * The loop as the load signal sees it, driven by the test: `work(ms, share)` lets `ms` pass with
 * the loop working `share` of it. Neither the machine's speed nor its other jobs change a window.
 */
function fakeLoop() {
  let now = 0;
  let worked = 0;
  const meter: LoopMeter = {
    now: () => now,
    mark: () => ({ idle: now - worked, active: worked, utilization: 0 }),
    utilizationSince: (since) => {
      const elapsed = now - (since.idle + since.active);
      return elapsed === 0 ? 0 : (worked - since.active) / elapsed;
    },
  };
  return {
    meter,
    work(ms: number, share: number) {
      now += ms;
      worked += ms * share;
    },
  };
}

describe("the server's load signal", () => {
  const signal = () => {
    const loop = fakeLoop();
    return { loop, load: new ServerLoad({ windowMs: 50, freeMs: 200, meter: loop.meter }) };
  };
  /** A window with a request in it, the loop working `share` of its 60 ms. */
  const windowOf = ({ loop, load }: ReturnType<typeof signal>, share: number) => {
    load.noteRequest();
    loop.work(60, share);
    return load.busy();
  };

  it("is busy after a window where requests arrived and the event loop was nearly always working", () => {
    const s = signal();
    s.loop.work(60, 0);
    expect(s.load.busy()).toBe(false); // an idle window
    expect(windowOf(s, 1)).toBe(true);
    expect(windowOf(s, 1)).toBe(true); // and stays busy while the requests keep the loop full
    expect(windowOf(s, 0.1)).toBe(false); // requests with time to spare
  });

  it("stays busy while the requests alone use more than half the loop, though it idles between them", () => {
    const s = signal();
    expect(windowOf(s, 1)).toBe(true);
    // A server saturated by creates with --sync full idles while the log syncs; one such window
    // must not let deliveries run free at the requests' expense.
    expect(windowOf(s, 0.75)).toBe(true);
    expect(windowOf(s, 0.75)).toBe(true);
    expect(windowOf(s, 0.4)).toBe(false); // below half: the requests leave time to spare
  });

  it("is not made busy by a window the loop was working only three quarters of", () => {
    const s = signal();
    s.loop.work(60, 0);
    expect(s.load.busy()).toBe(false);
    expect(windowOf(s, 0.75)).toBe(false);
  });

  it("is not busy when the loop is kept full without requests (a backlog draining)", () => {
    const s = signal();
    s.loop.work(60, 1);
    expect(s.load.busy()).toBe(false);
  });

  it("after a busy window with time to spare, lets deliveries run free for a while even on a full loop, then looks again", () => {
    const s = signal();
    expect(windowOf(s, 1)).toBe(true);
    expect(windowOf(s, 0.1)).toBe(false);
    // Deliveries at full speed fill the loop while a request trickles in: still free...
    expect(windowOf(s, 1)).toBe(false);
    s.loop.work(200, 0);
    s.load.busy();
    // ...until the free time is over: a full loop with requests makes it busy again.
    expect(windowOf(s, 1)).toBe(true);
  });
});

describe("the delivery worker while the server is busy", () => {
  it("delivers only its busy share, keeps going at that pace, and sends the rest once the load eases", async () => {
    const database = await createTestDatabase();
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "badgebench-busy-"));
    const store: Store = await openStore({ dataDir: dir, databaseUrl: database?.url });
    cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }), () => database?.drop(), () => store.close());
    const receiver = await startReceiver();
    cleanups.push(() => receiver.close());

    await store.db.transaction().execute((trx) => createEndpoint(trx, 0, { url: receiver.url, enabled_events: ["*"] }));
    const EVENTS = 100;
    const createdAt = new Date().toISOString();
    await store.db
      .insertInto("events")
      .values(
        Array.from({ length: EVENTS }, () => {
          const id = newId("evt");
          return { id, livemode: 0 as const, type: "attendance.recorded", created_at: createdAt, payload: JSON.stringify({ id, object: "event", type: "attendance.recorded" }) };
        }),
      )
      .execute();

    const BUSY_RATE = 20; // 2 a tick
    const perTick = (BUSY_RATE * BUSY_TICK_INTERVAL_MS) / 1000;
    let busy = true;
    const config = resolveWebhookConfig({ busyRate: BUSY_RATE, pollMs: 50, timeoutMs: 2000, leaseMs: 5000, localTestTargets: true });
    const sender = new WebhookSender({ resolve: config.resolve, timeoutMs: config.timeoutMs, maxSocketsPerOrigin: config.perEndpointConcurrency });
    const worker = new DeliveryWorker({ db: store.db, sender, config, logger: pino({ level: "silent" }), load: { busy: () => busy } });
    worker.start();
    cleanups.push(() => worker.stop());

    // It keeps delivering while busy (no starvation), but never more than its share: at most
    // `perTick` claimed per tick. Counted in the worker's own ticks, not in wall time, so a slow
    // machine changes how many ticks ran, never the bound.
    await receiver.waitFor((d) => d.length >= 3 * perTick, 10_000);
    const delivered = receiver.deliveries.length; // read before the ticks: a tick after this read only raises the bound
    expect(delivered).toBeLessThanOrEqual(worker.ticks * perTick);
    expect(delivered).toBeLessThan(EVENTS);

    busy = false;
    await receiver.waitFor((d) => new Set(d.map((delivery) => delivery.event.id)).size === EVENTS, 10_000);
  });
});
