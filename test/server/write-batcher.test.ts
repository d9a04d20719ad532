// The group commit on the real store: writes queued together share one transaction and one log
// sync; one that throws has only its own changes undone, runs once, and its neighbours commit;
// a group closes early when its first write has waited MAX_GROUP_WAIT_MS.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Transaction } from "kysely";
import { afterAll, describe, expect, it } from "vitest";
import { openStore, type Store } from "../../server/store/database.ts";
import type { Database } from "../../server/store/schema.ts";
import { MAX_GROUP_WAIT_MS, together, WriteBatcher } from "../../server/store/write-batcher.ts";

const dirs: string[] = [];
const stores: Store[] = [];
afterAll(async () => {
  for (const store of stores) await store.close();
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
});

/** A batcher over a fresh store whose log syncs are counted (one per committed group with a durable write). */
async function batcherOnNewStore() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "badgebench-batcher-"));
  dirs.push(dir);
  const store = await openStore({ dataDir: dir });
  stores.push(store);
  const syncs = { count: 0 };
  const writes = new WriteBatcher(store.db, () => {
    syncs.count++;
    return store.logSynced();
  });
  const names = async () => (await store.db.selectFrom("settings").select("name").where("name", "like", "t-%").orderBy("name").execute()).map((r) => r.name);
  return { writes, syncs, names };
}

const insert = (trx: Transaction<Database>, name: string) => trx.insertInto("settings").values({ name, value: "v" }).execute();

const nextMacrotask = () => new Promise((resolve) => setImmediate(resolve));

function busyWait(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

describe("the write batcher", () => {
  it("commits the writes queued together in one transaction with one log sync", async () => {
    const { writes, syncs, names } = await batcherOnNewStore();
    const results = await Promise.all(["t-a", "t-b", "t-c"].map((name) => writes.run(async (trx) => (await insert(trx, name), name))));
    expect(results).toEqual(["t-a", "t-b", "t-c"]);
    expect(syncs.count).toBe(1);
    expect(await names()).toEqual(["t-a", "t-b", "t-c"]);
  });

  it("undoes only the changes of a write that throws, runs it once, and commits its neighbours", async () => {
    const { writes, names } = await batcherOnNewStore();
    let failingRuns = 0;
    let neighbourRuns = 0;
    const before = writes.run(async (trx) => {
      neighbourRuns++;
      await insert(trx, "t-before");
    });
    const failing = writes.run(async (trx) => {
      failingRuns++;
      await insert(trx, "t-failing");
      throw new Error("refused after writing");
    });
    const after = writes.run(async (trx) => {
      neighbourRuns++;
      await insert(trx, "t-after");
    });
    await expect(failing).rejects.toThrow("refused after writing");
    await before;
    await after;
    expect(failingRuns).toBe(1);
    expect(neighbourRuns).toBe(2);
    expect(await names()).toEqual(["t-after", "t-before"]);
  });

  it("undoes a write whose statement fails (a constraint) without failing the group", async () => {
    const { writes, names } = await batcherOnNewStore();
    await writes.run((trx) => insert(trx, "t-taken"));
    const results = await Promise.allSettled([
      writes.run((trx) => insert(trx, "t-first")),
      writes.run(async (trx) => {
        await insert(trx, "t-half");
        await insert(trx, "t-taken");
      }),
      writes.run((trx) => insert(trx, "t-last")),
    ]);
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect(String((results[1] as PromiseRejectedResult).reason)).toMatch(/UNIQUE constraint failed/);
    expect(await names()).toEqual(["t-first", "t-last", "t-taken"]);
  });

  it("waits for the requests already read before it writes, unless its first write has waited too long", async () => {
    const { writes } = await batcherOnNewStore();
    for (const waitMs of [0, MAX_GROUP_WAIT_MS * 3]) {
      await nextMacrotask();
      let written = false;
      // Registered before the batcher's own setImmediate, so it runs first in the next turn.
      const writtenBeforeNextTurn = new Promise<boolean>((resolve) => setImmediate(() => resolve(written)));
      const first = writes.run(async (trx) => {
        await insert(trx, `t-first-${waitMs}`);
        written = true;
      });
      busyWait(waitMs);
      const second = writes.run((trx) => insert(trx, `t-second-${waitMs}`));
      expect(await writtenBeforeNextTurn).toBe(waitMs > 0);
      await Promise.all([first, second]);
    }
  });

  it("runs a group's writes in arrival order on SQLite, lock keys or not (one writer, no row locks)", async () => {
    const { writes } = await batcherOnNewStore();
    const ran: string[] = [];
    const queue = (name: string, lockKey?: string) => writes.run(async () => void ran.push(name), { lockKey });
    await Promise.all([queue("c1", "device:c"), queue("plain1"), queue("a", "device:a"), queue("c2", "device:c"), queue("b", "device:b")]);
    expect(ran).toEqual(["c1", "plain1", "a", "c2", "b"]);
  });
});

describe("steps of one write sent together", () => {
  it("pass on the first failure only once every step has ended, so none sends a statement after the write's savepoint is rolled back", async () => {
    let finishSlow!: () => void;
    let slowEnded = false;
    const slow = new Promise<string>((resolve) => (finishSlow = () => resolve("slow"))).then((value) => {
      slowEnded = true;
      return value;
    });
    let settled = false;
    const outcome = together(Promise.reject(new Error("first step failed")), slow).then(
      () => "resolved",
      (error: Error) => ((settled = true), `${error.message}; slow step ended: ${slowEnded}`),
    );
    // Every callback already queued has run: the failure has not passed on while a step runs.
    await new Promise((resolve) => setImmediate(resolve));
    expect(settled).toBe(false);
    finishSlow();
    expect(await outcome).toBe("first step failed; slow step ended: true");
    expect(await together(Promise.resolve(1), Promise.resolve("two"))).toEqual([1, "two"]);
  });
});
