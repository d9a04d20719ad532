// The server on PostgreSQL (run in the postgres project only, vitest.config.ts): instances that
// start at once on one new database, and a configuration that cannot work ending the start with
// one clear line and exit 1, never a hang; two write batchers (as in two instances) whose groups
// deadlock, with the write PostgreSQL ended run again.
import net from "node:net";
import type { Transaction } from "kysely";
import { afterEach, describe, expect, it, onTestFinished } from "vitest";
import { createApiKey } from "../../server/services/api-keys.ts";
import { importSchool } from "../../server/services/school-import.ts";
import { openStore } from "../../server/store/database.ts";
import type { Database } from "../../server/store/schema.ts";
import { WriteBatcher } from "../../server/store/write-batcher.ts";
import { baseEnv, killLeftoverServers, run, serve, tempDirs } from "./cli-process.ts";
import { smallSchool } from "./harness.ts";
import { createPostgresDatabase } from "./test-database.ts";

const CLI_TIMEOUT = 60_000;
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
  }, CLI_TIMEOUT);
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
  }, CLI_TIMEOUT);

  it("refuses a URL that names no database", async () => {
    const result = await start("postgres://postgres@127.0.0.1:5432");
    expect(result.code).toBe(1);
    expect(oneLine(result.stderr)).toMatch(/names no database; add \/DATABASE$/);
  }, CLI_TIMEOUT);

  it("ends the start when nothing listens at the address, without showing the password", async () => {
    const port = await freePort();
    const result = await start(`postgres://badgebench:s3cret-password@127.0.0.1:${port}/school`);
    expect(result.code).toBe(1);
    const line = oneLine(result.stderr);
    expect(line).toBe(`badgebench: cannot connect to PostgreSQL at postgres://badgebench:***@127.0.0.1:${port}/school: connect ECONNREFUSED 127.0.0.1:${port}`);
    expect(result.stderr).not.toContain("s3cret-password");
  }, CLI_TIMEOUT);

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
  }, CLI_TIMEOUT);

  it("names a database that does not exist", async () => {
    const result = await start("postgres://postgres@127.0.0.1:5432/badgebench_no_such_database");
    expect(result.code).toBe(1);
    expect(oneLine(result.stderr)).toMatch(/cannot connect to PostgreSQL at .*: database "badgebench_no_such_database" does not exist$/);
  }, CLI_TIMEOUT);

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
  }, CLI_TIMEOUT);

  it("takes the URL from DATABASE_URL when the flag is absent", async () => {
    const result = await run(["serve", "--port", "0", "--data", dirs("data")], { env: baseEnv({ DATABASE_URL: "mysql://root@127.0.0.1/school" }), timeoutMs: 30_000 });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("the database URL must start with postgres://");
  }, CLI_TIMEOUT);
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

describe("two write batchers on one database, as in two instances", () => {
  it("runs a group's writes without a lock key first, in arrival order, then by lock key, one key's writes in arrival order", async () => {
    const database = await createPostgresDatabase();
    onTestFinished(() => database.drop());
    const store = await openStore({ dataDir: dirs("ordered"), databaseUrl: database.url });
    onTestFinished(() => store.close());
    const writes = new WriteBatcher(store.db, store.logSynced);
    const ran: string[] = [];
    const queue = (name: string, lockKey?: string) => writes.run(async () => void ran.push(name), { lockKey });
    await Promise.all([queue("c1", "device:c"), queue("plain1"), queue("a", "device:a"), queue("c2", "device:c"), queue("b", "device:b"), queue("plain2")]);
    expect(ran).toEqual(["plain1", "plain2", "a", "b", "c1", "c2"]);
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
  }, 60_000);
});
