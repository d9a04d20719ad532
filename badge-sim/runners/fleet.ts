// The fleet runner: many virtual badges against one server, each driven as its wearer would
// (boot, which syncs on USB power; some press Tools > Check for Update; then left alone until
// the badge sleeps), with the server's latency measured from the badges' side.
//
// Here: the schedule (seeded boot and press moments), the worker threads, and the summary.
// The badges run in worker threads (fleet-worker.ts), never in the caller's. A server started
// in this process (scripts/harness/sim-server.ts) shares the caller's thread; with thousands of badges
// in it as well, it got round to accepting connections so late that its listen backlog (511)
// overflowed and badges waited for the kernel's SYN retries (1, 3, 7 ... 63 s), which measured
// the simulator, not the server. The badges are dealt round-robin to `threads` workers, so a
// burst of downloads, whose simulated flash writes are most of the work, is shared out too.
//
// Latency is wall ms from a client call to its answer as the badge saw it, so it includes how
// late the badge's thread got round to the answer; the loop delays in the summary show that.
import os from "node:os";
import { monitorEventLoopDelay, type IntervalHistogram } from "node:perf_hooks";
import { Worker } from "node:worker_threads";
import type { BatteryOptions } from "../hardware/battery.ts";
import { seededRandom } from "./seeded-random.ts";
import { typeScriptWorkerCode } from "./worker-boot.ts";
import { counted, table } from "../reports/text.ts";

export interface FleetBadge {
  /** the NVS token; null for a badge that was never provisioned */
  token: string | null;
  /** the version flashed into ota_0 */
  version: string;
  battery: BatteryOptions;
  /** versions that crash as this badge boots them (a per-badge fault; default none) */
  crashOnBoot?: string[];
}

export interface FleetOptions {
  /**
   * The server, or several instances of one (on one PostgreSQL database): badge i of `badges`
   * talks to the (i mod n)th for its whole run, round-robin, as a load balancer pinning each
   * badge to one instance would.
   */
  serverUrl: string | readonly string[];
  badges: FleetBadge[];
  /**
   * The share (0 to 1) of wearers who press Tools > Check for Update. They are spread evenly
   * through the list (a share of 0.1 is every tenth badge, the tenth first; 1/3 is every third),
   * so the count is the share rounded and which badges ask does not depend on the seed.
   */
  updateShare: number;
  /** wall ms over which the badges boot, each at a uniformly random moment */
  spreadMs: number;
  /**
   * When the wearers who ask press. Default: each as soon as its badge is up (those badges
   * boot over the spread like the others). With `atMs`, those badges boot over [0, atMs) and
   * wait awake; at `atMs` the update is announced and each wearer presses at a random moment
   * of the next `spreadMs` (or as soon as the badge is up, if it is late). With `badges`, only
   * that many of the wearers who ask (spread evenly through them) do so then: the burst; the
   * others boot over `spreadMs` and ask as soon as their badge is up.
   */
  ask?: { atMs: number; spreadMs: number; badges?: number };
  /** seeds the boot and press moments (default 1) */
  seed?: number;
  /** badges alive at once, at most (default 3,000: about 6 GiB of flash, 8 if 1,000 of them download) */
  maxLiveBadges?: number;
  /** wall ms without a byte before a badge gives a request up (default 60,000; see below) */
  stallTimeoutMs?: number;
  /** worker threads the badges are dealt to (default: one per core) */
  threads?: number;
  /** called every `sampleMs` while the fleet runs, and once at the end */
  onProgress?: (progress: FleetProgress) => void;
  /** how often progress is reported and RSS sampled, wall ms (default 100) */
  sampleMs?: number;
  /**
   * The share (0 to 1) of image downloads (answers 200 or 206) whose link drops at a byte
   * drawn uniformly from the body, as a bad Wi-Fi corner would (default 0). Seeded, but drawn in
   * the order downloads start, which timing decides: the same seed need not cut the same downloads.
   */
  cutShare?: number;
  /**
   * false: the badges' link strips `Range` from every download, as a server or proxy that
   * ignores it would, so a cut badge starts over from byte 0 (the fleet before resume; issue
   * 23). Default true.
   */
  resume?: boolean;
  /**
   * How often a badge whose update did not end on the release comes back before the fleet
   * gives it up (default 100; 0: every badge runs once, as before issue 23's fleet figure).
   */
  maxComebacks?: number;
  /**
   * Wall ms per simulated ms of a wait the server asked for (a 503's Retry-After): the server's
   * downloads in flight end in wall time, so a badge told to come back in 60 s waits that long
   * (default 1); below 1 the wait is compressed, and the badges come back sooner than asked.
   */
  busyWallScale?: number;
  /**
   * The nice value of the badges' threads (Linux: per thread; default 0). A benchmark whose
   * servers share the machine gives them 10, so the servers' time measures the servers: real
   * badges are separate devices that never take the server's CPU.
   */
  threadNice?: number;
}

export interface FleetProgress {
  total: number;
  started: number;
  finished: number;
  live: number;
  downloading: number;
  elapsedMs: number;
}

/**
 * How a badge's run ended:
 * - `updated`: its wearer asked, it downloaded, installed and now runs the offered release
 * - `current`: its wearer asked; the server said it runs the latest (`N`)
 * - `refused`: its wearer asked; the server refused (`X battery_low`, `X no_release`)
 * - `declined`: its wearer asked; the server offered, the badge would not install (its battery gate)
 * - `update failed`: the download or install failed; it restarted on its old firmware
 * - `check failed` / `sync failed`: the request got no usable answer (unreachable, 5xx, stall)
 * - `checked in`: its wearer did not ask; the boot sync was answered
 * - `unauthorized`: the server refused the token (401); the badge cleared it
 * - `unprovisioned`: no token to begin with
 * - `no radio`: not on external power, so it could not reach the server
 * - `bricked`: the new image crashes at start
 * - `crashed`: the simulation itself failed (a bug in the simulator, not a badge outcome)
 */
export type FleetOutcome =
  | "updated"
  | "current"
  | "refused"
  | "declined"
  | "update failed"
  | "check failed"
  | "sync failed"
  | "checked in"
  | "unauthorized"
  | "unprovisioned"
  | "no radio"
  | "bricked"
  | "crashed";

export interface BadgeResult {
  outcome: FleetOutcome;
  /** what the badge or the server said, in full; null when the outcome says it all */
  reason: string | null;
  asked: boolean;
  /** the version it runs at the end (null if it never booted) */
  version: string | null;
  /** times it came back for the update after a cut, a stall or a 503 */
  comebacks: number;
  /** its downloads whose link the fleet cut (`cutShare`) */
  cutDownloads: number;
  /** image bytes its downloads received (of 200 and 206 answers) */
  receivedBytes: number;
  /** it still did not run the offered release after `maxComebacks` comebacks */
  gaveUp: boolean;
  /** simulated ms on its own clock from its boot to the end of its run (the comebacks' waits included) */
  badgeMs: number;
}

/** downloadHead: to the download's status line (the server's latency); download: the whole image */
export type RequestKind = "check" | "sync" | "downloadHead" | "download";

/** Wall ms, nearest-rank percentiles (each an observed sample). */
export interface LatencyStats {
  count: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

export interface LoopDelay {
  p50: number;
  p99: number;
  max: number;
}

export interface FleetSummary {
  badges: number;
  asked: number;
  /** one row per outcome and kind of reason, most frequent first */
  outcomes: Array<{ outcome: FleetOutcome; reason: string | null; count: number }>;
  /** wall ms per request kind as the badges saw them; null when none was made */
  latencyMs: Record<RequestKind, LatencyStats | null>;
  maxConcurrentDownloads: number;
  /** times badges came back for the update (after a cut, a stall or a 503), all badges */
  comebacks: number;
  /** downloads whose link the fleet cut */
  cutDownloads: number;
  /** image bytes the badges' downloads received, all of them */
  receivedBytes: number;
  /** badges that still did not run the offered release after `maxComebacks` comebacks */
  gaveUp: number;
  /** the longest a badge's run took on its own simulated clock, comebacks' waits included */
  maxBadgeMs: number;
  /** how long after its moment each badge started (the live cap or a busy thread delays it) */
  startLagMs: LatencyStats | null;
  /** how late a thread got round to anything: the badges' worst, and the caller's (where an in-process server runs) */
  eventLoopDelayMs: { badges: LoopDelay; caller: LoopDelay };
  threads: number;
  wallMs: number;
  /** the highest RSS of the process sampled while the fleet ran, bytes */
  peakRssBytes: number;
  /** runs of the simulator that failed */
  crashed: number;
  /** per badge, in the order given */
  results: BadgeResult[];
}

export const DEFAULT_MAX_LIVE_BADGES = 3_000;
/**
 * A badge's stall timeout is wall time (network/badge-client.ts), 5 s on the real firmware. A worker
 * busy with hundreds of simulated downloads reads a socket seconds after its bytes arrived
 * (its thread was writing other badges' flash), which a real badge never does; with 5 s the
 * summary would blame the server for the simulator's own backlog. Latencies still show it.
 */
export const DEFAULT_FLEET_STALL_TIMEOUT_MS = 60_000;
const DEFAULT_SAMPLE_MS = 100;
const DEFAULT_MAX_COMEBACKS = 100;

/** One worker's share of the fleet, with each badge's place in the list and its moments. */
export interface Shard {
  stallTimeoutMs: number;
  maxLiveBadges: number;
  sampleMs: number;
  /** what the badges' link does to downloads (cutShare, resume) and its seed */
  link: { cutShare: number; resume: boolean; seed: number };
  comeback: { max: number; busyWallScale: number };
  threadNice: number;
  badges: Array<{ index: number; spec: FleetBadge; serverUrl: string; bootAt: number; pressAt: number | null }>;
  /** Int32 [downloads in flight, the most at once], shared by all the workers */
  downloads: SharedArrayBuffer;
}

interface ShardProgress {
  started: number;
  finished: number;
  live: number;
}

export type WorkerMessage =
  | { type: "ready" }
  | ({ type: "progress" } & ShardProgress)
  | {
      type: "done";
      results: Array<[number, BadgeResult]>;
      samples: Record<RequestKind, number[]>;
      startLag: number[];
      loopDelay: LoopDelay;
    };

/**
 * From source the worker is TypeScript (typeScriptWorkerCode). From the command line's bundle
 * (dist/cli/, scripts/cli/build-cli.js) this module is a .js chunk and the worker is the bundle's
 * own entry beside it, plain JavaScript.
 */
function workerBoot(): string {
  if (!import.meta.url.endsWith(".ts")) return `import(${JSON.stringify(new URL("./fleet-worker.js", import.meta.url).href)});`;
  return typeScriptWorkerCode(new URL("./fleet-worker.ts", import.meta.url));
}

export async function runFleet(options: FleetOptions): Promise<FleetSummary> {
  const { badges, updateShare, spreadMs, ask } = options;
  const maxLive = options.maxLiveBadges ?? DEFAULT_MAX_LIVE_BADGES;
  const threads = Math.min(options.threads ?? os.availableParallelism(), Math.max(1, badges.length));
  if (!(updateShare >= 0 && updateShare <= 1)) throw new RangeError(`updateShare ${updateShare} must be from 0 to 1`);
  if (!(spreadMs >= 0)) throw new RangeError(`spreadMs ${spreadMs} must be 0 or more wall ms`);
  if (ask && !(ask.atMs >= 0 && ask.spreadMs >= 0)) throw new RangeError(`ask.atMs ${ask.atMs} and ask.spreadMs ${ask.spreadMs} must be 0 or more wall ms`);
  const serverUrls = typeof options.serverUrl === "string" ? [options.serverUrl] : options.serverUrl;
  if (serverUrls.length === 0) throw new RangeError("serverUrl must name at least one server");
  if (!(Number.isInteger(maxLive) && maxLive >= 1)) throw new RangeError(`maxLiveBadges ${maxLive} must be a whole number of at least 1`);
  if (!(Number.isInteger(threads) && threads >= 1)) throw new RangeError(`threads ${options.threads} must be a whole number of at least 1`);
  const cutShare = options.cutShare ?? 0;
  if (!(cutShare >= 0 && cutShare <= 1)) throw new RangeError(`cutShare ${cutShare} must be from 0 to 1`);
  const maxComebacks = options.maxComebacks ?? DEFAULT_MAX_COMEBACKS;
  if (!(Number.isInteger(maxComebacks) && maxComebacks >= 0)) throw new RangeError(`maxComebacks ${maxComebacks} must be a whole number of 0 or more`);
  const busyWallScale = options.busyWallScale ?? 1;
  if (!(busyWallScale >= 0)) throw new RangeError(`busyWallScale ${busyWallScale} must be 0 or more`);

  const threadNice = options.threadNice ?? 0;
  if (!(Number.isInteger(threadNice) && threadNice >= 0 && threadNice <= 19)) throw new RangeError(`threadNice ${threadNice} must be a whole number from 0 to 19`);

  const random = seededRandom(options.seed ?? 1);
  // In whole numbers, so the count is exactly the share of the fleet, rounded.
  const askers = Math.round(updateShare * badges.length);
  const asks = badges.map((_, i) => evenlySpread(i, askers, badges.length));
  // Which of the askers press at ask.atMs (all of them unless ask.badges says fewer).
  const burst = Math.min(ask?.badges ?? askers, askers);
  if (!(Number.isInteger(burst) && burst >= 0)) throw new RangeError(`ask.badges ${ask?.badges} must be a whole number of 0 or more`);
  let askerIndex = 0;
  const inBurst = asks.map((asking) => asking && evenlySpread(askerIndex++, burst, askers));
  const sampleMs = options.sampleMs ?? DEFAULT_SAMPLE_MS;
  const downloads = new SharedArrayBuffer(2 * Int32Array.BYTES_PER_ELEMENT);
  const seed = options.seed ?? 1;
  const shards: Shard[] = Array.from({ length: threads }, (_, thread) => ({
    stallTimeoutMs: options.stallTimeoutMs ?? DEFAULT_FLEET_STALL_TIMEOUT_MS,
    maxLiveBadges: Math.ceil(maxLive / threads),
    sampleMs,
    link: { cutShare, resume: options.resume ?? true, seed: seed * 1_000 + thread },
    comeback: { max: maxComebacks, busyWallScale },
    threadNice,
    badges: [],
    downloads,
  }));
  badges.forEach((spec, index) => {
    const bootAt = random() * (inBurst[index] && ask ? ask.atMs : spreadMs);
    const pressAt = asks[index] ? (inBurst[index] && ask ? ask.atMs + random() * ask.spreadMs : 0) : null;
    shards[index % threads]!.badges.push({ index, spec, serverUrl: serverUrls[index % serverUrls.length]!, bootAt, pressAt });
  });

  const { onProgress } = options;
  const progress: ShardProgress[] = shards.map(() => ({ started: 0, finished: 0, live: 0 }));
  let began = performance.now();
  const report = () => {
    const sum = (key: keyof ShardProgress) => progress.reduce((total, shard) => total + shard[key], 0);
    const downloading = Atomics.load(new Int32Array(downloads), 0);
    onProgress?.({ total: badges.length, started: sum("started"), finished: sum("finished"), live: sum("live"), downloading, elapsedMs: performance.now() - began });
  };
  const callerDelay = monitorEventLoopDelay({ resolution: 10 });
  callerDelay.enable();
  let peakRss = process.memoryUsage.rss();
  const sampler = setInterval(() => {
    peakRss = Math.max(peakRss, process.memoryUsage.rss());
    report();
  }, sampleMs);
  const workers = shards.map((shard, i) => startWorker(shard, ({ started, finished, live }) => (progress[i] = { started, finished, live })));
  try {
    // The workers' clocks start together, once all have loaded: the schedule is one schedule.
    await Promise.all(workers.map((worker) => worker.ready));
    began = performance.now();
    for (const worker of workers) worker.go();
    const done = await Promise.all(workers.map((worker) => worker.done));
    peakRss = Math.max(peakRss, process.memoryUsage.rss());
    report();

    const results: BadgeResult[] = new Array(badges.length);
    for (const shard of done) for (const [index, result] of shard.results) results[index] = result;
    const samplesOf = (kind: RequestKind) => done.flatMap((shard) => shard.samples[kind]);
    const worst = (key: keyof LoopDelay) => Math.max(...done.map((shard) => shard.loopDelay[key]));
    return {
      badges: badges.length,
      asked: askers,
      outcomes: tally(results),
      latencyMs: {
        check: statsOf(samplesOf("check")),
        sync: statsOf(samplesOf("sync")),
        downloadHead: statsOf(samplesOf("downloadHead")),
        download: statsOf(samplesOf("download")),
      },
      maxConcurrentDownloads: Atomics.load(new Int32Array(downloads), 1),
      comebacks: sumOf(results, (result) => result.comebacks),
      cutDownloads: sumOf(results, (result) => result.cutDownloads),
      receivedBytes: sumOf(results, (result) => result.receivedBytes),
      gaveUp: results.filter((result) => result.gaveUp).length,
      maxBadgeMs: results.reduce((most, result) => Math.max(most, result.badgeMs), 0),
      startLagMs: statsOf(done.flatMap((shard) => shard.startLag)),
      eventLoopDelayMs: { badges: { p50: worst("p50"), p99: worst("p99"), max: worst("max") }, caller: loopDelayOf(callerDelay) },
      threads,
      wallMs: performance.now() - began,
      peakRssBytes: peakRss,
      crashed: results.filter((result) => result.outcome === "crashed").length,
      results,
    };
  } finally {
    clearInterval(sampler);
    callerDelay.disable();
    // After a failure the other workers would go on simulating; after success they have exited.
    for (const worker of workers) void worker.terminate();
  }
}

const sumOf = (results: BadgeResult[], count: (result: BadgeResult) => number) => results.reduce((sum, result) => sum + count(result), 0);

/** Whether item `i` of `total` is one of `count` chosen evenly through them (the first chosen is at about total/count). */
function evenlySpread(i: number, count: number, total: number): boolean {
  return Math.floor(((i + 1) * count) / total) > Math.floor((i * count) / total);
}

type Done = Extract<WorkerMessage, { type: "done" }>;

interface FleetWorker {
  /** resolves once the worker has loaded and waits for go() */
  ready: Promise<void>;
  go(): void;
  /** what it measured, once its thread has ended */
  done: Promise<Done>;
  terminate(): Promise<number>;
}

function startWorker(shard: Shard, onProgress: (progress: ShardProgress) => void): FleetWorker {
  const worker = new Worker(workerBoot(), { eval: true, workerData: shard });
  let loaded!: () => void;
  let failed!: (error: Error) => void;
  const ready = new Promise<void>((resolve, reject) => {
    loaded = resolve;
    failed = reject;
  });
  const done = new Promise<Done>((resolve, reject) => {
    let result: Done | null = null;
    worker.on("message", (message: WorkerMessage) => {
      if (message.type === "ready") loaded();
      else if (message.type === "progress") onProgress(message);
      else result = message;
    });
    const fail = (error: Error) => {
      failed(error);
      reject(error);
    };
    worker.once("error", fail);
    worker.once("exit", (code) => (result ? resolve(result) : fail(new Error(`a fleet worker thread exited with code ${code} before it finished`))));
  });
  // Whoever awaits `ready` hears of a failure there; `done` is awaited only after it.
  done.catch(() => {});
  return { ready, go: () => worker.postMessage("go"), done, terminate: () => worker.terminate() };
}

export function loopDelayOf(histogram: IntervalHistogram): LoopDelay {
  const ms = (ns: number) => ns / 1e6;
  return { p50: ms(histogram.percentile(50)), p99: ms(histogram.percentile(99)), max: ms(histogram.max) };
}

/**
 * A reason without its particulars (percentages, byte counts, addresses, MD5s), so that like
 * failures are counted together: `download cut at 51% (...)` is `download cut`, `download refused:
 * HTTP 403 not_offered ...` is `download refused: HTTP 403 not_offered`.
 */
function reasonKind(reason: string): string {
  return /^(download refused: )?HTTP \d{3}( \S+)?/.exec(reason)?.[0] ?? reason.split(/:| at | after | \(/)[0]!.trim();
}

function tally(results: BadgeResult[]): FleetSummary["outcomes"] {
  const rows = new Map<string, FleetSummary["outcomes"][number]>();
  for (const { outcome, reason } of results) {
    const kind = reason === null ? null : reasonKind(reason);
    const key = `${outcome}\n${kind ?? ""}`;
    const row = rows.get(key) ?? { outcome, reason: kind, count: 0 };
    row.count++;
    rows.set(key, row);
  }
  return [...rows.values()].sort((a, b) => b.count - a.count || a.outcome.localeCompare(b.outcome));
}

/** Nearest-rank percentiles: each is an observed sample, never an interpolation. */
function statsOf(samples: number[]): LatencyStats | null {
  if (samples.length === 0) return null;
  const sorted = Float64Array.from(samples).sort();
  const at = (p: number) => sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)]!;
  return { count: sorted.length, p50: at(50), p90: at(90), p99: at(99), max: sorted[sorted.length - 1]! };
}


const LATENCY_LABELS: Record<RequestKind, string> = {
  check: "check",
  sync: "sync",
  downloadHead: "download, to headers",
  download: "download, whole image",
};

/** The summary as plain text: outcomes, then latencies per request kind, then the run's figures. */
export function formatFleetSummary(summary: FleetSummary): string {
  const count = (n: number) => n.toLocaleString("en-US");
  const ms = (value: number) => (value < 10 ? value.toFixed(1) : count(Math.round(value)));
  const outcomeRows = summary.outcomes.map((row) => [row.outcome, row.reason ?? "", count(row.count)]);
  const latencyRows = (Object.keys(LATENCY_LABELS) as RequestKind[]).map((kind) => {
    const stats = summary.latencyMs[kind];
    const figures = stats ? [count(stats.count), ms(stats.p50), ms(stats.p90), ms(stats.p99), ms(stats.max)] : ["0", "-", "-", "-", "-"];
    return [LATENCY_LABELS[kind], ...figures];
  });
  const delay = (name: string, d: LoopDelay) => `${name} p99 ${ms(d.p99)} ms, max ${ms(d.max)} ms`;
  const { badges: badgeDelay, caller: callerDelay } = summary.eventLoopDelayMs;
  const lag = summary.startLagMs;
  return [
    `${counted(summary.badges, "badge", "badges", count)}; the wearers of ${count(summary.asked)} asked for the update`,
    "",
    table(["outcome", "reason", "badges"], outcomeRows, [false, false, true]),
    "",
    table(["request (wall ms)", "count", "p50", "p90", "p99", "max"], latencyRows, [false, true, true, true, true, true]),
    "",
    `max concurrent downloads ${count(summary.maxConcurrentDownloads)}`,
    `downloads cut ${count(summary.cutDownloads)}; comebacks ${count(summary.comebacks)}; gave up ${count(summary.gaveUp)}; longest badge run ${(summary.maxBadgeMs / 1000).toFixed(1)} s of badge time`,
    `wall time ${(summary.wallMs / 1000).toFixed(1)} s, peak RSS ${count(Math.round(summary.peakRssBytes / 2 ** 20))} MiB`,
    `event loop delay: ${delay(`badges' threads (${summary.threads}), worst`, badgeDelay)}; ${delay("caller's thread", callerDelay)}`,
    lag ? `start lag behind the spread: p50 ${ms(lag.p50)} ms, p99 ${ms(lag.p99)} ms, max ${ms(lag.max)} ms` : "no badge started",
  ].join("\n");
}
