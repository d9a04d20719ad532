// The change feed (server/store/change-feed.ts) that the caches of principals and releases trust:
// on SQLite, another connection's commit moves it; on PostgreSQL another process's announcement
// moves it through its notification, and without the notification (the listening connection
// down) once the check interval has passed since the version row was last read, never before.
// Another process is stood for by plain SQL on a connection of the test's own (what
// announceChange writes), so this process's own count of its changes is not what moves the feed.
// And this process's own change, announced inside a write batcher group, moves it again at the
// group's commit (a read on another connection between the two saw the old row).
import crypto from "node:crypto";
import { sql, type Kysely } from "kysely";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { cachedLookup } from "../../server/services/feed-cache.ts";
import { announceChange, CHANGES_CHANNEL, PostgresChangeFeed } from "../../server/store/change-feed.ts";
import { openStore, type Store } from "../../server/store/database.ts";
import type { Database } from "../../server/store/schema.ts";
import { WriteBatcher } from "../../server/store/write-batcher.ts";
import { tempDirs } from "./cli-process.ts";
import { createPostgresDatabase, TEST_STORE, type TestDatabase } from "./test-database.ts";

const dirs = tempDirs("change-feed");
let database: TestDatabase | undefined;
let store: Store;
let other: Store;

beforeAll(async () => {
  database = TEST_STORE === "postgres" ? await createPostgresDatabase() : undefined;
  const dataDir = dirs("store");
  store = await openStore({ dataDir, databaseUrl: database?.url });
  other = await openStore({ dataDir, databaseUrl: database?.url, create: false });
});

afterAll(async () => {
  await store?.close();
  await other?.close();
  await database?.drop();
});

/** What another process's announceChange commits: a fresh change_version and its notification. */
async function announceElsewhere(db: Kysely<Database>): Promise<void> {
  const value = crypto.randomUUID();
  await db.transaction().execute(async (trx) => {
    await trx
      .insertInto("settings")
      .values({ name: "change_version", value })
      .onConflict((oc) => oc.column("name").doUpdateSet({ value }))
      .execute();
    await sql`select pg_notify(${CHANGES_CHANNEL}, ${value})`.execute(trx);
  });
}

describe.runIf(TEST_STORE === "sqlite")("the change feed on SQLite", () => {
  it("moves when another connection commits, and stays while none does", async () => {
    const before = await store.changes.current();
    expect(await store.changes.current()).toBe(before);
    await other.db.insertInto("settings").values({ name: `other-${crypto.randomUUID()}`, value: "x" }).execute();
    expect(await store.changes.current()).not.toBe(before);
  });
});

describe.runIf(TEST_STORE === "postgres")("the change feed on PostgreSQL", () => {
  const applicationName = `change-feed-test-${crypto.randomBytes(4).toString("hex")}`;
  const connect = async () => {
    const client = new pg.Client({ connectionString: database!.url, application_name: applicationName });
    client.on("error", () => {});
    await client.connect();
    return client;
  };
  const feeds: PostgresChangeFeed[] = [];
  afterAll(async () => {
    for (const feed of feeds) await feed.close();
  });

  /** A feed whose clock moves only when the test moves it. */
  async function feedWith(options: { listen: boolean; checkIntervalMs: number }) {
    const clock = { now: 0 };
    const feed = await new PostgresChangeFeed({ db: store.db, connect, now: () => clock.now, ...options }).start();
    feeds.push(feed);
    return { feed, clock };
  }

  it("without its notification connection, sees another process's change once the check interval has passed, and not before half of it", async () => {
    const { feed, clock } = await feedWith({ listen: false, checkIntervalMs: 500 });
    const before = await feed.current();
    await announceElsewhere(other.db);
    clock.now = 249;
    expect(await feed.current()).toBe(before);
    clock.now = 500;
    const after = await feed.current();
    expect(after).not.toBe(before);
    // Read once more at 1000: nothing changed since, so the value stays.
    clock.now = 1000;
    expect(await feed.current()).toBe(after);
  });

  it("from half its check interval on, answers at once and reads the version row behind the answer, which then shows another process's change", async () => {
    const { feed, clock } = await feedWith({ listen: false, checkIntervalMs: 500 });
    const before = await feed.current();
    await announceElsewhere(other.db);
    // Before half the interval nothing is read.
    clock.now = 249;
    expect(feed.current()).toBe(before);
    // From 250 the answer comes at once, still the value confirmed at 0, and the row is read behind it.
    clock.now = 250;
    expect(feed.current()).toBe(before);
    // The clock stays at 250, so no request ever waits (current() answers a number, never a
    // promise); the change arrives through the read the request at 250 started.
    await vi.waitFor(() => expect(feed.current()).not.toBe(before), { timeout: 10_000, interval: 20 });
  });

  it("listening, sees another process's change from its notification, without the version row", async () => {
    const { feed } = await feedWith({ listen: true, checkIntervalMs: 500 });
    expect(feed.listening).toBe(true);
    const before = await feed.current();
    await announceElsewhere(other.db);
    // The clock never moves: only the notification can move the feed.
    await vi.waitFor(async () => expect(await feed.current()).not.toBe(before), { timeout: 10_000, interval: 20 });
  });

  it("listens again after its connection was cut, and then hears changes", async () => {
    const { feed } = await feedWith({ listen: true, checkIntervalMs: 500 });
    const before = await feed.current();
    await sql`select pg_terminate_backend(pid) from pg_stat_activity where application_name = ${applicationName}`.execute(other.db);
    // Losing the connection moves the feed at once: notifications may have been missed.
    await vi.waitFor(() => expect(feed.listening).toBe(false), { timeout: 10_000, interval: 20 });
    expect(await feed.current()).not.toBe(before);
    await vi.waitFor(() => expect(feed.listening).toBe(true), { timeout: 10_000, interval: 50 });
    const listening = await feed.current();
    await announceElsewhere(other.db);
    await vi.waitFor(async () => expect(await feed.current()).not.toBe(listening), { timeout: 10_000, interval: 20 });
  });

  it("a change announced in a write batcher group's transaction reaches this process's caches at the group's commit, though a cache read the old row after the announcement", async () => {
    // Only this process's own announcements move this feed: no listening, no version row read.
    const { feed } = await feedWith({ listen: false, checkIntervalMs: Number.MAX_SAFE_INTEGER });
    const name = `announced-${crypto.randomUUID()}`;
    await store.db.insertInto("settings").values({ name, value: "before" }).execute();
    const cached = cachedLookup(feed, async (key: string) => (await store.db.selectFrom("settings").select("value").where("name", "=", key).executeTakeFirst())?.value);
    const writes = new WriteBatcher(store.db, store.logSynced);
    let announced!: () => void;
    let commit!: () => void;
    const announcedInGroup = new Promise<void>((resolve) => (announced = resolve));
    const committing = new Promise<void>((resolve) => (commit = resolve));
    const write = writes.run(async (trx) => {
      await announceChange(trx, (announcing) => announcing.updateTable("settings").set({ value: "after" }).where("name", "=", name).execute());
      announced();
      await committing;
    });
    await announcedInGroup;
    // Read on another connection of the pool after the announcement, before the commit: the old row.
    expect(await cached(name)).toBe("before");
    commit();
    await write;
    expect(await cached(name)).toBe("after");
  });
});
