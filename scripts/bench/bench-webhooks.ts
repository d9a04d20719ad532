// Benchmarks webhook delivery against `badgebench serve` in its own process, with 5 receivers
// on 127.0.0.1 in this process answering 200 at once:
//   1. create throughput (POST /v1/attendance under autocannon) with the 5 endpoints disabled
//      (nothing delivered) and enabled and receiving, in 3 alternating rounds of the same run,
//      medians (target: ratio above 0.9);
//   2. N events (default 10,000) fanned out to the 5 endpoints, created flat out by 10 clients,
//      then created at --rate events per second (default 500): deliveries per second, the delay
//      from commit to first attempt (target: median under 50 ms, p99 under 250 ms) and the
//      server's memory. Flat out, requests keep the server busy and deliveries step back to
//      their busy share (server/webhooks/server-load.ts): the delay is the backlog's age.
// The delay is measured from the record's created_at, the timestamp the server takes inside
// the write's transaction, to the receiver reading the request: it includes the commit itself.
// Usage: npx tsx scripts/bench/bench-webhooks.ts [--events N] [--rate 500] [--sync full|normal] [--json] [--cpu-prof DIR]
// (--cpu-prof: the server writes a .cpuprofile into DIR when it stops)
import http from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { createApiKey } from "../../server/services/api-keys.ts";
import { importSchool, type SchoolFile } from "../../server/services/school-import.ts";
import { openStore, type SyncMode } from "../../server/store/database.ts";
import { commandLine, describeMachine, loadAverage, machine, load, log, MiB, percentile, procMemory, round, spawnBadgebench, stopServer, withTempDir, type AutocannonRequest, summarizeRounds, type Machine, type LoadResult, type RoundsSummary, type LoadSettings } from "./bench-common.ts";
import { benchArgs, CPU_PROF_OPTION, cpuProfDirOf, positiveInt, SYNC_OPTION, syncModeOf, writeReport } from "./bench-cli.ts";

const TARGETS = { createRatio: 0.9, delayMedianMs: 50, delayP99Ms: 250 };
const ENDPOINTS = 5;
const LOAD: LoadSettings = { connections: 10, durationS: 8, warmupS: 1 };
const ROUNDS = 3;
const FAN_OUT_CONCURRENCY = 10;
/** the paced fan-out's events per second: 2,500 deliveries a second, well below what the server delivers */
const PACED_RATE = 500;
const CLASS_SIZE = 300;
const SESSIONS = 1000; // 300,000 (session, student) pairs: more than both loads and the fan-out use at group-committed create rates

function benchSchool(): SchoolFile {
  const students = Array.from({ length: CLASS_SIZE }, (_, i) => ({ external_id: `W${100000 + i}`, name: `Student ${i}` }));
  const sessions = Array.from({ length: SESSIONS }, (_, j) => {
    const start = Date.parse("2025-01-06T08:00:00Z") + j * 3_600_000;
    return { course_code: "HOOKS", room: "W1", starts_at: new Date(start).toISOString(), ends_at: new Date(start + 3_000_000).toISOString() };
  });
  return {
    rooms: [{ code: "W1", name: "Webhook room" }],
    students,
    courses: [{ code: "HOOKS", name: "Webhook course" }],
    enrollments: [{ course_code: "HOOKS", external_ids: students.map((s) => s.external_id) }],
    sessions,
  };
}

interface Receiver {
  url: string;
  /** commit-to-arrival delay of each delivery, ms */
  delays: number[];
  seen: Set<string>;
  lastArrival: number;
  close(): Promise<void>;
}

async function startReceiver(): Promise<Receiver> {
  const receiver: Receiver = { url: "", delays: [], seen: new Set(), lastArrival: 0, close: async () => {} };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const now = Date.now();
      res.writeHead(200).end();
      const event = JSON.parse(Buffer.concat(chunks).toString()) as { id: string; data: { object: { created_at: string } } };
      if (receiver.seen.has(event.id)) return;
      receiver.seen.add(event.id);
      receiver.delays.push(now - Date.parse(event.data.object.created_at));
      receiver.lastArrival = now;
    });
  });
  server.keepAliveTimeout = 30_000;
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  receiver.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`;
  receiver.close = () => new Promise((resolve) => { server.closeAllConnections(); server.close(() => resolve()); });
  return receiver;
}

async function main(): Promise<void> {
  const values = benchArgs({ events: { type: "string", default: "10000" }, rate: { type: "string", default: String(PACED_RATE) }, ...SYNC_OPTION, ...CPU_PROF_OPTION });
  const events = positiveInt("events", values.events);
  // --rate paces the second fan-out's creates (events per second) below what the server can take, so
  // the delay shows the worker's own latency rather than a growing backlog.
  const rate = positiveInt("rate", values.rate);
  const sync: SyncMode = syncModeOf(values.sync);
  const cpuProfDir = cpuProfDirOf(values);
  const started = performance.now();
  const loadBefore = loadAverage();

  const report = await withTempDir("badgebench-bench-webhooks-", async (tmp) => {
    const dataDir = path.join(tmp, "data");
    const { token, sessions } = await prepareSchool(dataDir);
    const pairs = pairSource(sessions);
    const headers = { "content-type": "application/json", authorization: `Bearer ${token}` };
    const { child, url } = await spawnBadgebench(dataDir, sync, { cpuProfDir });
    const receivers = await Promise.all(Array.from({ length: ENDPOINTS }, startReceiver));
    try {
      const bench: RunningBench = { url, headers, serverPid: child.pid!, receivers, pairs, endpointIds: await addEndpoints(url, headers, receivers) };
      const { withoutRounds, withRounds } = await createRounds(bench);
      const without = summarizeRounds(withoutRounds);
      const withEndpoints = summarizeRounds(withRounds);
      const failed = [without, withEndpoints].reduce((n, s) => n + s.non2xx + s.errors + s.timeouts, 0);
      if (failed > 0) throw new Error(`${failed} create requests failed during the rounds (non-2xx, errors or timeouts): the throughput figures would not count`);

      // The fan-out twice: flat out (as fast as 10 clients can create: the delay is then the
      // age of the backlog that builds while creates take the CPU), then paced at --rate, below
      // what the server delivers, so the delay is the worker's own latency.
      const flatOut = await fanOut(bench, events, undefined);
      const paced = await fanOut(bench, events, rate);
      return {
        machine: machine(loadBefore),
        command: commandLine("bench-webhooks.ts"),
        sync,
        create: {
          connections: LOAD.connections,
          duration_s: LOAD.durationS,
          rounds: ROUNDS,
          without_endpoints: summary(without),
          with_endpoints: summary(withEndpoints),
          rounds_rps: { without: withoutRounds.map((r) => r.rps), with: withRounds.map((r) => r.rps) },
          ratio: round(withEndpoints.rps / without.rps, 3),
          target_ratio: TARGETS.createRatio,
        },
        fan_out: { flat_out: flatOut, paced },
        total_seconds: round((performance.now() - started) / 1000, 1),
      };
    } finally {
      await stopServer(child);
      await Promise.all(receivers.map((r) => r.close()));
    }
  });
  writeReport(report, values.json, table, cpuProfDir);
}

/** The school, imported through the store, and a test-mode key; the test-mode sessions in order. */
async function prepareSchool(dataDir: string): Promise<{ token: string; sessions: string[] }> {
  const setup = await openStore({ dataDir, sync: "normal" });
  try {
    await importSchool(setup.db, benchSchool(), { mode: "test", source: "webhook bench school" });
    const token = (await createApiKey(setup.db, { mode: "test", scopes: ["attendance:write", "webhooks:write"], name: "bench" })).secret;
    const sessions = (await setup.db.selectFrom("sessions").select("id").where("livemode", "=", 0).orderBy("starts_at").execute()).map((s) => s.id);
    return { token, sessions };
  } finally {
    await setup.close();
  }
}

/** The (session, student) pairs in turn, each a new record (and so a new event); `used` counts them. */
function pairSource(sessions: string[]) {
  const source = {
    used: 0,
    next() {
      const i = source.used++;
      if (i >= sessions.length * CLASS_SIZE) throw new Error("the pool of (session, student) pairs ran out; raise SESSIONS");
      return { i, body: JSON.stringify({ session_id: sessions[Math.floor(i / CLASS_SIZE)], external_id: `W${100000 + (i % CLASS_SIZE)}`, status: "present" }) };
    },
  };
  return source;
}

interface RunningBench {
  url: string;
  headers: Record<string, string>;
  serverPid: number;
  receivers: Receiver[];
  pairs: ReturnType<typeof pairSource>;
  endpointIds: string[];
}

/** One webhook endpoint per receiver, through the API; their ids. */
async function addEndpoints(url: string, headers: Record<string, string>, receivers: Receiver[]): Promise<string[]> {
  const endpointIds: string[] = [];
  for (const r of receivers) {
    const res = await fetch(`${url}/v1/webhook_endpoints`, { method: "POST", headers: { ...headers, "idempotency-key": `endpoint-${r.url}` }, body: JSON.stringify({ url: r.url, enabled_events: ["*"] }) });
    if (res.status !== 201) throw new Error(`creating an endpoint failed: ${res.status} ${await res.text()}`);
    endpointIds.push(((await res.json()) as { id: string }).id);
  }
  return endpointIds;
}

async function setDisabled(bench: RunningBench, disabled: boolean): Promise<void> {
  for (const id of bench.endpointIds) {
    const res = await fetch(`${bench.url}/v1/webhook_endpoints/${id}`, { method: "PATCH", headers: { ...bench.headers, "idempotency-key": `toggle-${id}-${Math.random()}` }, body: JSON.stringify({ disabled }) });
    if (res.status !== 200) throw new Error(`toggling an endpoint failed: ${res.status}`);
  }
}

/**
 * Rounds alternate (machine load drifts on a shared machine): without endpoints (all 5
 * disabled: no delivery at all) and with the 5 enabled and receiving; medians of the rounds.
 */
async function createRounds(bench: RunningBench): Promise<{ withoutRounds: LoadResult[]; withRounds: LoadResult[] }> {
  const create: AutocannonRequest = {
    method: "POST",
    path: "/v1/attendance",
    headers: bench.headers,
    setupRequest: (req) => {
      const { i, body } = bench.pairs.next();
      return { ...req, headers: { ...req.headers, "idempotency-key": `bench-${i}` }, body };
    },
  };
  const withoutRounds: LoadResult[] = [];
  const withRounds: LoadResult[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    await setDisabled(bench, true);
    log(`round ${round + 1}/${ROUNDS}: creates with the endpoints disabled`);
    withoutRounds.push(await load(bench.url, LOAD, [create], bench.serverPid));
    await setDisabled(bench, false);
    log(`round ${round + 1}/${ROUNDS}: creates with ${ENDPOINTS} endpoints receiving`);
    const firstEventOfLoad = bench.pairs.used;
    withRounds.push(await load(bench.url, LOAD, [create], bench.serverPid));
    // Every create of this load, warm-up included, is an event to deliver before going on.
    await drain(bench.receivers, bench.pairs.used - firstEventOfLoad, 300_000);
    for (const r of bench.receivers) {
      r.delays.length = 0;
      r.seen.clear();
    }
  }
  return { withoutRounds, withRounds };
}

/** `count` events created by 10 clients (flat out, or paced at `perSecond`) and fanned out to every receiver. */
async function fanOut(bench: RunningBench, count: number, perSecond: number | undefined) {
  for (const r of bench.receivers) {
    r.delays.length = 0;
    r.seen.clear();
  }
  log(`fan-out: ${count} events to ${ENDPOINTS} endpoints${perSecond ? ` at ${perSecond} per second` : " flat out"}`);
  const memory = { before: procMemory(bench.serverPid)!, peakRss: 0 };
  const sampler = setInterval(() => {
    const m = procMemory(bench.serverPid);
    if (m) memory.peakRss = Math.max(memory.peakRss, m.rss);
  }, 100);
  const agent = new http.Agent({ keepAlive: true, maxSockets: FAN_OUT_CONCURRENCY });
  const started = Date.now();
  let sent = 0;
  await Promise.all(
    Array.from({ length: FAN_OUT_CONCURRENCY }, async () => {
      while (sent < count) {
        const due = perSecond === undefined ? 0 : started + (sent * 1000) / perSecond - Date.now();
        sent++;
        if (due > 0) await new Promise((r) => setTimeout(r, due));
        const { i, body } = bench.pairs.next();
        const status = await post(`${bench.url}/v1/attendance`, { ...bench.headers, "idempotency-key": `fan-${i}` }, body, agent);
        if (status !== 201) throw new Error(`create answered ${status}`);
      }
    }),
  );
  const createsDone = Date.now();
  log(`created ${count} records in ${((createsDone - started) / 1000).toFixed(1)} s`);
  await drain(bench.receivers, count, 300_000);
  clearInterval(sampler);
  agent.destroy();
  const lastArrival = Math.max(...bench.receivers.map((r) => r.lastArrival));
  const delays = bench.receivers.flatMap((r) => r.delays);
  const after = procMemory(bench.serverPid)!;
  return {
    events: count,
    rate_per_second: perSecond ?? null,
    endpoints: ENDPOINTS,
    deliveries: delays.length,
    creates_seconds: round((createsDone - started) / 1000, 2),
    deliveries_per_second: round(delays.length / ((lastArrival - started) / 1000), 1),
    delay_median_ms: percentile(delays, 50),
    delay_p99_ms: percentile(delays, 99),
    delay_max_ms: Math.max(...delays),
    target_median_ms: TARGETS.delayMedianMs,
    target_p99_ms: TARGETS.delayP99Ms,
    server_rss_before_mib: round(memory.before.rss / MiB, 1),
    server_rss_peak_mib: round(Math.max(memory.peakRss, after.rss) / MiB, 1),
    server_rss_after_mib: round(after.rss / MiB, 1),
  };
}

const summary = ({ runs: _runs, ...figures }: RoundsSummary) => figures;

function post(url: string, headers: Record<string, string>, body: string, agent: http.Agent): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: "POST", headers, agent }, (res) => {
      res.resume();
      res.on("end", () => resolve(res.statusCode ?? 0));
    });
    req.on("error", reject);
    req.end(body);
  });
}

/** Waits until every receiver has `count` distinct events. */
async function drain(receivers: Receiver[], count: number, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs;
  let nextReport = Date.now() + 5000;
  while (receivers.some((r) => r.seen.size < count)) {
    if (Date.now() > nextReport) {
      log(`waiting for deliveries: ${receivers.map((r) => r.seen.size).join(", ")} of ${count}`);
      nextReport += 5000;
    }
    if (Date.now() > deadline) throw new Error(`deliveries did not arrive: ${receivers.map((r) => r.seen.size).join(", ")} of ${count}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function table(r: WebhookReport): string[] {
  const ok = (pass: boolean) => (pass ? "ok" : "MISSED");
  const c = r.create;
  return [
    `badgebench webhook benchmark: ${describeMachine(r.machine)}, --sync ${r.sync}, total ${r.total_seconds} s`,
    "",
    `1. create throughput  POST /v1/attendance, ${c.connections} connections, ${c.duration_s} s per round, ${c.rounds} alternating rounds, medians`,
    `   endpoints disabled    ${c.without_endpoints.rps} req/s  p50 ${c.without_endpoints.p50_ms} ms  p99 ${c.without_endpoints.p99_ms} ms  (rounds ${c.rounds_rps.without.join(", ")})`,
    `   ${ENDPOINTS} endpoints receiving ${c.with_endpoints.rps} req/s  p50 ${c.with_endpoints.p50_ms} ms  p99 ${c.with_endpoints.p99_ms} ms  (rounds ${c.rounds_rps.with.join(", ")})`,
    `   server CPU per create: ${c.without_endpoints.server_cpu_us} us disabled, ${c.with_endpoints.server_cpu_us} us receiving (medians of the rounds, all its threads)`,
    `   ratio ${c.ratio} (target above ${c.target_ratio}) ${ok(c.ratio > c.target_ratio)}`,
    ...[r.fan_out.flat_out, r.fan_out.paced].flatMap((f, i) => [
      "",
      `${i + 2}. fan-out ${f.rate_per_second ? `paced at ${f.rate_per_second} events/s` : "flat out"}: ${f.events} events x ${f.endpoints} endpoints = ${f.deliveries} deliveries (creates took ${f.creates_seconds} s)`,
      `   ${f.deliveries_per_second} deliveries/s`,
      `   commit to first attempt: median ${f.delay_median_ms} ms (target < ${f.target_median_ms}) ${ok(f.delay_median_ms < f.target_median_ms)}, p99 ${f.delay_p99_ms} ms (target < ${f.target_p99_ms}) ${ok(f.delay_p99_ms < f.target_p99_ms)}, max ${f.delay_max_ms} ms`,
      `   server RSS ${f.server_rss_before_mib} MiB before, ${f.server_rss_peak_mib} MiB peak, ${f.server_rss_after_mib} MiB after`,
    ]),
  ];
}

interface WebhookReport {
  machine: Machine;
  command: string;
  sync: SyncMode;
  create: {
    connections: number;
    duration_s: number;
    rounds: number;
    without_endpoints: ReturnType<typeof summary>;
    with_endpoints: ReturnType<typeof summary>;
    rounds_rps: { without: number[]; with: number[] };
    ratio: number;
    target_ratio: number;
  };
  fan_out: { flat_out: FanOut; paced: FanOut };
  total_seconds: number;
}

type FanOut = Awaited<ReturnType<typeof fanOut>>;

await main();
