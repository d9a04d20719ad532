// The outbox across instances on PostgreSQL (run in the postgres project only): an event is
// written dispatched (no delivery row, nothing for the worker to rewrite) only when its mode had no
// enabled endpoint, and an endpoint created on another instance at the same moment still gets
// every event written from its enabled_at on. Two stores on one database stand for two instances.
import { sql, type Kysely, type Transaction } from "kysely";
import pino from "pino";
import { afterEach, describe, expect, it, onTestFinished, vi } from "vitest";
import { newId } from "../../server/ids.ts";
import { createEndpoint } from "../../server/services/webhook-endpoints.ts";
import { openStore } from "../../server/store/database.ts";
import type { Database, EventsTable } from "../../server/store/schema.ts";
import { insertEvents } from "../../server/store/webhooks-store.ts";
import { DeliveryWorker } from "../../server/webhooks/delivery-worker.ts";
import { resolveWebhookConfig } from "../../server/webhooks/webhook-config.ts";
import { WebhookSender } from "../../server/webhooks/webhook-sender.ts";
import { killLeftoverServers, tempDirs } from "./cli-process.ts";
import { createPostgresDatabase } from "./test-database.ts";

const dirs = tempDirs("postgres-outbox");
afterEach(killLeftoverServers);

async function twoInstances() {
  const database = await createPostgresDatabase();
  onTestFinished(() => database.drop());
  const stores = await Promise.all(["a", "b"].map((name) => openStore({ dataDir: dirs(name), databaseUrl: database.url })));
  onTestFinished(async () => void (await Promise.all(stores.map((store) => store.close()))));
  return stores.map((store) => store.db) as [Kysely<Database>, Kysely<Database>];
}

const testEvent = (): EventsTable => {
  const id = newId("evt");
  return { id, livemode: 0, type: "attendance.recorded", created_at: new Date().toISOString(), payload: JSON.stringify({ id }) };
};

/** A transaction left open until `finish()`: what `body` returned, once it has run. */
function openTransaction<T>(db: Kysely<Database>, body: (trx: Transaction<Database>) => Promise<T>) {
  let finish!: () => void;
  const finished = new Promise<void>((resolve) => (finish = resolve));
  let ran!: (value: T) => void;
  const result = new Promise<T>((resolve) => (ran = resolve));
  const committed = db.transaction().execute(async (trx) => {
    ran(await body(trx));
    await finished;
  });
  return { result, finish, committed };
}

/** Resolves once a backend of this database waits for a lock (the other instance's statement is blocked). */
async function someoneWaitsForALock(db: Kysely<Database>): Promise<void> {
  for (;;) {
    const { rows } = await sql<{ n: number }>`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`.execute(db);
    if (rows[0]!.n > 0) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

async function dispatchedAt(db: Kysely<Database>, id: string) {
  return (await db.selectFrom("events").select("dispatched_at").where("id", "=", id).executeTakeFirstOrThrow()).dispatched_at;
}

describe("events and an endpoint created at the same moment on two instances", () => {
  it("writes an event with no endpoint to go to dispatched, and one written while an endpoint is being created for the worker", async () => {
    const [a, b] = await twoInstances();
    const alone = testEvent();
    await b.transaction().execute((trx) => insertEvents(trx, [alone]));
    expect(await dispatchedAt(a, alone.id)).toBe(alone.created_at);

    const creating = openTransaction(a, (trx) => createEndpoint(trx, 0, { url: "http://127.0.0.1:9/hooks", enabled_events: ["*"] }));
    const endpoint = (await creating.result).body as { enabled_at?: string; id: string };
    const racing = testEvent();
    const writing = b.transaction().execute((trx) => insertEvents(trx, [racing]));
    // The event's statement waits for the endpoint's transaction, then reads the endpoint as committed.
    await someoneWaitsForALock(a);
    creating.finish();
    await Promise.all([creating.committed, writing]);
    expect(endpoint.id).toMatch(/^whe_/);
    expect(await dispatchedAt(a, racing.id)).toBeNull();
  });

  it("makes an endpoint's creation wait for the writes that found no endpoint, and takes its enabled_at after them", async () => {
    const [a, b] = await twoInstances();
    const early = testEvent();
    const writing = openTransaction(b, async (trx) => {
      await insertEvents(trx, [early]);
      return trx;
    });
    const trx = await writing.result;
    const creating = a.transaction().execute((t) => createEndpoint(t, 0, { url: "http://127.0.0.1:9/hooks", enabled_events: ["*"] }));
    await someoneWaitsForALock(a);
    // An event made after the endpoint's transaction began waiting (on a later millisecond), written before it could go on.
    const blockedAt = new Date().toISOString();
    while (new Date().toISOString() <= blockedAt) await new Promise((resolve) => setImmediate(resolve));
    const late = testEvent();
    await insertEvents(trx, [late]);
    writing.finish();
    await Promise.all([writing.committed, creating]);
    const { enabled_at } = await a.selectFrom("webhook_endpoints").select("enabled_at").executeTakeFirstOrThrow();
    expect([await dispatchedAt(a, early.id), await dispatchedAt(a, late.id)]).toEqual([early.created_at, late.created_at]);
    // Both committed before the endpoint existed, and were created no later than its enabled_at.
    expect(late.created_at <= enabled_at).toBe(true);
  });
});

describe("the delivery worker's tick", () => {
  it("fans an event out to the endpoint committed before it, though both committed while the tick was reading", async () => {
    const [a, b] = await twoInstances();
    // The tick's read of the events waits behind this transaction's lock on the table; meanwhile
    // an endpoint is created, then an event written for it, and both commit before that read goes on.
    const holding = openTransaction(b, async (trx) => {
      await sql`lock table events in access exclusive mode`.execute(trx);
      return trx;
    });
    const trx = await holding.result;
    const config = resolveWebhookConfig({ pollMs: 50, timeoutMs: 2000, leaseMs: 5000, localTestTargets: true });
    const sender = new WebhookSender({ resolve: config.resolve, timeoutMs: config.timeoutMs, maxSocketsPerOrigin: config.perEndpointConcurrency });
    const worker = new DeliveryWorker({ db: a, sender, config, logger: pino({ level: "silent" }) });
    worker.start();
    try {
      await someoneWaitsForALock(a);
      const created = await b.transaction().execute((t) => createEndpoint(t, 0, { url: "http://127.0.0.1:9/hooks", enabled_events: ["*"] }));
      const endpoint = created.body as { id: string };
      const event = testEvent();
      await insertEvents(trx, [event]);
      holding.finish();
      await holding.committed;
      await vi.waitFor(async () => expect(await dispatchedAt(a, event.id)).not.toBeNull(), { timeout: 10_000, interval: 20 });
      const deliveries = await a.selectFrom("webhook_deliveries").select("endpoint_id").where("event_id", "=", event.id).execute();
      expect(deliveries.map((delivery) => delivery.endpoint_id)).toEqual([endpoint.id]);
    } finally {
      await worker.stop();
    }
  });
});
