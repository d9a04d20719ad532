// Killed with SIGKILL at any moment, the server delivers every committed event after restart:
// the real `badgebench serve` process is killed three times while writes and deliveries are
// under way, and after the last restart the receiver must have seen every event in the
// database (duplicates allowed, loss not).
import { afterAll, afterEach, expect, it, onTestFinished } from "vitest";
import { createApiKey } from "../../server/services/api-keys.ts";
import { importSchool } from "../../server/services/school-import.ts";
import { openStore } from "../../server/store/database.ts";
import { killLeftoverServers, serve, tempDirs } from "./cli-process.ts";
import { smallSchool } from "./harness.ts";
import { createTestStore, type TestStore } from "./test-database.ts";
import { startReceiver } from "./webhook-receiver.ts";

afterEach(killLeftoverServers);
const dirs = tempDirs("webhook-kill");

// Compressed time: a lease of 800 ms means a delivery claimed by the killed process is due again 0.8 s later.
const ENV = {
  BADGEBENCH_WEBHOOK_LEASE_MS: "800",
  BADGEBENCH_WEBHOOK_TIMEOUT_MS: "500",
  BADGEBENCH_WEBHOOK_RETRY_SCHEDULE_MS: "50,100,200,400,800",
  BADGEBENCH_WEBHOOK_POLL_MS: "50",
  BADGEBENCH_WEBHOOK_LOCAL_TEST_TARGETS: "1",
  BADGEBENCH_SQLITE_SYNC: "normal",
};

const receiverPromise = startReceiver();
afterAll(async () => (await receiverPromise).close());

async function committedEventIds(testStore: TestStore): Promise<string[]> {
  const store = await openStore(testStore.options);
  try {
    return (await store.db.selectFrom("events").select("id").execute()).map((e) => e.id);
  } finally {
    await store.close();
  }
}

it("delivers every committed event after kill -9, three times over", async () => {
  const receiver = await receiverPromise;
  // Answers take 0-20 ms, so attempts are in flight when the kill comes.
  receiver.answer = () => new Promise((resolve) => setTimeout(() => resolve({ status: 200 }), Math.random() * 20));
  const testStore = await createTestStore(dirs("data"));
  onTestFinished(() => testStore.drop());
  const setup = await openStore(testStore.options);
  await importSchool(setup.db, smallSchool(), { mode: "test" });
  const key = (await createApiKey(setup.db, { mode: "test", scopes: ["attendance:write", "webhooks:write"] })).secret;
  const session = await setup.db.selectFrom("sessions").select("id").where("course_code", "=", "MATH").orderBy("starts_at").executeTakeFirstOrThrow();
  await setup.close();

  const call = (url: string, method: string, path: string, body?: unknown) =>
    fetch(`${url}${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "idempotency-key": `${method}-${path}-${Math.random()}` },
      body: body === undefined ? undefined : JSON.stringify(body),
    });

  let server = await serve(testStore.serveArgs, { env: ENV });
  const endpoint = await (await call(server.url, "POST", "/v1/webhook_endpoints", { url: receiver.url, enabled_events: ["*"] })).json();
  expect(endpoint.id).toMatch(/^whe_/);
  const records: string[] = [];
  for (const student of ["S1", "S2", "S3", "S4"]) {
    const res = await call(server.url, "POST", "/v1/attendance", { session_id: session.id, external_id: student, status: "present" });
    records.push(((await res.json()) as { id: string }).id);
  }

  let missingAtKills = 0;
  for (let round = 0; round < 3; round++) {
    const url = server.url;
    let stop = false;
    let corrected = 0;
    // Four writers, each correcting its own record back and forth until the kill.
    const writers = records.map(async (id) => {
      try {
        let status = ((await (await call(url, "GET", `/v1/attendance/${id}`)).json()) as { status: string }).status;
        while (!stop) {
          const next = status === "present" ? "late" : "present";
          const res = await call(url, "PATCH", `/v1/attendance/${id}`, { status: next, reason: `round ${round}` });
          if (res.status === 200) {
            status = next;
            corrected++;
          }
        }
      } catch {
        // the server was killed mid-request
      }
    });
    // The kill comes right after a write was answered (its event is then most likely still on
    // its way to the receiver), after a random number of writes: counted, not timed, so a slower
    // store (PostgreSQL) or a loaded machine gets as many writes in as a fast one.
    const killAfter = 8 + Math.floor(Math.random() * 8);
    while (corrected < killAfter) await new Promise((r) => setTimeout(r, 1));
    server.child.kill("SIGKILL");
    expect((await server.exited).signal).toBe("SIGKILL");
    stop = true;
    await Promise.all(writers);
    const received = new Set(receiver.deliveries.map((d) => d.event.id));
    missingAtKills += (await committedEventIds(testStore)).filter((id) => !received.has(id)).length;
    server = await serve(testStore.serveArgs, { env: ENV });
  }

  const committed = await committedEventIds(testStore);
  expect(committed.length).toBeGreaterThan(20);
  // The kills did catch events not yet delivered, so the restart had work to do.
  expect(missingAtKills).toBeGreaterThan(0);
  await receiver.waitFor((deliveries) => {
    const received = new Set(deliveries.map((d) => d.event.id));
    return committed.every((id) => received.has(id));
  }, 120_000);
  const attempts = (await (await call(server.url, "GET", `/v1/webhook_endpoints/${endpoint.id}/attempts?limit=1`)).json()) as { data: unknown[] };
  expect(attempts.data).toHaveLength(1);
});
