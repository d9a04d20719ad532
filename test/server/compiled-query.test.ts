// Queries compiled once per argument shape answer exactly what the same Kysely builder answers
// per call, whatever the arguments' values, lengths, optional parts and nulls.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { compiledQuery, rowsInsert } from "../../server/store/compiled-query.ts";
import { openStore, type Store } from "../../server/store/database.ts";
import type { Db } from "../../server/store/schema.ts";
import { createTestStore, type TestStore } from "./test-database.ts";

let dir: string;
let testStore: TestStore;
let store: Store;
beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "badgebench-compiled-"));
  testStore = await createTestStore(dir);
  store = await openStore(testStore.options);
  await store.db
    .insertInto("settings")
    .values(Array.from({ length: 20 }, (_, i) => ({ name: `n${i}`, value: i % 2 === 0 ? "even" : "odd" })))
    .execute();
});
afterAll(async () => {
  await store.close();
  await testStore.drop();
  fs.rmSync(dir, { recursive: true, force: true });
});

const settings = (db: Db, names: string[], value: string | undefined) => {
  const query = db.selectFrom("settings").select(["name", "value"]).where("name", "in", names).orderBy("name");
  return value === undefined ? query : query.where("value", "=", value);
};
const compiled = compiledQuery(settings);

describe("compiledQuery", () => {
  it.each([
    [["n1", "n2", "n3"], undefined],
    [["n1", "n2", "n3"], "odd"],
    [["n4"], "even"],
    [["n4"], undefined],
    [["n5", "n6", "n7", "n8", "n9", "n10"], "even"],
    [["n1", "n2", "n3"], "even"],
  ])("names %j, value %s: the rows the builder gives", async (names, value) => {
    const expected = await settings(store.db, names, value).execute();
    expect((await compiled(store.db, names, value)).rows).toEqual(expected);
    expect(expected.length).toBeGreaterThan(0);
  });

  it("inserts rows of objects, nulls included, inside a transaction", async () => {
    const insert = compiledQuery((db: Db, rows: { id: string; name: string; created_at: string }[]) => db.insertInto("users").values(rows));
    await store.db.transaction().execute(async (trx) => {
      await insert(trx, [{ id: "usr_1", name: "one", created_at: "2026-01-01T00:00:00.000Z" }]);
      await insert(trx, [
        { id: "usr_2", name: "two", created_at: "2026-01-02T00:00:00.000Z" },
        { id: "usr_3", name: "three", created_at: "2026-01-03T00:00:00.000Z" },
      ]);
    });
    expect(await store.db.selectFrom("users").select(["id", "name"]).where("id", "like", "usr_%").orderBy("id").execute()).toEqual([
      { id: "usr_1", name: "one" },
      { id: "usr_2", name: "two" },
      { id: "usr_3", name: "three" },
    ]);
  });

  it("rowsInsert inserts every column of each row, a row's undefined column as null, whatever the row count", async () => {
    const insert = rowsInsert("events", ["id", "livemode", "type", "created_at", "payload", "dispatched_at"]);
    const event = (n: number, dispatched_at?: string) => ({ id: `evt_${n}`, livemode: 0 as const, type: `t${n}`, created_at: `2026-01-0${n}T00:00:00.000Z`, payload: `{"n":${n}}`, dispatched_at });
    await store.db.transaction().execute(async (trx) => {
      await insert(trx, [event(1)]);
      await insert(trx, [event(2, "2026-02-02T00:00:00.000Z"), event(3), event(4, "2026-02-04T00:00:00.000Z")]);
      await insert(trx, [event(5)]);
    });
    const rows = await store.db.selectFrom("events").selectAll().where("id", "like", "evt_%").orderBy("id").execute();
    expect(rows).toEqual([1, 2, 3, 4, 5].map((n) => ({ ...event(n), dispatched_at: [2, 4].includes(n) ? `2026-02-0${n}T00:00:00.000Z` : null })));
  });

  it("refuses a builder that changes an argument before Kysely sees it", async () => {
    const prefixed = compiledQuery((db: Db, name: string) => db.selectFrom("settings").selectAll().where("name", "like", `${name}%`));
    await expect(async () => prefixed(store.db, "n1")).rejects.toThrow(/argument was changed/);
  });
});
