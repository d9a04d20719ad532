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
import { ServerLoad } from "../../server/webhooks/server-load.ts";
import { resolveWebhookConfig } from "../../server/webhooks/webhook-config.ts";
import { WebhookSender } from "../../server/webhooks/webhook-sender.ts";
import { createTestDatabase } from "./test-database.ts";
import { startReceiver } from "./webhook-receiver.ts";

const cleanups: (() => unknown)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

function spin(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("the server's load signal", () => {
  const busyWindow = (load: ServerLoad) => {
    load.noteRequest();
    spin(60);
    return load.busy();
  };

  it("is busy after a window where requests arrived and the event loop was nearly always working", async () => {
    const load = new ServerLoad({ windowMs: 50, freeMs: 200 });
    await pause(60);
    expect(load.busy()).toBe(false); // an idle window
    expect(busyWindow(load)).toBe(true);
    expect(busyWindow(load)).toBe(true); // and stays busy while the requests keep the loop full
    load.noteRequest();
    await pause(60);
    expect(load.busy()).toBe(false); // requests with time to spare
  });

  // Three quarters of a window working: the pause can only stretch, which lowers the share.
  const threeQuarterWindow = async (load: ServerLoad) => {
    load.noteRequest();
    await pause(15);
    spin(45);
    return load.busy();
  };

  it("stays busy while the requests alone use more than half the loop, though it idles between them", async () => {
    const load = new ServerLoad({ windowMs: 50, freeMs: 200 });
    expect(busyWindow(load)).toBe(true);
    // A server saturated by creates with --sync full idles while the log syncs; one such window
    // must not let deliveries run free at the requests' expense.
    expect(await threeQuarterWindow(load)).toBe(true);
    expect(await threeQuarterWindow(load)).toBe(true);
  });

  it("is not made busy by a window the loop was working only three quarters of", async () => {
    const load = new ServerLoad({ windowMs: 50, freeMs: 200 });
    await pause(60);
    expect(load.busy()).toBe(false);
    expect(await threeQuarterWindow(load)).toBe(false);
  });

  it("is not busy when the loop is kept full without requests (a backlog draining)", () => {
    const load = new ServerLoad({ windowMs: 50 });
    spin(60);
    expect(load.busy()).toBe(false);
  });

  it("after a busy window with time to spare, lets deliveries run free for a while even on a full loop, then looks again", async () => {
    const load = new ServerLoad({ windowMs: 50, freeMs: 200 });
    expect(busyWindow(load)).toBe(true);
    load.noteRequest();
    await pause(60);
    expect(load.busy()).toBe(false);
    // Deliveries at full speed fill the loop while a request trickles in: still free...
    expect(busyWindow(load)).toBe(false);
    await pause(200);
    load.busy();
    // ...until the free time is over: a full loop with requests makes it busy again.
    expect(busyWindow(load)).toBe(true);
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
    const config = resolveWebhookConfig({ busyRate: BUSY_RATE, pollMs: 50, timeoutMs: 2000, leaseMs: 5000 });
    const sender = new WebhookSender({ resolve: config.resolve, timeoutMs: config.timeoutMs, maxSocketsPerOrigin: config.perEndpointConcurrency });
    const worker = new DeliveryWorker({ db: store.db, sender, config, logger: pino({ level: "silent" }), load: { busy: () => busy } });
    const started = performance.now();
    worker.start();
    cleanups.push(() => worker.stop());

    // It keeps delivering while busy (no starvation), but never more than its share: at most
    // `perTick` claimed per tick, ticks BUSY_TICK_INTERVAL_MS apart (a slow machine only lowers
    // the count).
    await receiver.waitFor((d) => d.length >= 3 * perTick, 10_000);
    const elapsed = performance.now() - started;
    const ticks = Math.floor(elapsed / BUSY_TICK_INTERVAL_MS) + 1;
    expect(receiver.deliveries.length).toBeLessThanOrEqual(ticks * perTick);
    expect(receiver.deliveries.length).toBeLessThan(EVENTS);

    busy = false;
    await receiver.waitFor((d) => new Set(d.map((delivery) => delivery.event.id)).size === EVENTS, 10_000);
  });
});
