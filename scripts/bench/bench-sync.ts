// Benchmarks POST /api/badge/sync carrying `--taps` (30) card taps per request: taps persisted
// per second. Target (issue 12): at least 15,000 taps/s.
//
// The school: `--rooms` (10) rooms with one badge each, and in every room one open session
// covering the present moment whose course enrolls `--students` (3,000) students, each with a
// card. Every tap is a different student's card, stamped a few seconds ago, so every tap must
// be accepted and make a new attendance record: each room's students are sent once, in batches
// of `--taps`, with `--concurrency` (20) requests in flight over keep-alive connections, the
// rooms' badges taking turns. The first `--warmup` requests are sent before the clock starts.
// Every response must answer `A <n>` for each of its taps; at the end the server's tables must
// hold one accepted `device_taps` row and one new device-made `records` row per tap sent.
// The server runs in its own process, started as `badgebench serve --sync <mode>` is; one sync
// is one transaction, so run it with `--sync full` (the default) and `--sync normal`.
// Usage: npx tsx scripts/bench/bench-sync.ts [--sync full|normal] [--rooms 10] [--students 3000]
//          [--taps 30] [--concurrency 20] [--warmup 30] [--cpu-prof DIR] [--json]
import http from "node:http";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { BADGE_PATHS, formatTap, MAX_TAPS } from "../../firmware/index.ts";
import { countRecordsByMethod } from "../../server/store/attendance-store.ts";
import { openStore, type SyncMode } from "../../server/store/database.ts";
import { countTapsByResult } from "../../server/store/taps-store.ts";
import { badgeStatusLines, prepareBadgeBench, type BenchDevice, type BenchRoom } from "./bench-badge-setup.ts";
import { commandLine, log, percentile, procCpuSeconds, round, spawnBadgebench, stopServer, withTempDir, cpusAndNode, type CpusAndNode } from "./bench-common.ts";
import { benchArgs, BenchUsageError, CPU_PROF_OPTION, cpuProfDirOf, numberOptions, positiveInts, SYNC_OPTION, syncModeOf, wholeNumber, writeReport } from "./bench-cli.ts";

const TARGET_TAPS_PER_S = 15_000;

/** One sync: `cards` tapped on `device`, numbered from `first` in the badge's queue. */
export interface SyncRequest {
  device: BenchDevice;
  cards: string[];
  first: number;
}

/** Room by room, the room's cards in batches of `taps`; the rooms take turns. */
export function planRequests(rooms: BenchRoom[], devices: BenchDevice[], taps: number): SyncRequest[] {
  const batches = rooms.map((room) => {
    const device = devices.find((d) => d.room === room.code)!;
    const list: SyncRequest[] = [];
    for (let i = 0; i < room.cards.length; i += taps) list.push({ device, cards: room.cards.slice(i, i + taps), first: i + 1 });
    return list;
  });
  const requests: SyncRequest[] = [];
  const longest = Math.max(...batches.map((b) => b.length));
  for (let i = 0; i < longest; i++) {
    for (const list of batches) {
      const batch = list[i];
      if (batch) requests.push(batch);
    }
  }
  return requests;
}

/** The body is made when the request is sent, so the tap times are "a few seconds ago" then. */
function syncBody(cards: string[], first: number): string {
  const now = Math.floor(Date.now() / 1000);
  const lines = cards.map((card, j) => `tap=${formatTap(first + j, card, now - 2 - (j % 5))}\n`);
  return badgeStatusLines() + lines.join("");
}

interface Outcome {
  ms: number;
  accepted: number;
  problems: string[];
}

function post(agent: http.Agent, url: URL, token: string, body: string, taps: { first: number; count: number }): Promise<Outcome> {
  return new Promise((resolve) => {
    const started = performance.now();
    const req = http.request(
      url,
      { method: "POST", agent, headers: { authorization: `Bearer ${token}`, "content-type": "text/plain", "content-length": Buffer.byteLength(body) } },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => (text += chunk));
        res.on("end", () => {
          const ms = performance.now() - started;
          if (res.statusCode !== 200) return resolve({ ms, accepted: 0, problems: [`status ${res.statusCode}: ${text.split("\n").find((l) => l.startsWith("X ")) ?? text.slice(0, 80)}`] });
          const lines = text.split("\n");
          const problems: string[] = [];
          let accepted = 0;
          for (let n = taps.first; n < taps.first + taps.count; n++) {
            if (lines.includes(`A ${n}`)) accepted++;
            else problems.push(lines.find((l) => l.startsWith(`R ${n} `))?.replace(/^R \d+ /, "rejected: ") ?? "no answer for a tap");
          }
          resolve({ ms, accepted, problems });
        });
        res.on("error", (error) => resolve({ ms: performance.now() - started, accepted: 0, problems: [`response error ${error.message}`] }));
      },
    );
    req.on("error", (error: NodeJS.ErrnoException) => resolve({ ms: performance.now() - started, accepted: 0, problems: [`request error ${error.code ?? error.message}`] }));
    req.end(body);
  });
}

export interface Phase {
  requests: number;
  taps: number;
  accepted: number;
  seconds: number;
  latencies: number[];
  problems: Record<string, number>;
}

export async function runPhase(agent: http.Agent, url: URL, requests: SyncRequest[], concurrency: number): Promise<Phase> {
  const phase: Phase = { requests: requests.length, taps: 0, accepted: 0, seconds: 0, latencies: [], problems: {} };
  let next = 0;
  const started = performance.now();
  const worker = async () => {
    while (next < requests.length) {
      const { device, cards, first } = requests[next++]!;
      const outcome = await post(agent, url, device.token, syncBody(cards, first), { first, count: cards.length });
      phase.taps += cards.length;
      phase.accepted += outcome.accepted;
      phase.latencies.push(outcome.ms);
      for (const problem of outcome.problems) phase.problems[problem] = (phase.problems[problem] ?? 0) + 1;
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, requests.length) }, worker));
  phase.seconds = (performance.now() - started) / 1000;
  return phase;
}

interface Report {
  figure: "sync";
  sync: SyncMode;
  rooms: number;
  students_per_room: number;
  taps_per_request: number;
  concurrency: number;
  warmup_requests: number;
  machine: CpusAndNode;
  measured: {
    requests: number;
    taps: number;
    accepted: number;
    seconds: number;
    taps_per_s: number;
    requests_per_s: number;
    p50_ms: number;
    p99_ms: number;
    /** the server process's CPU time (all its threads) over the measured requests, per request */
    server_cpu_ms_per_request: number | null;
  };
  problems: Record<string, number>;
  stored: { taps_sent: number; device_taps_accepted: number; device_taps_rejected: number; device_records: number };
  target_taps_per_s: number;
  valid: boolean;
  pass: boolean;
  command: string;
}

function table(r: Report): string[] {
  const m = r.measured;
  const s = r.stored;
  const lines = [
    `badgebench sync benchmark: --sync ${r.sync}, ${r.rooms} rooms x 1 badge, ${r.students_per_room} students per room, ${r.taps_per_request} taps per request,`,
    `${r.concurrency} requests in flight, ${r.warmup_requests} warm-up requests; ${r.machine.cpus} CPUs, node ${r.machine.node}`,
    "",
    `  measured: ${m.requests} requests, ${m.taps} taps (${m.accepted} accepted) in ${m.seconds} s`,
    `  ${m.taps_per_s} taps/s (target >= ${r.target_taps_per_s}): ${r.pass ? "ok" : r.valid ? "MISSED" : "INVALID (taps not accepted or not stored)"}`,
    `  ${m.requests_per_s} requests/s, p50 ${m.p50_ms} ms, p99 ${m.p99_ms} ms`,
    `  server CPU ${m.server_cpu_ms_per_request ?? "(unknown)"} ms per request (user + system, all its threads; less moved by other jobs than the rate)`,
    `  stored: ${s.device_taps_accepted} accepted taps, ${s.device_taps_rejected} rejected, ${s.device_records} device records, of ${s.taps_sent} taps sent`,
  ];
  for (const [problem, n] of Object.entries(r.problems)) lines.push(`  PROBLEM: ${n} x ${problem}`);
  return lines;
}

async function main(): Promise<void> {
  const values = benchArgs({
    ...SYNC_OPTION,
    ...numberOptions({ rooms: 10, students: 3000, taps: 30, concurrency: 20, warmup: 30 }),
    ...CPU_PROF_OPTION,
  });
  const sync = syncModeOf(values.sync);
  const { rooms, students, taps, concurrency } = positiveInts(values, ["rooms", "students", "taps", "concurrency"]);
  const warmup = wholeNumber("warmup", values.warmup);
  if (taps > MAX_TAPS) throw new BenchUsageError(`--taps must be at most ${MAX_TAPS} (the taps one sync may carry)`);
  const cpuProfDir = cpuProfDirOf(values);

  const report = await withTempDir("badgebench-bench-sync-", async (tmp) => {
    log(`preparing ${rooms} rooms x ${students} students with cards, open sessions, ${rooms} badges`);
    const bench = await prepareBadgeBench(path.join(tmp, "data"), path.join(tmp, "scratch"), { rooms, studentsPerRoom: students, devicesPerRoom: 1 });
    const requests = planRequests(bench.rooms, bench.devices, taps);
    if (requests.length <= warmup) throw new Error(`only ${requests.length} requests to send; raise --students or lower --warmup`);
    const server = await spawnBadgebench(bench.dataDir, sync, { cpuProfDir });
    const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });
    try {
      const url = new URL(BADGE_PATHS.sync, server.url);
      log(`warm-up: ${warmup} requests`);
      const warm = await runPhase(agent, url, requests.slice(0, warmup), concurrency);
      log(`measuring: ${requests.length - warmup} requests of ${taps} taps, ${concurrency} in flight`);
      const cpuBefore = procCpuSeconds(server.child.pid!);
      const run = await runPhase(agent, url, requests.slice(warmup), concurrency);
      const cpuAfter = procCpuSeconds(server.child.pid!);
      const serverCpuS = cpuBefore === undefined || cpuAfter === undefined ? null : cpuAfter - cpuBefore;
      log(`  ${round(run.accepted / run.seconds, 0)} taps/s`);
      agent.destroy();
      await stopServer(server.child);

      const stored = { taps_sent: warm.taps + run.taps, ...(await recordedByServer(bench.dataDir)) };

      const problems: Record<string, number> = {};
      for (const phase of [warm, run]) for (const [p, n] of Object.entries(phase.problems)) problems[p] = (problems[p] ?? 0) + n;
      const valid =
        Object.keys(problems).length === 0 &&
        stored.device_taps_accepted === stored.taps_sent &&
        stored.device_records === stored.taps_sent &&
        stored.device_taps_rejected === 0;
      const tapsPerS = round(run.accepted / run.seconds, 0);
      const result: Report = {
        figure: "sync",
        sync,
        rooms,
        students_per_room: students,
        taps_per_request: taps,
        concurrency,
        warmup_requests: warmup,
        machine: cpusAndNode(),
        measured: {
          requests: run.requests,
          taps: run.taps,
          accepted: run.accepted,
          seconds: round(run.seconds, 3),
          taps_per_s: tapsPerS,
          requests_per_s: round(run.requests / run.seconds, 1),
          p50_ms: round(percentile(run.latencies, 50), 1),
          p99_ms: round(percentile(run.latencies, 99), 1),
          server_cpu_ms_per_request: serverCpuS === null ? null : round((serverCpuS * 1000) / run.requests, 2),
        },
        problems,
        stored,
        target_taps_per_s: TARGET_TAPS_PER_S,
        valid,
        pass: valid && tapsPerS >= TARGET_TAPS_PER_S,
        command: commandLine("bench-sync.ts"),
      };
      return result;
    } finally {
      agent.destroy();
      await stopServer(server.child);
    }
  });
  writeReport(report, values.json, table, cpuProfDir);
}

/** What the stopped server stored of the run: its badges' taps by result and the records they made. */
async function recordedByServer(dataDir: string) {
  const store = await openStore({ dataDir });
  try {
    return {
      device_taps_accepted: await countTapsByResult(store.db, "accepted"),
      device_taps_rejected: await countTapsByResult(store.db, "rejected"),
      device_records: await countRecordsByMethod(store.db, "device"),
    };
  } finally {
    await store.close();
  }
}

// Run when started as a script; bench-postgres.ts imports the parts it shares.
if (process.argv[1] === fileURLToPath(import.meta.url)) await main();
