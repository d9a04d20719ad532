// Where a request's time goes on PostgreSQL (issue 27): the statements (each one network round
// trip, counted at the driver: database.ts's postgresQueriesSent) a check, a create and a 30-tap
// sync send, one request at a time (nothing to share: the worst case) and 20 in flight (the write
// batcher's groups and the shared reads spread over the requests), with the server's CPU per
// request (this process's, measured around the requests, including the client's share). The
// server runs in this process; the database is a fresh one, dropped at the end.
// Usage: npx tsx scripts/bench/bench-postgres-trips.ts [--requests 200] [--postgres URL] [--json]
import crypto from "node:crypto";
import http from "node:http";
import path from "node:path";
import pino from "pino";
import { BADGE_PATHS } from "../../firmware/index.ts";
import { startServer } from "../../server/main.ts";
import { createApiKey } from "../../server/services/api-keys.ts";
import { openStore, postgresQueriesSent } from "../../server/store/database.ts";
import { badgeStatusLines, prepareBadgeBench } from "./bench-badge-setup.ts";
import { benchArgs, positiveInt, writeReport } from "./bench-cli.ts";
import { createDatabase, DEFAULT_BENCH_POSTGRES, dropDatabases, dropDatabasesOnExit } from "./bench-databases.ts";
import { commandLine, describeMachine, loadAverage, machine, round, withTempDir, type Machine } from "./bench-common.ts";
import { planRequests, runPhase } from "./bench-sync.ts";

const IN_FLIGHT = 20;
const TAPS_PER_SYNC = 30;

interface Trips {
  /** statements per request */
  one_at_a_time: number;
  in_flight_20: number;
  /** this process's CPU per request with 20 in flight, microseconds (server and client) */
  cpu_us_in_flight_20: number;
}

/** Runs `count` requests made by `send(i)`, `concurrency` at a time; statements and CPU per request. */
async function measure(count: number, concurrency: number, send: (i: number) => Promise<void>) {
  const queries = postgresQueriesSent();
  const cpu = process.cpuUsage();
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < count) await send(next++);
    }),
  );
  const used = process.cpuUsage(cpu);
  return { trips: (postgresQueriesSent() - queries) / count, cpuUs: (used.user + used.system) / count };
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
      // Enough (session, student) pairs for every create, and cards for every sync tap.
      const rooms = 4;
      const studentsPerRoom = Math.max(TAPS_PER_SYNC, Math.ceil((count * 2) / rooms) + TAPS_PER_SYNC * 4);
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
        const syncs = planRequests(bench.rooms, bench.devices, TAPS_PER_SYNC).slice(-8 * rooms);
        const syncUrl = new URL(BADGE_PATHS.sync, server.url);
        const syncTrips = async (concurrency: number, part: typeof syncs) => {
          const queries = postgresQueriesSent();
          const cpu = process.cpuUsage();
          await runPhase(agent, syncUrl, part, concurrency);
          const used = process.cpuUsage(cpu);
          return { trips: (postgresQueriesSent() - queries) / part.length, cpuUs: (used.user + used.system) / part.length };
        };
        const of = (one: { trips: number }, many: { trips: number; cpuUs: number }): Trips => ({
          one_at_a_time: round(one.trips, 2),
          in_flight_20: round(many.trips, 2),
          cpu_us_in_flight_20: round(many.cpuUs, 0),
        });
        await measure(20, 1, check); // warm: principals cached, statements prepared
        const result = {
          check: of(await measure(count, 1, check), await measure(count, IN_FLIGHT, check)),
          create: of(await measure(count / 2, 1, create), await measure(count / 2, IN_FLIGHT, create)),
          sync_30_taps: of(await syncTrips(1, syncs.slice(0, 4 * rooms)), await syncTrips(4, syncs.slice(4 * rooms))),
        };
        return { figure: "postgres-trips" as const, machine: machine(loadBefore), requests: count, ...result, command: commandLine("bench-postgres-trips.ts") };
      } finally {
        agent.destroy();
        await server.close();
      }
    });
    writeReport(report, values.json, (r: { machine: Machine; requests: number; check: Trips; create: Trips; sync_30_taps: Trips }) => [
      `badgebench PostgreSQL round trips per request: ${describeMachine(r.machine)}; ${r.requests} requests each`,
      "request        statements one at a time   with 20 in flight   CPU/request (20 in flight, server + client)",
      ...(["check", "create", "sync_30_taps"] as const).map(
        (kind) => `${kind.padEnd(14)} ${String(r[kind].one_at_a_time).padStart(10)} ${String(r[kind].in_flight_20).padStart(20)} ${String(r[kind].cpu_us_in_flight_20).padStart(14)} us`,
      ),
    ]);
  } finally {
    await dropDatabases(postgres);
  }
}

await main();
