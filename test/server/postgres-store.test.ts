// The server on PostgreSQL (run in the postgres project only, vitest.config.ts): instances that
// start at once on one new database, and a configuration that cannot work ending the start with
// one clear line and exit 1, never a hang; two write batchers (as in two instances) whose groups
// deadlock, with the write PostgreSQL ended run again.
import net from "node:net";
import type { Transaction } from "kysely";
import { afterEach, describe, expect, it, onTestFinished } from "vitest";
import { createRecords } from "../../server/services/attendance.ts";
import { createApiKey, type Principal } from "../../server/services/api-keys.ts";
import { groupedWrite, IdempotencyGate } from "../../server/services/idempotency.ts";
import { completeIdempotencyKey } from "../../server/store/idempotency-store.ts";
import { importSchool } from "../../server/services/school-import.ts";
import { openStore, postgresQueriesSent, postgresWritesSent } from "../../server/store/database.ts";
import type { Database } from "../../server/store/schema.ts";
import { together, WriteBatcher, type CombinableWrite } from "../../server/store/write-batcher.ts";
import { baseEnv, killLeftoverServers, run, serve, tempDirs } from "./cli-process.ts";
import { smallSchool } from "./harness.ts";
import { createPostgresDatabase } from "./test-database.ts";

const dirs = tempDirs("postgres");
afterEach(killLeftoverServers);

describe("several instances starting on one new database", () => {
  it("all start, the schema is migrated once, and what one writes the others read", async () => {
    const database = await createPostgresDatabase();
    onTestFinished(() => database.drop());
    const servers = await Promise.all([1, 2, 3].map(() => serve(["--data", dirs("data"), "--database", database.url])));
    const store = await openStore({ dataDir: dirs("admin"), databaseUrl: database.url });
    try {
      const migrations = await store.db.selectFrom("kysely_migration" as never).select("name" as never).execute();
      expect(migrations.length).toBeGreaterThan(0);
      await importSchool(store.db, smallSchool(), { mode: "test" });
      const key = (await createApiKey(store.db, { mode: "test", scopes: ["attendance:write"] })).secret;
      const session = await store.db.selectFrom("sessions").select("id").orderBy("starts_at").executeTakeFirstOrThrow();
      const created = await fetch(`${servers[0]!.url}/v1/attendance`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "idempotency-key": "first" },
        body: JSON.stringify({ session_id: session.id, external_id: "S1", status: "present" }),
      });
      expect(created.status).toBe(201);
      const { id } = (await created.json()) as { id: string };
      for (const server of servers.slice(1)) {
        const read = await fetch(`${server.url}/v1/attendance/${id}`, { headers: { authorization: `Bearer ${key}` } });
        expect(read.status).toBe(200);
        expect(await read.json()).toMatchObject({ id, status: "present" });
      }
    } finally {
      await store.close();
    }
  });
});

describe("a database URL that cannot work", () => {
  const start = async (database: string) => {
    const startedAt = Date.now();
    const result = await run(["serve", "--port", "0", "--data", dirs("data"), "--database", database], { timeoutMs: 45_000 });
    return { ...result, seconds: (Date.now() - startedAt) / 1000 };
  };
  const oneLine = (stderr: string) => {
    const lines = stderr.split("\n").filter((line) => line.length > 0);
    expect(lines, stderr).toHaveLength(1);
    return lines[0]!;
  };

  it("refuses a URL that is not postgres://, naming what it wants", async () => {
    const result = await start("mysql://root@127.0.0.1/school");
    expect(result.code).toBe(1);
    expect(oneLine(result.stderr)).toBe("badgebench: the database URL must start with postgres:// (got mysql://...); leave it out to use SQLite in the data directory");
    expect(result.stdout).toBe("");
  });

  it("refuses a URL that names no database", async () => {
    const result = await start("postgres://postgres@127.0.0.1:5432");
    expect(result.code).toBe(1);
    expect(oneLine(result.stderr)).toMatch(/names no database; add \/DATABASE$/);
  });

  it("ends the start when nothing listens at the address, without showing the password", async () => {
    const port = await freePort();
    const result = await start(`postgres://badgebench:s3cret-password@127.0.0.1:${port}/school`);
    expect(result.code).toBe(1);
    const line = oneLine(result.stderr);
    expect(line).toBe(`badgebench: cannot connect to PostgreSQL at postgres://badgebench:***@127.0.0.1:${port}/school: connect ECONNREFUSED 127.0.0.1:${port}`);
    expect(result.stderr).not.toContain("s3cret-password");
  });

  it("ends the start within the connect timeout when the address accepts but never answers", async () => {
    const accepted = new Set<net.Socket>();
    const silent = net.createServer((socket) => accepted.add(socket));
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    onTestFinished(() => {
      for (const socket of accepted) socket.destroy();
      silent.close();
    });
    const { port } = silent.address() as net.AddressInfo;
    const result = await start(`postgres://postgres@127.0.0.1:${port}/school`);
    expect(result.code).toBe(1);
    expect(oneLine(result.stderr)).toMatch(new RegExp(`^badgebench: cannot connect to PostgreSQL at postgres://postgres@127.0.0.1:${port}/school: .*timeout`, "i"));
    // The 5 s connect timeout on top of what a start that fails at once takes, measured in the
    // same test (the command's own start is slow on a loaded machine); never the run's limit.
    const refused = await start(`postgres://postgres@127.0.0.1:${await freePort()}/school`);
    expect(result.seconds).toBeLessThan(refused.seconds + 10);
  });

  it("names a database that does not exist", async () => {
    const result = await start("postgres://postgres@127.0.0.1:5432/badgebench_no_such_database");
    expect(result.code).toBe(1);
    expect(oneLine(result.stderr)).toMatch(/cannot connect to PostgreSQL at .*: database "badgebench_no_such_database" does not exist$/);
  });

  it("ends the start in one line when the connection breaks while the tables are migrated", async () => {
    // A proxy to the real server that passes the start's connection check and cuts the
    // connection once the migrator speaks.
    const database = await createPostgresDatabase();
    onTestFinished(() => database.drop());
    const target = new URL(database.url);
    const sockets = new Set<net.Socket>();
    const proxy = net.createServer((client) => {
      const upstream = net.connect(Number(target.port || 5432), target.hostname);
      sockets.add(client).add(upstream);
      client.on("data", (chunk) => {
        if (chunk.includes("kysely_migration")) {
          client.destroy();
          upstream.destroy();
        } else upstream.write(chunk);
      });
      upstream.on("data", (chunk) => client.write(chunk));
      client.on("error", () => upstream.destroy());
      upstream.on("error", () => client.destroy());
    });
    await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
    onTestFinished(() => {
      for (const socket of sockets) socket.destroy();
      proxy.close();
    });
    const proxied = new URL(database.url);
    proxied.host = `127.0.0.1:${(proxy.address() as net.AddressInfo).port}`;
    const result = await start(proxied.toString());
    expect(result.code).toBe(1);
    expect(oneLine(result.stderr)).toMatch(/^badgebench: PostgreSQL at postgres:\/\/.* stopped answering while the tables were migrated \(.+\); no migration was half applied, start again once it answers$/);
  });

  it("takes the URL from DATABASE_URL when the flag is absent", async () => {
    const result = await run(["serve", "--port", "0", "--data", dirs("data")], { env: baseEnv({ DATABASE_URL: "mysql://root@127.0.0.1/school" }), timeoutMs: 30_000 });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("the database URL must start with postgres://");
  });
});

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const probe = net.createServer();
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address() as net.AddressInfo;
      probe.close(() => resolve(port));
    });
  });
}

/** A store on a new database of its own, closed and dropped when the test finishes. */
async function storeOnNewDatabase(name: string) {
  const database = await createPostgresDatabase();
  onTestFinished(() => database.drop());
  const store = await openStore({ dataDir: dirs(name), databaseUrl: database.url });
  onTestFinished(() => store.close());
  return store;
}

/** A write batcher on a new database whose settings `prefix`-1 to -3 are empty, and a write setting one. */
async function batcherOnSettings(prefix: string) {
  const store = await storeOnNewDatabase(prefix);
  await store.db.insertInto("settings").values([1, 2, 3].map((n) => ({ name: `${prefix}-${n}`, value: "" }))).execute();
  const set = (name: string) => (trx: Transaction<Database>) => trx.updateTable("settings").set({ value: "set" }).where("name", "=", name).execute();
  return { store, writes: new WriteBatcher(store.db, store.logSynced), set };
}

describe("two write batchers on one database, as in two instances", () => {
  it("splits a group by lock key into transactions written at once, each running its writes without a lock key first, in arrival order, then by lock key, one key's writes in arrival order", async () => {
    const store = await storeOnNewDatabase("ordered");
    const writes = new WriteBatcher(store.db, store.logSynced);
    const ran = new Map<object, string[]>();
    const queue = (name: string, lockKey?: string) => writes.run(async (trx) => void ran.set(trx, [...(ran.get(trx) ?? []), name]), { lockKey });
    await Promise.all([queue("c1", "device:c"), queue("plain1"), queue("a", "device:a"), queue("c2", "device:c"), queue("b", "device:b"), queue("plain2")]);
    // One transaction per key in arrival order (c, a, b), the writes without a key in the first.
    expect([...ran.values()].sort()).toEqual([["a"], ["b"], ["plain1", "plain2", "c1", "c2"]]);
  });

  it("runs a group's combinable writes as one statement per kind, outside a transaction, and a kind whose statement fails write by write", async () => {
    const store = await storeOnNewDatabase("combined");
    const writes = new WriteBatcher(store.db, store.logSynced);
    await store.db.insertInto("settings").values([{ name: "k-1", value: "" }, { name: "k-2", value: "" }, { name: "k-3", value: "" }]).execute();
    const statements: string[][] = [];
    const settingWrite: CombinableWrite<{ name: string; value: string }> = {
      one: async (db, args) => {
        if (args.value === "bad") throw new Error("refused");
        statements.push([`one ${args.name} in a transaction: ${db.isTransaction}`]);
        await db.updateTable("settings").set({ value: args.value }).where("name", "=", args.name).execute();
      },
      many: async (db, list) => {
        statements.push(list.map((args) => `many ${args.name} in a transaction: ${db.isTransaction}`));
        if (list.some((args) => args.value === "bad")) throw new Error("refused");
        for (const args of list) await db.updateTable("settings").set({ value: args.value }).where("name", "=", args.name).execute();
        return list.map(() => undefined);
      },
    };
    const queue = (name: string, value: string) => writes.runCombinable(settingWrite, { name, value }, { lockKey: name }).then(() => "ok", () => "refused");
    expect(await Promise.all([queue("k-2", "b"), queue("k-1", "a")])).toEqual(["ok", "ok"]);
    // One statement for the group, in lock-key order, outside any transaction.
    expect(statements).toEqual([["many k-1 in a transaction: false", "many k-2 in a transaction: false"]]);
    statements.length = 0;
    expect(await Promise.all([queue("k-3", "c"), queue("k-1", "bad")])).toEqual(["ok", "refused"]);
    // The statement failed for one write: each ran again on its own, and only the bad one failed.
    expect(statements).toEqual([["many k-1 in a transaction: false", "many k-3 in a transaction: false"], ["one k-3 in a transaction: true"]]);
    const rows = await store.db.selectFrom("settings").select(["name", "value"]).where("name", "like", "k-%").orderBy("name").execute();
    expect(rows).toEqual([{ name: "k-1", value: "a" }, { name: "k-2", value: "b" }, { name: "k-3", value: "c" }]);
    statements.length = 0;
    // A group mixing combinable writes with another write: the combinable ones are still their
    // one statement, except one whose lock key the other write has, which keeps its place in the
    // group's transaction after that write.
    const plain = writes.run(async (trx) => {
      statements.push(["plain k-2 in a transaction: true"]);
      await trx.updateTable("settings").set({ value: "plain" }).where("name", "=", "k-2").execute();
    }, { lockKey: "k-2" });
    expect(await Promise.all([queue("k-1", "d"), plain, queue("k-2", "e"), queue("k-3", "f")])).toEqual(["ok", undefined, "ok", "ok"]);
    expect(statements).toEqual([["many k-1 in a transaction: false", "many k-3 in a transaction: false"], ["plain k-2 in a transaction: true"], ["one k-2 in a transaction: true"]]);
  });

  it("sends a group's savepoints with its writes' statements, and a write that fails leaves its neighbours' writes", async () => {
    const { store, writes, set } = await batcherOnSettings("p");
    const before = postgresQueriesSent();
    const outcomes = await Promise.allSettled([
      writes.run(set("p-1")),
      writes.run((trx) => trx.insertInto("settings").values({ name: "p-2", value: "duplicate" }).execute()),
      writes.run(set("p-3")),
    ]);
    expect(outcomes.map((outcome) => outcome.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    // The three statements, the failed one's ROLLBACK TO, COMMIT: no round trip of their own for
    // BEGIN, the savepoints and releases (12 when each was one).
    expect(postgresQueriesSent() - before).toBe(5);
    const rows = await store.db.selectFrom("settings").select(["name", "value"]).where("name", "like", "p-%").orderBy("name").execute();
    expect(rows).toEqual([{ name: "p-1", value: "set" }, { name: "p-2", value: "" }, { name: "p-3", value: "set" }]);
  });

  it("sends the steps a write runs together in one round trip, each answered with its own rows", async () => {
    const { store, writes, set } = await batcherOnSettings("t");
    const before = { statements: postgresQueriesSent(), writes: postgresWritesSent() };
    const read = (name: string) => (trx: Transaction<Database>) => trx.selectFrom("settings").select("value").where("name", "=", name).executeTakeFirstOrThrow();
    const answers = await writes.run((trx) => together(set("t-1")(trx), read("t-1")(trx), read("t-2")(trx)));
    // A step sees what the steps before it wrote: they run in the order they were made.
    expect(answers.slice(1)).toEqual([{ value: "set" }, { value: "" }]);
    // BEGIN, the savepoint and the three steps in one write; the release and COMMIT in the next
    // (four when each step waited for the one before it).
    expect({ statements: postgresQueriesSent() - before.statements, writes: postgresWritesSent() - before.writes }).toEqual({ statements: 4, writes: 2 });
    expect(await store.db.selectFrom("settings").select("value").where("name", "=", "t-1").executeTakeFirstOrThrow()).toEqual({ value: "set" });
  });

  it("fails a write whose steps went out together with the error of the step that failed, not that of a later statement PostgreSQL refused after it", async () => {
    const { store, writes, set } = await batcherOnSettings("f");
    const read = (trx: Transaction<Database>) => trx.selectFrom("settings").select("value").where("name", "=", "f-1").executeTakeFirstOrThrow();
    const failed = writes.run((trx) =>
      together(
        // Its UPDATE goes out once its read is answered: after the INSERT below, which fails the transaction.
        read(trx).then(() => set("f-1")(trx)),
        trx.insertInto("settings").values({ name: "f-2", value: "duplicate" }).execute(),
      ),
    );
    // 23505 (unique violation), not 25P02 (the transaction is aborted) of the UPDATE sent after it.
    await expect(failed).rejects.toMatchObject({ code: "23505" });
    const rows = await store.db.selectFrom("settings").select(["name", "value"]).where("name", "like", "f-%").orderBy("name").execute();
    expect(rows).toEqual([{ name: "f-1", value: "" }, { name: "f-2", value: "" }, { name: "f-3", value: "" }]);
  });

  it("fails only the write that caught its own statement's failure, whose release went out with a neighbour's statement", async () => {
    const { store, writes, set } = await batcherOnSettings("s");
    const outcomes = await Promise.allSettled([
      writes.run(set("s-1")),
      writes.run(async (trx) => {
        await set("s-2")(trx);
        // PostgreSQL has failed the transaction; the write goes on as if nothing happened.
        await trx.insertInto("settings").values({ name: "s-2", value: "duplicate" }).execute().catch(() => undefined);
      }),
      writes.run(set("s-3")),
    ]);
    expect(outcomes.map((outcome) => outcome.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    const rows = await store.db.selectFrom("settings").select(["name", "value"]).where("name", "like", "s-%").orderBy("name").execute();
    expect(rows).toEqual([{ name: "s-1", value: "set" }, { name: "s-2", value: "" }, { name: "s-3", value: "set" }]);
  });

  it("holds back a write whose lock key a group being written holds, while a write of another key runs beside that group", async () => {
    const { writes } = await batcherOnSettings("h");
    const ran: string[] = [];
    let firstStarted!: () => void;
    const started = new Promise<void>((resolve) => (firstStarted = resolve));
    let releaseFirst!: () => void;
    const held = new Promise<void>((resolve) => (releaseFirst = resolve));
    const first = writes.run(async () => {
      ran.push("badge-1 first");
      firstStarted();
      await held;
    }, { lockKey: "device:badge-1" });
    await started;
    const second = writes.run(async () => void ran.push("badge-1 second"), { lockKey: "device:badge-1" });
    await writes.run(async () => void ran.push("badge-2"), { lockKey: "device:badge-2" });
    // badge-2's group ran and committed while badge-1's first group is still open; badge-1's second write waited.
    expect(ran).toEqual(["badge-1 first", "badge-2"]);
    releaseFirst();
    await Promise.all([first, second]);
    expect(ran).toEqual(["badge-1 first", "badge-2", "badge-1 second"]);
  });

  it("runs again a write that PostgreSQL ended to break a deadlock between their groups, and every write commits once", async () => {
    const database = await createPostgresDatabase();
    onTestFinished(() => database.drop());
    const stores = await Promise.all(["a", "b"].map((name) => openStore({ dataDir: dirs(name), databaseUrl: database.url })));
    onTestFinished(async () => void (await Promise.all(stores.map((store) => store.close()))));
    const [a, b] = stores.map((store) => new WriteBatcher(store.db, store.logSynced));
    await stores[0]!.db.insertInto("settings").values([{ name: "row-1", value: "" }, { name: "row-2", value: "" }]).execute();
    const append = (trx: Transaction<Database>, name: string, mark: string) =>
      trx.updateTable("settings").set((eb) => ({ value: eb(eb.ref("value"), "||", mark) })).where("name", "=", name).execute();
    // Each group's first write takes one row and waits until the other group's first has taken
    // the other row; each second write then waits for the row the other group holds.
    let taken = 0;
    let bothTaken!: () => void;
    const barrier = new Promise<void>((resolve) => (bothTaken = resolve));
    const takeFirst = (name: string, mark: string) => async (trx: Transaction<Database>) => {
      await append(trx, name, mark);
      if (++taken === 2) bothTaken();
      await barrier;
    };
    const runs = { a2: 0, b2: 0 };
    const writes = [
      a!.run(takeFirst("row-1", "a1")),
      a!.run((trx) => (runs.a2++, append(trx, "row-2", "a2"))),
      b!.run(takeFirst("row-2", "b1")),
      b!.run((trx) => (runs.b2++, append(trx, "row-1", "b2"))),
    ];
    expect((await Promise.allSettled(writes)).map((outcome) => outcome.status)).toEqual(["fulfilled", "fulfilled", "fulfilled", "fulfilled"]);
    // PostgreSQL ended exactly one of the two second writes; that one ran twice.
    expect(runs.a2 + runs.b2).toBe(3);
    const rows = await stores[0]!.db.selectFrom("settings").select(["name", "value"]).where("name", "like", "row-%").orderBy("name").execute();
    const marks = rows.map((row) => row.value.match(/[ab][12]/g)!.sort());
    expect(marks).toEqual([["a1", "b2"], ["a2", "b1"]]);
  });
});

describe("API creates arriving together", () => {
  it("are one read and one write for the group, each create answered as it would be alone, and a create whose student another create took answers record_exists", async () => {
    const store = await storeOnNewDatabase("creates");
    await importSchool(store.db, smallSchool(), { mode: "test" });
    const apiKey = await createApiKey(store.db, { mode: "test", scopes: ["attendance:write"] });
    const [math] = await store.db.selectFrom("sessions").select("id").where("course_code", "=", "MATH").orderBy("starts_at").execute();
    const gate = new IdempotencyGate(new WriteBatcher(store.db, store.logSynced));
    const principal: Principal = { keyId: apiKey.id, livemode: 0, scopes: new Set(["attendance:write"]), user: { id: "usr_test", name: "Test" } };
    const owner = { livemode: 0 as const, apiKeyId: apiKey.id };
    const create = async (key: string, externalId: string) => {
      const result = await gate.runGrouped(owner, key, `fingerprint ${key}`, createRecords, { principal, input: { session_id: math!.id, external_id: externalId, status: "present" } });
      return result as typeof result & { body: any };
    };
    const answer = (result: { status: number; body: any }) => ({ status: result.status, code: result.body.error?.code, student: result.body.student?.external_id });

    // Queued in one tick: one group for the reservations, one for the creates.
    const before = postgresQueriesSent();
    const first = await Promise.all([create("k1", "S1"), create("k2", "S2"), create("k4", "S9"), create("k5", "S6")]);
    expect(first.map(answer)).toEqual([
      { status: 201, code: undefined, student: "S1" },
      { status: 201, code: undefined, student: "S2" },
      { status: 404, code: "resource_missing", student: undefined },
      { status: 400, code: "student_not_enrolled", student: undefined },
    ]);
    // The reservations' INSERT, the creates' read, and the statement writing records, events and answers.
    expect(postgresQueriesSent() - before).toBe(3);

    // S1 has a record already; S3 is asked for twice in one group: the first key (in key order) gets it.
    const second = await Promise.all([create("k3", "S1"), create("k6", "S3"), create("k7", "S3")]);
    expect(second.map(answer)).toEqual([
      { status: 409, code: "record_exists", student: undefined },
      { status: 201, code: undefined, student: "S3" },
      { status: 409, code: "record_exists", student: undefined },
    ]);
    expect(second[0]!.body.error.message).toContain(first[0]!.body.id);
    expect(second[2]!.body.error.message).toContain(second[1]!.body.id);

    const records = await store.db.selectFrom("records").select("id").orderBy("id").execute();
    expect(records.map((r) => r.id)).toEqual([first[0]!.body.id, first[1]!.body.id, second[1]!.body.id].sort());
    const events = await store.db.selectFrom("events").select("payload").execute();
    expect(events.map((e) => JSON.parse(e.payload).data.object.id).sort()).toEqual(records.map((r) => r.id));
    // Every key's answer was stored with what it reports: a retry replays it.
    const retries = await Promise.all([create("k1", "S1"), create("k5", "S6"), create("k7", "S3")]);
    expect(retries.map((r) => ({ status: r.status, body: r.body, replayed: r.replayed }))).toEqual(
      [first[0]!, first[3]!, second[2]!].map((r) => ({ status: r.status, body: r.body, replayed: true })),
    );
  });
});

describe("a grouped write whose prefetch fails", () => {
  it("runs its many all the same, reading for itself: the failed prefetch is not left to run after the many that waits for it", async () => {
    const store = await storeOnNewDatabase("prefetch");
    const gate = new IdempotencyGate(new WriteBatcher(store.db, store.logSynced));
    let prefetches = 0;
    const seen = new Map<string, unknown>();
    const echo = groupedWrite<string>({
      operation: (input) => async () => ({ status: 200, body: { input, alone: true } }),
      // as a connection lost or a statement timed out: the first group's read fails
      prefetch: {
        one: async (_db, input) => `read ${input}`,
        many: async (_db, inputs) => {
          if (prefetches++ === 0) throw new Error("Connection terminated unexpectedly");
          return inputs.map((input) => `read ${input}`);
        },
      },
      async many(db, requests) {
        for (const request of requests) seen.set(request.input, await request.prefetched);
        return Promise.all(
          requests.map(async ({ owner, key, input }) => {
            const response = { status: 200, body: { input, alone: false } };
            await completeIdempotencyKey(db, owner, key, { ...response, withheld: [] });
            return response;
          }),
        );
      },
    });
    const owner = { livemode: 0 as const, apiKeyId: "key_prefetch" };
    const results = await Promise.all(["a", "b"].map((input) => gate.runGrouped(owner, `k-${input}`, `fingerprint ${input}`, echo, input)));
    expect(results.map((result) => result.body)).toEqual([
      { input: "a", alone: false },
      { input: "b", alone: false },
    ]);
    // the failed read (the first, whose group has "a" whether or not "b" joined it) answers nothing: many reads for itself
    expect(seen.has("a")).toBe(true);
    expect(seen.get("a")).toBeUndefined();
  });
});
