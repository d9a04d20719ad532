// Benchmarks the fleet runner (issue 4 item 9): `--badges` (10,000) virtual badges check in
// against a server in this process (scripts/sim-server.ts) over `--spread-ms` (120 s), while
// the wearers of `--downloading` (1,000) of them, whose badges booted over the first
// `--ask-at-ms` (20 s), press Check for Update at that moment (within `--ask-spread-ms`, 0 by
// default: all at once), so that 1,000 download at once. Targets (issue 12): the run completes
// on this 2-core machine with no failed badge, peak RSS of the process (VmHWM) under 1.5 GiB,
// and the update check's p99 at the server under 100 ms; also reported: the latencies the
// badges saw, wall time, and the most downloads in flight at once.
//
// The server's own time per request (from its headers parsed to its last byte handed to the
// socket, node:http's diagnostics channels in this process) is reported beside what the badges
// saw, which includes how late their busy worker threads read the answer.
//
// Baseline, same run and server, after the fleet: `--baseline` (100) badges alone, every wearer
// asking, booting over 5 s, so the reader sees what the load added to each latency. Latencies
// are as the badges saw them (badge-sim/fleet.ts): they include how late a badge's worker
// thread got round to an answer, which the event loop delays show.
// The image fills the OTA slot (1,966,080 bytes) unless `--image-size` says otherwise.
// Usage: npx tsx scripts/bench-sim-fleet.ts [--badges 10000] [--downloading 1000] [--image-size 1966080]
//          [--spread-ms 120000] [--ask-at-ms 20000] [--ask-spread-ms 0] [--baseline 100] [--seed 1] [--json]
import diagnostics from "node:diagnostics_channel";
import type { IncomingMessage } from "node:http";
import os from "node:os";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { runFleet, type FleetSummary, type LatencyStats } from "../badge-sim/fleet.ts";
import { OTA_SLOT_BYTES } from "../firmware/index.ts";
import { commandLine, log, MiB, percentile, positiveInt, procMemory, round } from "./bench-common.ts";
import { addDevices, dockedBadge, publishReleases } from "./sim-fleet.ts";
import { startSimServer } from "./sim-server.ts";

const BASELINE_SPREAD_MS = 5_000;
const PROGRESS_EVERY_MS = 10_000;

interface Latency {
  count: number;
  p50_ms: number;
  p99_ms: number;
  max_ms: number;
}

interface Report {
  figure: "sim_fleet";
  badges: number;
  downloading: number;
  image_bytes: number;
  spread_ms: number;
  ask: { at_ms: number; spread_ms: number };
  seed: number;
  threads: number;
  machine: { cpus: number; node: string };
  devices_added_s: number;
  fleet: {
    outcomes: FleetSummary["outcomes"];
    check: Latency | null;
    sync: Latency | null;
    download_head: Latency | null;
    download: Latency | null;
    /** the server's own time for each request (same process), not the badges' */
    server: { check: Latency | null; sync: Latency | null };
    max_concurrent_downloads: number;
    start_lag_p99_ms: number;
    loop_delay_p99_ms: { badges: number; caller: number };
    wall_s: number;
    peak_rss_mb: number;
    crashed: number;
  };
  baseline: { badges: number; check: Latency | null; sync: Latency | null; download_head: Latency | null };
  /** every badge of both runs ended well: updated or checked in */
  valid: boolean;
  command: string;
}

function latency(stats: LatencyStats | null): Latency | null {
  return stats && { count: stats.count, p50_ms: round(stats.p50, 1), p99_ms: round(stats.p99, 1), max_ms: round(stats.max, 1) };
}

const SERVER_TIMED_PATHS = { check: "/api/badge/ota/check", sync: "/api/badge/sync" } as const;
type ServerTimed = keyof typeof SERVER_TIMED_PATHS;

/** Times the in-process server's requests to the SERVER_TIMED_PATHS until stop() is called. */
function timeServerRequests(): { stop(): Record<ServerTimed, Latency | null> } {
  // The kind is read at the start: Express rewrites request.url while routing (a mounted router sees its own part).
  const started = new WeakMap<IncomingMessage, { at: number; kind: ServerTimed }>();
  const samples: Record<ServerTimed, number[]> = { check: [], sync: [] };
  const onStart = (message: unknown) => {
    const { request } = message as { request: IncomingMessage };
    const kind = (Object.keys(SERVER_TIMED_PATHS) as ServerTimed[]).find((k) => request.url === SERVER_TIMED_PATHS[k]);
    if (kind) started.set(request, { at: performance.now(), kind });
  };
  const onFinish = (message: unknown) => {
    const timing = started.get((message as { request: IncomingMessage }).request);
    if (timing) samples[timing.kind].push(performance.now() - timing.at);
  };
  diagnostics.subscribe("http.server.request.start", onStart);
  diagnostics.subscribe("http.server.response.finish", onFinish);
  const stats = (list: number[]): Latency | null =>
    list.length === 0 ? null : { count: list.length, p50_ms: round(percentile(list, 50), 1), p99_ms: round(percentile(list, 99), 1), max_ms: round(Math.max(...list), 1) };
  return {
    stop() {
      diagnostics.unsubscribe("http.server.request.start", onStart);
      diagnostics.unsubscribe("http.server.response.finish", onFinish);
      return { check: stats(samples.check), sync: stats(samples.sync) };
    },
  };
}

const endedWell = (summary: FleetSummary) => summary.outcomes.every((row) => row.outcome === "updated" || row.outcome === "checked in");

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      badges: { type: "string", default: "10000" },
      downloading: { type: "string", default: "1000" },
      "image-size": { type: "string", default: String(OTA_SLOT_BYTES) },
      "spread-ms": { type: "string", default: "120000" },
      "ask-at-ms": { type: "string", default: "20000" },
      "ask-spread-ms": { type: "string", default: "0" },
      baseline: { type: "string", default: "100" },
      seed: { type: "string", default: "1" },
      json: { type: "boolean", default: false },
    },
  });
  const badges = positiveInt("badges", values.badges);
  const downloading = positiveInt("downloading", values.downloading);
  const imageBytes = positiveInt("image-size", values["image-size"]);
  const spreadMs = positiveInt("spread-ms", values["spread-ms"]);
  const ask = { atMs: positiveInt("ask-at-ms", values["ask-at-ms"]), spreadMs: Number(values["ask-spread-ms"]) };
  if (!(ask.spreadMs >= 0)) throw new Error(`--ask-spread-ms must be 0 or more, got ${values["ask-spread-ms"]}`);
  const baselineBadges = positiveInt("baseline", values.baseline);
  const seed = positiveInt("seed", values.seed);
  if (downloading > badges) throw new Error(`--downloading (${downloading}) cannot exceed --badges (${badges})`);

  const server = await startSimServer();
  try {
    const release = await publishReleases(server, imageBytes);
    log(`adding ${badges + baselineBadges} devices`);
    const addStarted = performance.now();
    const tokens = await addDevices(server, badges + baselineBadges);
    const devicesAddedS = (performance.now() - addStarted) / 1000;
    const fleetTokens = tokens.slice(0, badges);
    const baselineTokens = tokens.slice(badges);

    log(`fleet: ${badges} badges over ${spreadMs} ms; ${downloading} wearers ask at ${ask.atMs} ms within ${ask.spreadMs} ms; image ${imageBytes} bytes`);
    let loggedAt = 0;
    const serverTiming = timeServerRequests();
    const fleet = await runFleet({
      serverUrl: server.url,
      badges: fleetTokens.map((token) => dockedBadge(token, release.from)),
      updateShare: downloading / badges,
      spreadMs,
      ask,
      seed,
      onProgress: (progress) => {
        if (progress.elapsedMs - loggedAt < PROGRESS_EVERY_MS) return;
        loggedAt = progress.elapsedMs;
        log(`  ${Math.round(progress.elapsedMs / 1000)} s: ${progress.started} booted, ${progress.finished} at rest, ${progress.downloading} downloading`);
      },
    });
    const serverLatency = serverTiming.stop();
    // The process's high-water mark, read before the baseline adds anything.
    const peakRss = procMemory(process.pid)?.hwm ?? fleet.peakRssBytes;

    log(`baseline: ${baselineBadges} badges alone over ${BASELINE_SPREAD_MS} ms, every wearer asking`);
    const baseline = await runFleet({
      serverUrl: server.url,
      badges: baselineTokens.map((token) => dockedBadge(token, release.from)),
      updateShare: 1,
      spreadMs: BASELINE_SPREAD_MS,
      seed,
    });

    const report: Report = {
      figure: "sim_fleet",
      badges,
      downloading,
      image_bytes: release.size ?? imageBytes,
      spread_ms: spreadMs,
      ask: { at_ms: ask.atMs, spread_ms: ask.spreadMs },
      seed,
      threads: fleet.threads,
      machine: { cpus: os.cpus().length, node: process.version },
      devices_added_s: round(devicesAddedS, 1),
      fleet: {
        outcomes: fleet.outcomes,
        check: latency(fleet.latencyMs.check),
        sync: latency(fleet.latencyMs.sync),
        download_head: latency(fleet.latencyMs.downloadHead),
        download: latency(fleet.latencyMs.download),
        server: serverLatency,
        max_concurrent_downloads: fleet.maxConcurrentDownloads,
        start_lag_p99_ms: round(fleet.startLagMs?.p99 ?? 0, 1),
        loop_delay_p99_ms: { badges: round(fleet.eventLoopDelayMs.badges.p99, 1), caller: round(fleet.eventLoopDelayMs.caller.p99, 1) },
        wall_s: round(fleet.wallMs / 1000, 1),
        peak_rss_mb: Math.round(peakRss / MiB),
        crashed: fleet.crashed,
      },
      baseline: {
        badges: baselineBadges,
        check: latency(baseline.latencyMs.check),
        sync: latency(baseline.latencyMs.sync),
        download_head: latency(baseline.latencyMs.downloadHead),
      },
      valid: endedWell(fleet) && endedWell(baseline),
      command: commandLine("bench-sim-fleet.ts"),
    };
    if (values.json) process.stdout.write(`${JSON.stringify(report)}\n`);
    else printReport(report);
    if (!report.valid) process.exitCode = 1;
  } finally {
    await server.close();
  }
}

function printReport(r: Report): void {
  const figure = (value: number) => (value < 10 ? value.toFixed(1) : Math.round(value).toLocaleString("en-US"));
  const ms = (l: Latency | null, key: "p50_ms" | "p99_ms") => (l ? figure(l[key]) : "-").padStart(10);
  const row = (name: string, fleet: Latency | null, alone: Latency | null) => `  ${name.padEnd(24)}${ms(fleet, "p50_ms")}${ms(fleet, "p99_ms")}${ms(alone, "p50_ms")}${ms(alone, "p99_ms")}`;
  const f = r.fleet;
  const lines = [
    `badgebench fleet benchmark: ${r.badges.toLocaleString("en-US")} badges over ${r.spread_ms / 1000} s, the wearers of ${r.downloading.toLocaleString("en-US")} asking at ${r.ask.at_ms / 1000} s`,
    `${r.ask.spread_ms === 0 ? "all at once" : `within ${r.ask.spread_ms} ms`}; image ${r.image_bytes.toLocaleString("en-US")} bytes; ${r.threads} badge threads, server in this process; ${r.machine.cpus} CPUs, node ${r.machine.node}`,
    `(${(r.badges + r.baseline.badges).toLocaleString("en-US")} devices added in ${r.devices_added_s} s)`,
    "",
    ...f.outcomes.map((o) => `  ${o.outcome.padEnd(16)}${(o.reason ?? "").padEnd(28)}${o.count.toLocaleString("en-US").padStart(8)}`),
    "",
    `  ${"wall ms".padEnd(24)}${"fleet p50".padStart(10)}${"fleet p99".padStart(10)}${"alone p50".padStart(10)}${"alone p99".padStart(10)}`,
    row("update check", f.check, r.baseline.check),
    row("check-in sync", f.sync, r.baseline.sync),
    row("download, to headers", f.download_head, r.baseline.download_head),
    row("download, whole image", f.download, null),
    "",
    `  at the server (its own time per request, same process): update check p50 ${ms(f.server.check, "p50_ms").trim()} ms, p99 ${ms(f.server.check, "p99_ms").trim()} ms (${f.server.check?.count ?? 0}); check-in sync p50 ${ms(f.server.sync, "p50_ms").trim()} ms, p99 ${ms(f.server.sync, "p99_ms").trim()} ms`,
    "",
    `  max concurrent downloads ${f.max_concurrent_downloads.toLocaleString("en-US")} (of ${r.downloading.toLocaleString("en-US")} asking)`,
    `  peak RSS ${f.peak_rss_mb.toLocaleString("en-US")} MiB; wall ${f.wall_s} s; start lag p99 ${figure(f.start_lag_p99_ms)} ms`,
    `  event loop delay p99: badges' threads ${figure(f.loop_delay_p99_ms.badges)} ms, server's thread ${figure(f.loop_delay_p99_ms.caller)} ms`,
    `  ${r.valid ? "completed: every badge updated or checked in" : "INVALID: some badges did not end well (see the outcomes)"}`,
    "",
    `reproduce: ${r.command}`,
  ];
  process.stdout.write(`${lines.join("\n")}\n`);
}

await main();
