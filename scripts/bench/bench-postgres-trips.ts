// Where a request's time goes on PostgreSQL (issue 27): the statements and the round trips (the
// writes of statements, those made together going out in one: database.ts's postgresQueriesSent
// and postgresWritesSent, counted at the driver) a check, a create and a 30-tap sync send, one
// request at a time (nothing to share: the worst case) and 20 in flight (4 for the syncs, one per
// badge: the write batcher's groups and the shared reads spread over the requests), with the
// server's CPU per request (this process's, measured around the requests, including the client's
// share). The syncs tap students no create marked, as in bench-postgres.ts (a tap on a student an
// API create marked takes that record over: its own statements). The server runs in this
// process; the database is a fresh one, dropped at the end.
// Usage: npx tsx scripts/bench/bench-postgres-trips.ts [--requests 200] [--postgres URL] [--json]
import crypto from "node:crypto";
import http from "node:http";
import path from "node:path";
import pino from "pino";
import { BADGE_PATHS } from "../../firmware/index.ts";
import { startServer } from "../../server/main.ts";
import { createApiKey } from "../../server/services/api-keys.ts";
import { openStore, postgresQueriesSent, postgresWritesSent } from "../../server/store/database.ts";
import { badgeStatusLines, prepareBadgeBench } from "./bench-badge-setup.ts";
import { benchArgs, positiveInt, writeReport } from "./bench-cli.ts";
import { createDatabase, DEFAULT_BENCH_POSTGRES, dropDatabases, dropDatabasesOnExit } from "./bench-databases.ts";
import { commandLine, describeMachine, loadAverage, machine, round, withTempDir, type Machine } from "./bench-common.ts";
import { planRequests, runPhase } from "./bench-sync.ts";

const IN_FLIGHT = 20;
const TAPS_PER_SYNC = 30;
/** syncs per room's badge: 4 one at a time, then 4 with the rooms' badges at once */
const SYNCS_PER_ROOM = 8;

interface Trips {
  /** statements per request */
  one_at_a_time: number;
  in_flight_20: number;
  /** round trips (writes of statements) per request */
  round_trips_one_at_a_time: number;
  round_trips_in_flight_20: number;
  /** this process's CPU per request with 20 in flight, microseconds (server and client) */
  cpu_us_in_flight_20: number;
}

type Measured = { statements: number; trips: number; cpuUs: number };

/** The statements, round trips and CPU per request of `count` requests that `run` makes. */
async function counted(count: number, run: () => Promise<unknown>): Promise<Measured> {
  const queries = postgresQueriesSent();
  const writes = postgresWritesSent();
  const cpu = process.cpuUsage();
  await run();
  const used = process.cpuUsage(cpu);
  return { statements: (postgresQueriesSent() - queries) / count, trips: (postgresWritesSent() - writes) / count, cpuUs: (used.user + used.system) / count };
}

/** Runs `count` requests made by `send(i)`, `concurrency` at a time; statements and CPU per request. */
function measure(count: number, concurrency: number, send: (i: number) => Promise<void>): Promise<Measured> {
  let next = 0;
  return counted(count, () =>
    Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < count) await send(next++);
      }),
    ),
  );
}

function request(agent: http.Agent, url: URL, headers: Record<string, string>, body: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: "POST", agent, headers: { ...headers, "content-length": Buffer.byteLength(body) } }, (res) => {
      res.resume();
      res.on("end", () => (res.statusCode! < 300 ? resolve() : reject(new Error(`${url.pathname}: status ${res.statusCode}`))));
    });
    req.on("error", reject);
    req.end(body);
  });
}

async function main(): Promise<void> {
  const values = benchArgs({ requests: { type: "string", default: "200" }, postgres: { type: "string", default: DEFAULT_BENCH_POSTGRES } });
  const count = positiveInt("requests", values.requests);
  const postgres = values.postgres;
  const loadBefore = loadAverage();
  dropDatabasesOnExit(postgres);
  const url = await createDatabase(postgres, `badgebench_bench_${crypto.randomBytes(4).toString("hex")}_trips`);
  try {
    const report = await withTempDir("badgebench-bench-trips-", async (dir) => {
      const dataDir = path.join(dir, "data");
      // Enough (session, student) pairs for every create, and after them the cards of every sync tap.
      const rooms = 4;
      const createsPerRoom = Math.ceil(count / rooms);
      const studentsPerRoom = createsPerRoom + TAPS_PER_SYNC * SYNCS_PER_ROOM;
      const bench = await prepareBadgeBench(dataDir, path.join(dir, "scratch"), { rooms, studentsPerRoom, devicesPerRoom: 1, databaseUrl: url, imageBytes: 64 * 1024 });
      const store = await openStore({ dataDir, databaseUrl: url });
      const key = await createApiKey(store.db, { mode: "test", scopes: ["attendance:write"] });
      await store.close();
      const server = await startServer({ dataDir, databaseUrl: url, port: 0, host: "127.0.0.1", logger: pino({ level: "silent" }) });
      const agent = new http.Agent({ keepAlive: true, maxSockets: IN_FLIGHT });
      try {
        const check = (i: number) =>
          request(agent, new URL(BADGE_PATHS.check, server.url), { authorization: `Bearer ${bench.devices[i % bench.devices.length]!.token}`, "content-type": "text/plain" }, badgeStatusLines());
        let pair = 0;
        const create = () => {
          const i = pair++;
          const room = bench.rooms[i % rooms]!;
          const body = JSON.stringify({ session_id: room.sessionId, external_id: room.externalIds[Math.floor(i / rooms)], status: "present" });
          return request(agent, new URL("/v1/attendance", server.url), { authorization: `Bearer ${key.secret}`, "content-type": "application/json", "idempotency-key": `trips-${i}` }, body);
        };
        const syncRooms = bench.rooms.map((room) => ({ ...room, cards: room.cards.slice(createsPerRoom) }));
        const syncs = planRequests(syncRooms, bench.devices, TAPS_PER_SYNC);
        const syncUrl = new URL(BADGE_PATHS.sync, server.url);
        const syncTrips = (concurrency: number, part: typeof syncs) => counted(part.length, () => runPhase(agent, syncUrl, part, concurrency));
        const of = (one: Measured, many: Measured): Trips => ({
          one_at_a_time: round(one.statements, 2),
          in_flight_20: round(many.statements, 2),
          round_trips_one_at_a_time: round(one.trips, 2),
          round_trips_in_flight_20: round(many.trips, 2),
          cpu_us_in_flight_20: round(many.cpuUs, 0),
        });
        await measure(20, 1, check); // warm: principals cached, statements prepared
        const result = {
          check: of(await measure(count, 1, check), await measure(count, IN_FLIGHT, check)),
          create: of(await measure(count / 2, 1, create), await measure(count / 2, IN_FLIGHT, create)),
          sync_30_taps: of(await syncTrips(1, syncs.slice(0, 4 * rooms)), await syncTrips(rooms, syncs.slice(4 * rooms))),
        };
        return { figure: "postgres-trips" as const, machine: machine(loadBefore), requests: count, ...result, command: commandLine("bench-postgres-trips.ts") };
      } finally {
        agent.destroy();
        await server.close();
      }
    });
    writeReport(report, values.json, (r: { machine: Machine; requests: number; check: Trips; create: Trips; sync_30_taps: Trips }) => [
      `badgebench PostgreSQL round trips per request: ${describeMachine(r.machine)}; ${r.requests} requests each`,
      "request        statements (round trips) one at a time   with 20 in flight (syncs: 4)   CPU/request (in flight, server + client)",
      ...(["check", "create", "sync_30_taps"] as const).map(
        (kind) =>
          `${kind.padEnd(14)} ${`${r[kind].one_at_a_time} (${r[kind].round_trips_one_at_a_time})`.padStart(20)} ${`${r[kind].in_flight_20} (${r[kind].round_trips_in_flight_20})`.padStart(30)} ${String(r[kind].cpu_us_in_flight_20).padStart(14)} us`,
      ),
    ]);
  } finally {
    await dropDatabases(postgres);
  }
}

await main();
