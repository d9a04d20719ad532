// The server's store checkpoints the write-ahead log in a worker thread: writes that stay far
// below the serving connection's own wal_autocheckpoint still reach the database file.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { CHECKPOINT_INTERVAL_MS } from "../../server/store/checkpointer.ts";
import { openStore, sqliteFileOf, type Store } from "../../server/store/database.ts";

const dirs: string[] = [];
const stores: Store[] = [];
afterAll(async () => {
  for (const store of stores) await store.close();
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
});

async function storeWithRows(serving: boolean, errors: string[]) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "badgebench-checkpoints-"));
  dirs.push(dir);
  const store = await openStore({ dataDir: dir, serving: serving ? { onCheckpointError: (m) => errors.push(m) } : undefined });
  stores.push(store);
  const sizeBefore = fs.statSync(sqliteFileOf(store)).size;
  const rows = Array.from({ length: 500 }, (_, i) => ({ name: `filler-${i}`, value: "x".repeat(200) }));
  await store.db.insertInto("settings").values(rows).execute();
  await new Promise((resolve) => setTimeout(resolve, CHECKPOINT_INTERVAL_MS * 5));
  return { grown: fs.statSync(sqliteFileOf(store)).size - sizeBefore };
}

describe("background WAL checkpoints", () => {
  it("copy committed pages into the database file without a commit doing it", async () => {
    const errors: string[] = [];
    const { grown } = await storeWithRows(true, errors);
    expect(grown).toBeGreaterThan(100_000);
    expect(errors).toEqual([]);
  });

  it("(the same writes without the worker stay in the log until the fallback threshold)", async () => {
    const { grown } = await storeWithRows(false, []);
    expect(grown).toBeLessThan(100_000);
  });
});
