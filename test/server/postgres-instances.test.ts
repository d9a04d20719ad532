// Three real `badgebench serve` processes on one PostgreSQL database, driven at once (postgres
// project only, vitest.config.ts): what SQLite's single writer guaranteed must hold across
// processes. One Idempotency-Key gives one result; one badge sync marks each tap once; concurrent
// session moves and corrections leave legal histories; each webhook event goes out once; a
// release published once is offered by every instance; a badge or key revoked anywhere is refused
// by every instance; a staged rollout created or moved through one instance is followed by every
// instance's checks. The instances check the change version row only every 10 minutes here, so
// what empties their caches in these tests is PostgreSQL's notification alone (the version row's
// bound is tested in change-feed.test.ts, auth.test.ts and rollouts-api.test.ts).
import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { buildAppImage, parseResponse } from "../../firmware/index.ts";
import { WIFI_PASSWORD_ENV } from "../../server/releases/publishing.ts";
import { createApiKey } from "../../server/services/api-keys.ts";
import { createDevice } from "../../server/services/devices.ts";
import { rolloutPlace } from "../../server/services/rollout-rules.ts";
import { importSchool } from "../../server/services/school-import.ts";
import { openStore, type Store } from "../../server/store/database.ts";
import { baseEnv, killLeftoverServers, run, serve, tempDirs, type Server } from "./cli-process.ts";
import { createPostgresDatabase, type TestDatabase } from "./test-database.ts";
import { startReceiver, type Receiver } from "./webhook-receiver.ts";

const INSTANCES = 3;
const MINUTE = 60_000;
const ENV = {
  BADGEBENCH_WEBHOOK_POLL_MS: "100",
  BADGEBENCH_SQLITE_SYNC: "normal",
  BADGEBENCH_WEBHOOK_LOCAL_TEST_TARGETS: "1",
  DATABASE_CHANGE_CHECK_MS: String(10 * MINUTE),
};
/** How long a test waits for a notification to reach every instance before it fails. */
const NOTIFICATION_WAIT_MS = 15_000;
const dirs = tempDirs("instances");

let database: TestDatabase;
let store: Store;
let servers: Server[];
let receiver: Receiver;
let key: string;
let badge: { id: string; token: string };
const cards = Array.from({ length: 40 }, (_, i) => `04CAFE${String(i).padStart(4, "0")}`);
const now = Date.now();
const mathStartsAt = new Date(now - 30 * MINUTE);
let mathSession: string;
let scheduledSessions: string[];

beforeAll(async () => {
  database = await createPostgresDatabase();
  store = await openStore({ dataDir: dirs("admin"), databaseUrl: database.url });
  const students = cards.map((card_uid, i) => ({ external_id: `S${i + 1}`, name: `Student ${i + 1}`, card_uid }));
  const later = (hours: number) => new Date(now + hours * 60 * MINUTE).toISOString();
  await importSchool(
    store.db,
    {
      rooms: [{ code: "R1", name: "Room 1" }],
      students,
      courses: [{ code: "MATH", name: "Mathematics" }],
      enrollments: [{ course_code: "MATH", external_ids: students.map((s) => s.external_id) }],
      sessions: [
        { course_code: "MATH", room: "R1", starts_at: mathStartsAt.toISOString(), ends_at: new Date(now + 30 * MINUTE).toISOString(), status: "open" },
        ...Array.from({ length: 8 }, (_, i) => ({ course_code: "MATH", room: "R1", starts_at: later(2 + i), ends_at: later(3 + i) })),
      ],
    },
    { mode: "test" },
  );
  const sessions = await store.db.selectFrom("sessions").select(["id", "status"]).orderBy("starts_at").execute();
  mathSession = sessions[0]!.id;
  scheduledSessions = sessions.slice(1).map((s) => s.id);
  key = (await createApiKey(store.db, { mode: "test", scopes: ["attendance:write", "sessions:write", "webhooks:write"] })).secret;
  badge = await createDevice(store.db, { mode: "test", room: "R1", model: "badge-v2" });
  receiver = await startReceiver();
  servers = await Promise.all(Array.from({ length: INSTANCES }, (_, i) => serve(["--data", dirs(`instance-${i}`), "--database", database.url], { env: ENV })));
});

afterAll(async () => {
  await killLeftoverServers();
  await receiver?.close();
  await store?.close();
  await database?.drop();
});

let counter = 0;
async function call(server: Server, method: string, path: string, options: { body?: unknown; idempotencyKey?: string } = {}) {
  const response = await fetch(`${server.url}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${key}`,
      "content-type": "application/json",
      ...(method === "GET" ? {} : { "idempotency-key": options.idempotencyKey ?? `instances-${++counter}` }),
    },
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    signal: AbortSignal.timeout(30_000),
  });
  return { status: response.status, replayed: response.headers.get("idempotent-replayed") === "true", body: (await response.json()) as any };
}

const onEvery = <T>(run: (server: Server) => Promise<T>) => Promise.all(servers.map(run));

describe("one Idempotency-Key sent to every instance at once", () => {
  it("creates one record: the others replay it or are told it is in flight", async () => {
    for (let round = 0; round < 6; round++) {
      const body = { session_id: mathSession, external_id: `S${round + 1}`, status: "present" };
      const answers = await onEvery((server) => call(server, "POST", "/v1/attendance", { body, idempotencyKey: `create-once-${round}` }));
      for (const answer of answers) {
        if (answer.status === 409) expect(answer.body.error.code).toBe("idempotency_key_in_use");
        else expect(answer.status).toBe(201);
      }
      const created = answers.filter((a) => a.status === 201);
      expect(created.filter((a) => !a.replayed)).toHaveLength(1);
      expect(new Set(created.map((a) => a.body.id)).size).toBe(1);
      const records = await store.db
        .selectFrom("records")
        .innerJoin("students", "students.id", "records.student_id")
        .select("records.id")
        .where("records.session_id", "=", mathSession)
        .where("students.external_id", "=", body.external_id)
        .execute();
      expect(records).toEqual([{ id: created[0]!.body.id }]);
      // Once the first is done, a retry anywhere replays it.
      const retry = await call(servers[round % INSTANCES]!, "POST", "/v1/attendance", { body, idempotencyKey: `create-once-${round}` });
      expect(retry).toMatchObject({ status: 201, replayed: true, body: { id: created[0]!.body.id } });
    }
  });

  it("applies a correction once", async () => {
    const record = await call(servers[0]!, "POST", "/v1/attendance", { body: { session_id: mathSession, external_id: "S20", status: "present" } });
    for (let round = 0; round < 6; round++) {
      const status = round % 2 === 0 ? "late" : "present";
      const answers = await onEvery((server) => call(server, "PATCH", `/v1/attendance/${record.body.id}`, { body: { status, reason: `round ${round}` }, idempotencyKey: `correct-once-${round}` }));
      for (const answer of answers) {
        if (answer.status === 409) expect(answer.body.error.code).toBe("idempotency_key_in_use");
        else expect(answer).toMatchObject({ status: 200, body: { status } });
      }
      expect(answers.filter((a) => a.status === 200 && !a.replayed)).toHaveLength(1);
    }
    const history = await store.db.selectFrom("record_history").select("seq").where("record_id", "=", record.body.id).execute();
    expect(history).toHaveLength(6);
  });
});

describe("the same badge sync sent to every instance at once", () => {
  it("marks each tap once and answers alike", async () => {
    const unix = (date: Date) => Math.floor(date.getTime() / 1000);
    for (let round = 0; round < 4; round++) {
      const tappers = cards.slice(21 + round * 4, 25 + round * 4);
      const body = ["v=1", "sv=1.4.0", "fw=Badge", "bat=3.91", "chg=0", ...tappers.map((card, i) => `tap=${round * 10 + i + 1}|${card}|${unix(new Date(mathStartsAt.getTime() + (round * 4 + i + 1) * 1000))}`)].join("\n") + "\n";
      const answers = await onEvery(async (server) => {
        const response = await fetch(`${server.url}/api/badge/sync`, {
          method: "POST",
          headers: { authorization: `Bearer ${badge.token}`, "content-type": "text/plain" },
          body,
          signal: AbortSignal.timeout(30_000),
        });
        return { status: response.status, accepted: (await response.text()).split("\n").filter((line) => line.startsWith("A ")).sort() };
      });
      expect(answers.map((a) => a.status)).toEqual(servers.map(() => 200));
      expect(new Set(answers.map((a) => JSON.stringify(a.accepted))).size).toBe(1);
      expect(answers[0]!.accepted).toHaveLength(tappers.length);
      const students = await store.db.selectFrom("students").select("id").where("card_uid", "in", tappers).execute();
      const records = await store.db.selectFrom("records").select("student_id").where("session_id", "=", mathSession).where("student_id", "in", students.map((s) => s.id)).execute();
      expect(records).toHaveLength(tappers.length);
      const taps = await store.db.selectFrom("device_taps").select("id").where("card_uid", "in", tappers).execute();
      expect(taps).toHaveLength(tappers.length);
    }
  });
});

describe("the same badges checking in on every instance at once", () => {
  it("answers every check and keeps each badge's last report, though the instances take the rows in different orders", async () => {
    // Each instance's write batcher runs the checks it has read together in one transaction, so
    // here they update the same devices rows in opposite orders: PostgreSQL ends some of those
    // transactions' statements with `deadlock detected`, which the batcher must run again.
    const fleet = await Promise.all(Array.from({ length: 24 }, () => createDevice(store.db, { mode: "test", room: "R1", model: "badge-v2" })));
    const reader = (await createApiKey(store.db, { mode: "test", scopes: ["devices:read"] })).secret;
    const orderOf = (instance: number) => {
      const rotated = [...fleet.slice(instance * 8), ...fleet.slice(0, instance * 8)];
      return instance % 2 === 0 ? rotated : rotated.reverse();
    };
    for (let round = 0; round < 5; round++) {
      const battery = (3.5 + round / 10).toFixed(2);
      const statuses = await Promise.all(
        servers.flatMap((server, instance) =>
          orderOf(instance).map(async (device) => {
            const response = await fetch(`${server.url}/api/badge/ota/check`, {
              method: "POST",
              headers: { authorization: `Bearer ${device.token}`, "content-type": "text/plain" },
              body: `v=1\nsv=1.4.0\nbat=${battery}\n`,
              signal: AbortSignal.timeout(30_000),
            });
            const text = await response.text();
            return response.status === 200 ? 200 : `${response.status} ${text}`;
          }),
        ),
      );
      expect(statuses.filter((status) => status !== 200)).toEqual([]);
      // A check is answered before its record commits; a device read on an instance waits for
      // the records of the checks it answered, so after one read on each, every record is in.
      for (const server of servers) {
        const read = await fetch(`${server.url}/v1/devices?limit=1`, { headers: { authorization: `Bearer ${reader}` } });
        expect(read.status).toBe(200);
        await read.arrayBuffer();
      }
      const rows = await store.db.selectFrom("devices").select(["id", "battery_volts"]).where("id", "in", fleet.map((d) => d.id)).execute();
      expect(rows.map((row) => row.battery_volts)).toEqual(fleet.map(() => Number(battery)));
    }
  });
});

describe("a release published once, on the shared database", () => {
  it("is offered by every instance once the publish's notification arrives, byte for byte the same image", async () => {
    const check = (server: Server) =>
      fetch(`${server.url}/api/badge/ota/check`, {
        method: "POST",
        headers: { authorization: `Bearer ${badge.token}`, "content-type": "text/plain" },
        body: "v=1\nsv=1.4.0\nbat=4.1\n",
        signal: AbortSignal.timeout(30_000),
      }).then(async (response) => {
        const answer = parseResponse(await response.text());
        expect(answer.ok).toBe(true);
        return { status: response.status, lines: new Map(answer.ok ? answer.lines.map((line) => [line.letter, line.value]) : []) };
      });
    // Every instance has read the (empty) manifest before the publish: none may keep it.
    for (const { status, lines } of await onEvery(check)) {
      expect(status).toBe(200);
      expect(lines.has("U")).toBe(false);
    }
    const publisherDir = dirs("publisher");
    const imageFile = path.join(publisherDir, "1.5.0.bin");
    fs.writeFileSync(imageFile, buildAppImage({ version: "1.5.0", size: 64 * 1024 }));
    const published = await run(["publish", imageFile, "1.5.0", "--mode", "test", "--data", publisherDir, "--database", database.url, "--json"], {
      env: baseEnv({ [WIFI_PASSWORD_ENV]: "correct-horse-dev-wifi" }),
    });
    expect(published.code, published.stderr).toBe(0);
    // Each instance keeps the manifest it read until the notification empties its cache.
    const offers = await onEvery((server) =>
      vi.waitFor(
        async () => {
          const answer = await check(server);
          expect(answer.status).toBe(200);
          expect(answer.lines.get("U")).toBe("1.5.0");
          return answer;
        },
        { timeout: NOTIFICATION_WAIT_MS, interval: 50 },
      ),
    );
    const images = await onEvery(async (server) => {
      const response = await fetch(`${server.url}${offers[0]!.lines.get("P")}`, { headers: { authorization: `Bearer ${badge.token}` }, signal: AbortSignal.timeout(30_000) });
      return { status: response.status, bytes: Buffer.from(await response.arrayBuffer()) };
    });
    for (const image of images) {
      expect(image.status).toBe(200);
      expect(image.bytes.equals(fs.readFileSync(imageFile))).toBe(true);
    }
  });
});

describe("revocations reach every instance's cache", () => {
  const checkWith = (server: Server, token: string) =>
    fetch(`${server.url}/api/badge/ota/check`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "text/plain" },
      body: "v=1\nsv=1.4.0\nbat=4.1\n",
      signal: AbortSignal.timeout(30_000),
    }).then((response) => response.status);
  const listWith = (server: Server, secret: string) =>
    fetch(`${server.url}/v1/sessions`, { headers: { authorization: `Bearer ${secret}` }, signal: AbortSignal.timeout(30_000) }).then((response) => response.status);
  const refusedBy = (server: Server, status: () => Promise<number>) =>
    vi.waitFor(async () => expect(await status()).toBe(401), { timeout: NOTIFICATION_WAIT_MS, interval: 20 });

  it("a badge revoked through one instance is refused by the others once the notification arrives, and by that one from the next request", async () => {
    const admin = (await createApiKey(store.db, { mode: "test", scopes: ["devices:write"] })).secret;
    const revoked = await createDevice(store.db, { mode: "test", room: "R1", model: "badge-v2" });
    // Every instance has the badge's principal in its cache: twice each.
    for (let i = 0; i < 2; i++) for (const status of await onEvery((server) => checkWith(server, revoked.token))) expect(status).toBe(200);
    const response = await fetch(`${servers[0]!.url}/v1/devices/${revoked.id}/revoke`, {
      method: "POST",
      headers: { authorization: `Bearer ${admin}`, "idempotency-key": `revoke-${revoked.id}` },
      signal: AbortSignal.timeout(30_000),
    });
    expect(response.status).toBe(200);
    expect(await checkWith(servers[0]!, revoked.token)).toBe(401);
    await Promise.all(servers.slice(1).map((server) => refusedBy(server, () => checkWith(server, revoked.token))));
    // Another badge's cached principal is read again, not lost.
    for (const status of await onEvery((server) => checkWith(server, badge.token))) expect(status).toBe(200);
  });

  it("an API key revoked by `badgebench keys revoke` in another process is refused by every instance once the notification arrives", async () => {
    const revoked = await createApiKey(store.db, { mode: "test", scopes: ["attendance:read"] });
    for (let i = 0; i < 2; i++) for (const status of await onEvery((server) => listWith(server, revoked.secret))) expect(status).toBe(200);
    const result = await run(["keys", "revoke", revoked.id, "--data", dirs("revoker"), "--database", database.url]);
    expect(result.code, result.stderr).toBe(0);
    await Promise.all(servers.map((server) => refusedBy(server, () => listWith(server, revoked.secret))));
    for (const status of await onEvery((server) => listWith(server, key))) expect(status).toBe(200);
  });
});

describe("concurrent moves on different instances", () => {
  it("a session opened on one instance and closed on another at once ends in a legal state", async () => {
    for (const [i, session] of scheduledSessions.entries()) {
      const opener = servers[i % INSTANCES]!;
      const closer = servers[(i + 1) % INSTANCES]!;
      const [open, close] = await Promise.all([call(opener, "POST", `/v1/sessions/${session}/open`), call(closer, "POST", `/v1/sessions/${session}/close`)]);
      expect(open.status).toBe(200);
      const final = await store.db.selectFrom("sessions").select("status").where("id", "=", session).executeTakeFirstOrThrow();
      if (close.status === 200) {
        expect(final.status).toBe("closed");
      } else {
        // scheduled -> closed is not a move: the close ran before the open committed.
        expect(close).toMatchObject({ status: 409, body: { error: { code: "session_transition_invalid" } } });
        expect(final.status).toBe("open");
      }
    }
  });

  it("corrections of one record on every instance at once leave a history where each entry starts where the last ended", async () => {
    const record = await call(servers[0]!, "POST", "/v1/attendance", { body: { session_id: mathSession, external_id: "S21", status: "present" } });
    for (let round = 0; round < 5; round++) {
      const answers = await onEvery((server) => call(server, "PATCH", `/v1/attendance/${record.body.id}`, { body: { status: "late", reason: `round ${round} to late` } }));
      // One moves it; the others find it late already.
      expect(answers.filter((a) => a.status === 200)).toHaveLength(1);
      for (const refused of answers.filter((a) => a.status !== 200)) expect(refused).toMatchObject({ status: 400, body: { error: { code: "status_unchanged" } } });
      await call(servers[round % INSTANCES]!, "PATCH", `/v1/attendance/${record.body.id}`, { body: { status: "present", reason: "back" } });
    }
    const history = await store.db.selectFrom("record_history").select(["seq", "from_status", "to_status"]).where("record_id", "=", record.body.id).orderBy("seq").execute();
    expect(history).toHaveLength(10);
    history.forEach((entry, i) => {
      expect(entry.seq).toBe(i + 1);
      expect(entry.from_status).toBe(i === 0 ? "present" : history[i - 1]!.to_status);
    });
  });
});

describe("webhooks with every instance delivering", () => {
  it("delivers each event exactly once", async () => {
    const endpoint = await call(servers[0]!, "POST", "/v1/webhook_endpoints", { body: { url: receiver.url, enabled_events: ["attendance.recorded", "attendance.updated"] } });
    expect(endpoint.status).toBe(201);
    // Writes spread over the instances, so every instance's worker wakes and claims at once.
    const records = await Promise.all(
      cards.slice(6, 18).map((_, i) => call(servers[i % INSTANCES]!, "POST", "/v1/attendance", { body: { session_id: mathSession, external_id: `S${i + 7}`, status: "present" } })),
    );
    expect(records.map((r) => r.status)).toEqual(records.map(() => 201));
    for (let round = 0; round < 4; round++) {
      const status = round % 2 === 0 ? "late" : "present";
      const corrections = await Promise.all(
        records.map((record, i) => call(servers[(i + round) % INSTANCES]!, "PATCH", `/v1/attendance/${record.body.id}`, { body: { status, reason: `round ${round}` } })),
      );
      expect(corrections.map((c) => c.status)).toEqual(corrections.map(() => 200));
    }
    const { created_at: since } = await store.db.selectFrom("webhook_endpoints").select("created_at").where("id", "=", endpoint.body.id).executeTakeFirstOrThrow();
    const committed = new Set((await store.db.selectFrom("events").select("id").where("created_at", ">=", since).execute()).map((e) => e.id));
    expect(committed.size).toBe(records.length * 5);
    await receiver.waitFor((deliveries) => [...committed].every((id) => deliveries.some((d) => d.event.id === id)), 30_000);
    // Time for a duplicate to arrive, if any instance were to send one.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const delivered = receiver.deliveries.map((d) => d.event.id);
    expect(delivered.length).toBe(new Set(delivered).size);
    expect(new Set(delivered)).toEqual(committed);
  });
});

describe("an instance killed mid-delivery", () => {
  it("leaves its deliveries to another instance once their lease runs out", async () => {
    // A database of its own: only the instance to be killed runs when the events are claimed.
    const own = await createPostgresDatabase();
    const ownStore = await openStore({ dataDir: dirs("killed-admin"), databaseUrl: own.url });
    const hangingReceiver = await startReceiver();
    try {
      await importSchool(
        ownStore.db,
        {
          rooms: [{ code: "R1", name: "Room 1" }],
          students: [1, 2, 3].map((i) => ({ external_id: `S${i}`, name: `Student ${i}` })),
          courses: [{ code: "MATH", name: "Mathematics" }],
          enrollments: [{ course_code: "MATH", external_ids: ["S1", "S2", "S3"] }],
          sessions: [{ course_code: "MATH", room: "R1", starts_at: mathStartsAt.toISOString(), ends_at: new Date(now + 30 * MINUTE).toISOString(), status: "open" }],
        },
        { mode: "test" },
      );
      const ownKey = (await createApiKey(ownStore.db, { mode: "test", scopes: ["attendance:write", "webhooks:write"] })).secret;
      const session = (await ownStore.db.selectFrom("sessions").select("id").executeTakeFirstOrThrow()).id;
      // The first attempt of each event hangs (the instance is killed during it); later ones succeed.
      hangingReceiver.answer = (delivery) => (hangingReceiver.deliveries.filter((d) => d.event.id === delivery.event.id).length === 1 ? "hang" : { status: 200 });
      // The attempt outlasts the moment of the kill even on a loaded machine.
      const env = { ...ENV, BADGEBENCH_WEBHOOK_TIMEOUT_MS: "8000", BADGEBENCH_WEBHOOK_LEASE_MS: "10000" };
      const args = (name: string) => ["--data", dirs(name), "--database", own.url];
      const doomed = await serve(args("doomed"), { env });
      const post = (path: string, body: unknown) =>
        fetch(`${doomed.url}${path}`, {
          method: "POST",
          headers: { authorization: `Bearer ${ownKey}`, "content-type": "application/json", "idempotency-key": `kill-${++counter}` },
          body: JSON.stringify(body),
        });
      expect((await post("/v1/webhook_endpoints", { url: hangingReceiver.url, enabled_events: ["*"] })).status).toBe(201);
      for (const student of ["S1", "S2", "S3"]) {
        expect((await post("/v1/attendance", { session_id: session, external_id: student, status: "present" })).status).toBe(201);
      }
      await hangingReceiver.waitFor((deliveries) => new Set(deliveries.map((d) => d.event.id)).size === 3, 15_000);
      doomed.child.kill("SIGKILL");
      expect((await doomed.exited).signal).toBe("SIGKILL");
      const killedAt = Date.now();
      const survivor = await serve(args("survivor"), { env });
      // The survivor takes each delivery over when its lease ends and the second attempt succeeds.
      await hangingReceiver.waitFor((deliveries) => deliveries.length >= 6, 30_000);
      const retried = hangingReceiver.deliveries.slice(3);
      expect(new Set(retried.map((d) => d.event.id))).toEqual(new Set(hangingReceiver.deliveries.slice(0, 3).map((d) => d.event.id)));
      expect(Math.min(...retried.map((d) => d.at))).toBeGreaterThan(killedAt);
      const states = await ownStore.db.selectFrom("webhook_deliveries").select("state").execute();
      await expect.poll(async () => (await ownStore.db.selectFrom("webhook_deliveries").select("state").execute()).map((d) => d.state), { timeout: 120_000 }).toEqual(states.map(() => "succeeded"));
      survivor.child.kill("SIGTERM");
      await survivor.exited;
    } finally {
      await hangingReceiver.close();
      await ownStore.close();
      await own.drop();
    }
  });
});

describe("a staged rollout moved through one instance", () => {
  it("is followed by every instance's checks once the notification arrives: created, paused, resumed, advanced, aborted", async () => {
    const releasesKey = (await createApiKey(store.db, { mode: "test", scopes: ["releases:write"] })).secret;
    const canary = await createDevice(store.db, { mode: "test", room: "R1", model: "badge-v2" });
    // One badge inside the first stage (50 %) and one outside it.
    let inside: { id: string; token: string } | undefined;
    let outside: { id: string; token: string } | undefined;
    while (!inside || !outside) {
      const device = await createDevice(store.db, { mode: "test", room: "R1", model: "badge-v2" });
      if (rolloutPlace(device.id) < 50) inside ??= device;
      else outside ??= device;
    }
    const version = "3.1.0";
    const publisherDir = dirs("rollout-publisher");
    const imageFile = path.join(publisherDir, `${version}.bin`);
    fs.writeFileSync(imageFile, buildAppImage({ version, size: 64 * 1024 }));
    const published = await run(["publish", imageFile, version, "--canary", canary.id, "--mode", "test", "--data", publisherDir, "--database", database.url, "--json"], {
      env: baseEnv({ [WIFI_PASSWORD_ENV]: "correct-horse-dev-wifi" }),
    });
    expect(published.code, published.stderr).toBe(0);
    // The canary is offered it (once every instance has the publish) and reports it runs it.
    const offeredBy = async (server: Server, token: string) => {
      const response = await fetch(`${server.url}/api/badge/ota/check`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "text/plain" },
        body: "v=1\nsv=1.4.0\nbat=4.1\n",
        signal: AbortSignal.timeout(30_000),
      });
      const answer = parseResponse(await response.text());
      expect(response.status).toBe(200);
      return answer.ok && answer.lines.some((line) => line.letter === "U" && line.value === version);
    };
    await vi.waitFor(async () => expect(await offeredBy(servers[0]!, canary.token)).toBe(true), { timeout: NOTIFICATION_WAIT_MS, interval: 50 });
    const report = await fetch(`${servers[0]!.url}/api/badge/sync`, {
      method: "POST",
      headers: { authorization: `Bearer ${canary.token}`, "content-type": "text/plain" },
      body: `v=1\nsv=${version}\nbat=4.1\nchg=1\nota=ok|${version}\n`,
      signal: AbortSignal.timeout(30_000),
    });
    expect(report.status).toBe(200);
    const act = async (server: Server, path: string, body?: unknown) => {
      const response = await fetch(`${server.url}${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${releasesKey}`, "content-type": "application/json", "idempotency-key": `rollout-${++counter}` },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(30_000),
      });
      expect(response.status, await response.clone().text()).toBeLessThan(300);
      return (await response.json()) as { id: string; status: string };
    };
    /** Every instance offers the release to the badge inside the first stage and the one outside it as given, once the notification arrived. */
    const everyInstanceOffers = (expected: { inside: boolean; outside: boolean }) =>
      onEvery((server) =>
        vi.waitFor(
          async () => {
            expect({ inside: await offeredBy(server, inside!.token), outside: await offeredBy(server, outside!.token) }).toEqual(expected);
          },
          { timeout: NOTIFICATION_WAIT_MS, interval: 50 },
        ),
      );
    // Every instance has read, and keeps, the mode's absence of an open rollout: twice each.
    for (let i = 0; i < 2; i++) for (const offered of await onEvery((server) => offeredBy(server, inside!.token))) expect(offered).toBe(false);
    const rollout = await act(servers[0]!, "/v1/rollouts", { version, stages: [50, 100], min_stage_seconds: 3600 });
    await everyInstanceOffers({ inside: true, outside: false });
    await act(servers[1]!, `/v1/rollouts/${rollout.id}/pause`);
    await everyInstanceOffers({ inside: false, outside: false });
    await act(servers[2]!, `/v1/rollouts/${rollout.id}/resume`);
    await everyInstanceOffers({ inside: true, outside: false });
    await act(servers[0]!, `/v1/rollouts/${rollout.id}/advance`);
    await everyInstanceOffers({ inside: true, outside: true });
    await act(servers[1]!, `/v1/rollouts/${rollout.id}/abort`);
    await everyInstanceOffers({ inside: false, outside: false });
  }, 180_000);
});
