// PostgreSQL failing under a running server (postgres project only, vitest.config.ts): the
// database going away and coming back, its backends terminated, a statement too slow, the pool
// exhausted. Every request is answered (never a hang), with a 503 in the one error shape where
// the database did not answer (never a 500), nothing is half written, and the server serves
// again by itself once the database is back.
import net from "node:net";
import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { TEST_POSTGRES_URL } from "../../scripts/harness/postgres-admin.ts";
import { startHarness, type Harness } from "./harness.ts";

/** No answer within this long counts as a hang. */
const ANSWER_WITHIN_MS = 30_000;

let harnesses: Harness[] = [];
afterEach(async () => {
  await Promise.all(harnesses.map((h) => h.close()));
  harnesses = [];
});

/** A TCP proxy in front of PostgreSQL: `cut()` drops every connection and refuses new ones until `restore()`. */
async function startDatabaseProxy(target: { host: string; port: number }) {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(target.port, target.host);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on("close", () => sockets.delete(socket));
      socket.on("error", () => {});
    }
    client.pipe(upstream).pipe(client);
  });
  const listen = (port: number) => new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  await listen(0);
  const { port } = server.address() as net.AddressInfo;
  return {
    port,
    cut() {
      server.close();
      for (const socket of sockets) socket.destroy();
    },
    restore: () => listen(port),
    close() {
      server.close();
      for (const socket of sockets) socket.destroy();
    },
  };
}

type Answer = { status: number; body: any };

/** Sends with a deadline: a request that hangs fails the test instead of stalling it. */
async function send(h: Harness, method: string, urlPath: string, options: { body?: unknown; idempotencyKey?: string } = {}): Promise<Answer> {
  const response = await fetch(`${h.url}${urlPath}`, {
    method,
    headers: {
      authorization: `Bearer ${h.keys.write}`,
      "content-type": "application/json",
      ...(options.idempotencyKey ? { "idempotency-key": options.idempotencyKey } : {}),
    },
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    signal: AbortSignal.timeout(ANSWER_WITHIN_MS),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : undefined };
}

const UNAVAILABLE = { error: { type: "api_error", code: "database_unavailable", message: expect.stringContaining("Retry"), param: null } };

/**
 * Writers correct their own record back and forth while `fault` runs; returns every answer.
 * A 503 may or may not have committed (the connection can break after the commit), so a writer
 * reads its record again before the next correction.
 */
async function correctWhile(h: Harness, fault: () => Promise<void>): Promise<Answer[]> {
  const records: string[] = [];
  for (const student of ["S1", "S2", "S3", "S4"]) {
    const created = await send(h, "POST", "/v1/attendance", { body: { session_id: h.sessions.math1, external_id: student, status: "present" }, idempotencyKey: `create-${student}` });
    expect(created.status).toBe(201);
    records.push(created.body.id);
  }
  const answers: Answer[] = [];
  let stop = false;
  let counter = 0;
  const writers = records.map(async (id) => {
    let status: string | undefined = "present";
    while (!stop) {
      if (status === undefined) {
        const read = await send(h, "GET", `/v1/attendance/${id}`);
        answers.push(read);
        if (read.status === 200) status = read.body.status;
        else await new Promise((resolve) => setTimeout(resolve, 50));
        continue;
      }
      const next = status === "present" ? "late" : "present";
      const res = await send(h, "PATCH", `/v1/attendance/${id}`, { body: { status: next, reason: "fault test" }, idempotencyKey: `patch-${++counter}` });
      answers.push(res);
      status = res.status === 200 ? next : undefined;
      if (res.status !== 200) await new Promise((resolve) => setTimeout(resolve, 50));
    }
  });
  await new Promise((resolve) => setTimeout(resolve, 300));
  try {
    await fault();
  } finally {
    stop = true;
    await Promise.all(writers);
  }
  return answers;
}

/** Each record's history is whole: sequence 1..n without gaps, a corrected record's status the last entry's, one event per write. */
async function expectWholeHistories(h: Harness) {
  const db = h.server.store.db;
  const records = await db.selectFrom("records").select(["id", "status"]).execute();
  for (const record of records) {
    const history = await db.selectFrom("record_history").select(["seq", "to_status"]).where("record_id", "=", record.id).orderBy("seq").execute();
    expect(history.map((entry) => entry.seq)).toEqual(history.map((_, i) => i + 1));
    if (history.length > 0) expect(history.at(-1)!.to_status).toBe(record.status);
  }
  expect(await h.count("events")).toBe((await h.count("records")) + (await h.count("record_history")));
}

/** Requests succeed again, without a restart of the server. */
async function expectRecovered(h: Harness) {
  await expect
    .poll(async () => (await send(h, "GET", "/v1/attendance")).status, { timeout: 20_000, interval: 200 })
    .toBe(200);
  const created = await send(h, "POST", "/v1/attendance", { body: { session_id: h.sessions.math2, external_id: "S5", status: "late" }, idempotencyKey: `after-${Date.now()}` });
  expect(created.status).toBe(201);
}

function expectOnlyAnswersOrUnavailable(answers: Answer[]) {
  const statuses = new Set(answers.map((a) => a.status));
  for (const status of statuses) expect([200, 503]).toContain(status);
  for (const answer of answers.filter((a) => a.status === 503)) expect(answer.body).toEqual(UNAVAILABLE);
  // The fault reached the requests: otherwise this test proves nothing.
  expect(statuses.has(503)).toBe(true);
  expect(statuses.has(200)).toBe(true);
}

/** A harness whose server reaches its database through a proxy the test can cut. */
async function startProxiedHarness() {
  const admin = new URL(TEST_POSTGRES_URL);
  const proxy = await startDatabaseProxy({ host: admin.hostname, port: Number(admin.port || 5432) });
  const h = await startHarness({
    postgres: { connectTimeoutMs: 1000 },
    routeDatabase: (databaseUrl) => {
      const url = new URL(databaseUrl);
      url.hostname = "127.0.0.1";
      url.port = String(proxy.port);
      return url.toString();
    },
  });
  harnesses.push(h);
  return { h, proxy };
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("the database failing while requests run", () => {
  it("answers 503 while the database is unreachable, and serves again by itself once it is back", async () => {
    const { h, proxy } = await startProxiedHarness();
    try {
      const answers = await correctWhile(h, async () => {
        proxy.cut();
        await pause(2000);
        await proxy.restore();
        await pause(1000);
      });
      expectOnlyAnswersOrUnavailable(answers);
      await expectRecovered(h);
      await expectWholeHistories(h);
    } finally {
      proxy.close();
    }
  });

  it("answers 503 when its connections are terminated mid-request, and serves again at once", async () => {
    const h = await startHarness();
    harnesses.push(h);
    const database = new URL(h.storeOptions.databaseUrl!).pathname.slice(1);
    const admin = new pg.Client({ connectionString: TEST_POSTGRES_URL, connectionTimeoutMillis: 10_000 });
    await admin.connect();
    const answers = await correctWhile(h, async () => {
      for (let i = 0; i < 5; i++) {
        await admin.query("select pg_terminate_backend(pid) from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()", [database]);
        await pause(300);
      }
    }).finally(() => admin.end());
    expectOnlyAnswersOrUnavailable(answers);
    await expectRecovered(h);
    await expectWholeHistories(h);
  });

  it("answers 503 for a statement past the statement timeout and for a request that finds the pool exhausted", async () => {
    const h = await startHarness({ postgres: { poolSize: 1, statementTimeoutMs: 1000, connectTimeoutMs: 300 } });
    harnesses.push(h);
    const locker = new pg.Client({ connectionString: h.storeOptions.databaseUrl });
    await locker.connect();
    try {
      await locker.query("begin");
      await locker.query("lock table records in access exclusive mode");
      // The first request takes the pool's one connection and waits on the lock until the
      // statement timeout; the second finds no connection free within the connect timeout.
      const [slow, starved] = await Promise.all([send(h, "GET", "/v1/attendance"), pause(100).then(() => send(h, "GET", "/v1/attendance"))]);
      expect(slow).toEqual({ status: 503, body: UNAVAILABLE });
      expect(starved).toEqual({ status: 503, body: UNAVAILABLE });
      await locker.query("rollback");
    } finally {
      await locker.end();
    }
    await expectRecovered(h);
  });
});
