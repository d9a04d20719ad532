// Benchmarks the fleet runner (issue 4 item 9, issue 27 item 4): `--badges` (10,000) virtual
// badges check in over `--spread-ms` (120 s); the wearers of `--downloading` (1,000; `all` for
// every badge) of them press Check for Update, `--burst` of those (all of them by default) at
// `--ask-at-ms` (20 s, within `--ask-spread-ms`, 0 by default: all at once; their badges boot
// before it and wait awake), the others as soon as their badge is up. Targets (issue 12): the
// run completes on this 2-core machine with no failed badge, peak RSS under 1.5 GiB, and the
// update check's p99 at the server under 100 ms; also reported: the latencies the badges saw,
// wall time (with every wearer asking: until every badge runs the release), the most downloads
// in flight at once.
//
// `--stores` says which servers, one after the other in the same run (default `in-process`):
// - `in-process`: one server in this process (scripts/harness/sim-server.ts) on SQLite;
// - `sqlite`: one server spawned as `npm start` runs it (dist/serve.js), on SQLite (`--sync full`);
// - `postgres`: `--instances` (2) servers spawned alike on one fresh PostgreSQL database on
//   `--postgres` (dropped at the end), badge i talking to instance i mod n (round-robin, as a
//   load balancer pinning each badge to one instance would).
// A spawned server is loaded with server-request-timing-preload.ts (through tsx), which times its
// requests; each instance's peak RSS (VmHWM) is read after the fleet.
//
// The server's own time per request (from its headers parsed to its last byte handed to the
// socket, node:http's diagnostics channels) is reported beside what the badges saw, which
// includes how late their busy worker threads read the answer. The badges' threads run at nice
// BADGE_THREAD_NICE: real badges are separate devices, so the servers (and PostgreSQL) have the
// cores first, and their own time is not the time the simulator held the cores.
//
// Issue 23's fleet figure: `--cut-share` (0) of the image downloads are cut at a random byte by
// the badges' link; a cut badge, and one the download cap (`--max-downloads` for spawned
// instances, BADGEBENCH_MAX_DOWNLOADS; 1,000 by default) refused with 503, comes back as the real
// badge would (badge-sim/README.md, the fleet runner) and resumes; a 503's Retry-After is waited
// in wall time times `--busy-wall-scale` (1). `--without-resume` first runs the same fleet on
// devices of its own with the link stripping Range, so every cut starts over from byte 0. For
// each, measured at the servers (server-request-timing.ts): the image body bytes they handed to
// download connections over badges x image bytes (a cut's bytes still in the kernel's socket
// buffers count as served), the most downloads each instance served at once; and at the badges,
// the image bytes they received. On the host's loopback the kernels take the whole image at once,
// so a cut wastes half an image of what was served: `--badge-link` (root; not with PostgreSQL,
// which the namespace cannot reach) runs the benchmark in a network namespace whose TCP is set as
// a badge's link and a download server's host would be (badge-link.ts).
//
// Baseline, same run and servers, after the fleet: `--baseline` (100) badges alone, every wearer
// asking, booting over 5 s, so the reader sees what the load added to each latency.
// The image fills the OTA slot (1,966,080 bytes) unless `--image-size` says otherwise.
// Usage: npx tsx scripts/bench/bench-sim-fleet.ts [--badges 10000] [--downloading 1000|all] [--burst N]
//          [--image-size 1966080] [--spread-ms 120000] [--ask-at-ms 20000] [--ask-spread-ms 0] [--baseline 100]
//          [--stores in-process|sqlite,postgres] [--instances 2] [--postgres URL] [--seed 1]
//          [--cut-share 0] [--without-resume] [--busy-wall-scale 1] [--max-downloads N] [--badge-link] [--json]
import path from "node:path";
import { performance } from "node:perf_hooks";
import { DEFAULT_MAX_LIVE_BADGES, runFleet, type FleetSummary, type LatencyStats } from "../../badge-sim/runners/fleet.ts";
import { OTA_SLOT_BYTES } from "../../firmware/index.ts";
import { commandLine, describeMachine, loadAverage, log, machine, MiB, percentile, procMemory, round, withTempDir, type Machine } from "./bench-common.ts";
import { benchArgs, BenchUsageError, positiveInt, writeReport } from "./bench-cli.ts";
import { BADGE_LINK_SYSCTLS, inBadgeLink, rerunInBadgeLink, setUpBadgeLink } from "./badge-link.ts";
import { DEFAULT_BENCH_POSTGRES, dropDatabases, dropDatabasesOnExit } from "./bench-databases.ts";
import { inProcessServers, spawnedServers, type Servers } from "./fleet-servers.ts";
import type { ServerSamples } from "./server-request-timing.ts";
import { addDevices, dockedBadge, publishReleases } from "../cli/sim-fleet.ts";

const BASELINE_SPREAD_MS = 5_000;
const BADGE_THREAD_NICE = 10;
const PROGRESS_EVERY_MS = 10_000;
const STORES = ["in-process", "sqlite", "postgres"] as const;
type StoreKind = (typeof STORES)[number];

interface Latency {
  count: number;
  p50_ms: number;
  p99_ms: number;
  max_ms: number;
}

interface Setup {
  label: string;
  store: StoreKind;
  instances: number;
}

interface FleetOptions {
  badges: number;
  downloading: number;
  burst: number;
  imageBytes: number;
  spreadMs: number;
  ask: { atMs: number; spreadMs: number };
  baselineBadges: number;
  seed: number;
  /** the share of image downloads the badges' link cuts at a random byte */
  cutShare: number;
  /** before the fleet, the same fleet without resume (badges start over from byte 0), on devices of its own */
  withoutResumeFirst: boolean;
  busyWallScale: number;
  /** BADGEBENCH_MAX_DOWNLOADS of each spawned instance (undefined: the server's default) */
  maxDownloads: number | undefined;
}

/** What the image downloads of one fleet cost, measured at the servers and at the badges. */
interface DownloadCost {
  /** body bytes the servers handed to the downloads' connections / (badges x image bytes) */
  served_ratio: number;
  /** image bytes the badges received / (badges x image bytes) */
  received_ratio: number;
  /** per instance: the most image downloads it served at once */
  server_peak_downloads: number[];
  cut_downloads: number;
  comebacks: number;
  gave_up: number;
  /** the longest run of a badge on its own simulated clock, comebacks' waits included */
  max_badge_s: number;
}

interface RunReport {
  setup: string;
  store: StoreKind;
  instances: number;
  devices_added_s: number;
  fleet: {
    outcomes: FleetSummary["outcomes"];
    check: Latency | null;
    sync: Latency | null;
    download_head: Latency | null;
    download: Latency | null;
    /** the servers' own time for each request (all instances together), not the badges' */
    server: { check: Latency | null; sync: Latency | null };
    max_concurrent_downloads: number;
    downloads: DownloadCost;
    start_lag_p99_ms: number;
    loop_delay_p99_ms: { badges: number; caller: number };
    /** from the first boot until the last badge was at rest: with every wearer asking, until every badge runs the release */
    wall_s: number;
    updated: number;
    /** the simulator's process, sampled while the fleet ran (in this process: the server's memory too) */
    peak_rss_mb: number;
    crashed: number;
  };
  /** VmHWM of each spawned server instance; empty when the server ran in this process */
  instances_peak_rss_mb: number[];
  /** the same fleet before resume (badges start over from byte 0), on the same servers first; null unless asked for */
  without_resume: { downloads: DownloadCost; wall_s: number; updated: number; outcomes: FleetSummary["outcomes"] } | null;
  baseline: { badges: number; check: Latency | null; sync: Latency | null; download_head: Latency | null };
  /** every badge of every run (the fleet without resume too, when asked for) ended well: updated or checked in */
  valid: boolean;
}

interface Report {
  figure: "sim_fleet";
  badges: number;
  downloading: number;
  burst: number;
  image_bytes: number;
  cut_share: number;
  spread_ms: number;
  ask: { at_ms: number; spread_ms: number };
  seed: number;
  /** the TCP settings of the badge link's namespace (--badge-link), or null: the host's loopback */
  badge_link: Record<string, string> | null;
  machine: Machine;
  runs: RunReport[];
  /** the whole benchmark process's high-water mark (VmHWM) */
  peak_rss_mb: number;
  command: string;
}

function latency(stats: LatencyStats | null): Latency | null {
  return stats && { count: stats.count, p50_ms: round(stats.p50, 1), p99_ms: round(stats.p99, 1), max_ms: round(stats.max, 1) };
}

function latencyOf(list: number[]): Latency | null {
  if (list.length === 0) return null;
  return { count: list.length, p50_ms: round(percentile(list, 50), 1), p99_ms: round(percentile(list, 99), 1), max_ms: round(list.reduce((a, b) => Math.max(a, b), 0), 1) };
}

const endedWell = (summary: Pick<FleetSummary, "outcomes">) => summary.outcomes.every((row) => row.outcome === "updated" || row.outcome === "checked in");

/** `--stores a,b` in the order given, each once. */
function setupsOf(stores: string, instances: number): Setup[] {
  const kinds = stores.split(",").map((kind) => kind.trim());
  for (const kind of kinds) {
    if (!(STORES as readonly string[]).includes(kind)) throw new BenchUsageError(`--stores takes a comma-separated list of ${STORES.join(", ")}; got ${kind}`);
  }
  if (new Set(kinds).size !== kinds.length) throw new BenchUsageError(`--stores names a store twice: ${stores}`);
  return (kinds as StoreKind[]).map((store) => {
    if (store === "in-process") return { label: "SQLite, in this process", store, instances: 1 };
    if (store === "sqlite") return { label: "SQLite, 1 instance", store, instances: 1 };
    return { label: `PostgreSQL, ${instances} instance${instances === 1 ? "" : "s"}`, store, instances };
  });
}

async function runSetup(setup: Setup, options: FleetOptions, dir: string, postgres: string): Promise<RunReport> {
  log(`${setup.label}: starting`);
  const servers = setup.store === "in-process" ? await inProcessServers() : await spawnedServers({ store: setup.store, instances: setup.instances }, dir, postgres, options.maxDownloads);
  let report: RunReport;
  let fleetWindow: [number, number];
  try {
    ({ report, fleetWindow } = await runFleets(setup, servers, options));
  } catch (error) {
    await servers.stop().catch(() => undefined);
    throw error;
  }
  // What the servers measured of themselves is known once they have stopped.
  const samples = await servers.stop();
  const ofFleet = (list: ServerSamples["check"]) => latencyOf(list.filter(([at]) => at >= fleetWindow[0] && at < fleetWindow[1]).map(([, ms]) => ms));
  report.fleet.server = { check: ofFleet(samples.check), sync: ofFleet(samples.sync) };
  return report;
}

/**
 * The fleet (before it, when asked, the same fleet without resume, on its own devices), then the
 * baseline on the same servers; the servers' own timings (`fleet.server`) are filled in by the
 * caller, from those of requests started within `fleetWindow` (epoch ms) of the fleet with resume.
 */
async function runFleets(setup: Setup, servers: Servers, options: FleetOptions): Promise<{ report: RunReport; fleetWindow: [number, number] }> {
  const { sim, urls } = servers;
  const release = await publishReleases(sim, options.imageBytes);
  const fleets = options.withoutResumeFirst ? 2 : 1;
  const devices = options.badges * fleets + options.baselineBadges;
  log(`${setup.label}: adding ${devices} devices`);
  const addStarted = performance.now();
  const tokens = await addDevices(sim, devices);
  const devicesAddedS = (performance.now() - addStarted) / 1000;

  const runOne = async (resume: boolean, fleetTokens: string[]) => {
    log(
      `${setup.label}: ${options.badges} badges over ${options.spreadMs} ms, round-robin over ${urls.length} instance(s); ${options.downloading} wearers ask, ${options.burst} of them at ${options.ask.atMs} ms within ${options.ask.spreadMs} ms; image ${options.imageBytes} bytes; ${options.cutShare * 100} % of downloads cut, ${resume ? "resumed" : "started over"}`,
    );
    let loggedAt = 0;
    await servers.takeDownloads();
    const fleet = await runFleet({
      serverUrl: urls,
      badges: fleetTokens.map((token) => dockedBadge(token, release.from)),
      updateShare: options.downloading / options.badges,
      spreadMs: options.spreadMs,
      ask: { ...options.ask, badges: options.burst },
      // The burst's badges wait awake for their moment: room for all of them and for the others booting meanwhile.
      maxLiveBadges: options.burst + DEFAULT_MAX_LIVE_BADGES,
      seed: options.seed,
      cutShare: options.cutShare,
      resume,
      busyWallScale: options.busyWallScale,
      threadNice: BADGE_THREAD_NICE,
      onProgress: (progress) => {
        if (progress.elapsedMs - loggedAt < PROGRESS_EVERY_MS) return;
        loggedAt = progress.elapsedMs;
        log(`  ${Math.round(progress.elapsedMs / 1000)} s: ${progress.started} booted, ${progress.finished} at rest, ${progress.downloading} downloading`);
      },
    });
    const served = await servers.takeDownloads();
    const imageBytes = options.badges * options.imageBytes;
    const downloads: DownloadCost = {
      served_ratio: round(served.reduce((sum, instance) => sum + instance.bodyBytes, 0) / imageBytes, 4),
      received_ratio: round(fleet.receivedBytes / imageBytes, 4),
      server_peak_downloads: served.map((instance) => instance.peakInFlight),
      cut_downloads: fleet.cutDownloads,
      comebacks: fleet.comebacks,
      gave_up: fleet.gaveUp,
      max_badge_s: round(fleet.maxBadgeMs / 1000, 1),
    };
    return { fleet, downloads };
  };

  let withoutResume: RunReport["without_resume"] = null;
  if (options.withoutResumeFirst) {
    const { fleet, downloads } = await runOne(false, tokens.slice(0, options.badges));
    withoutResume = { downloads, wall_s: round(fleet.wallMs / 1000, 1), updated: updatedOf(fleet), outcomes: fleet.outcomes };
  }
  // Epoch ms (the servers' samples say when each request started): the other fleet's and the baseline's are not this fleet's.
  const fleetStarted = performance.timeOrigin + performance.now();
  const { fleet, downloads } = await runOne(true, tokens.slice(options.badges * (fleets - 1), options.badges * fleets));
  const instancesRss = servers.peakRssMiB();
  const fleetEnded = performance.timeOrigin + performance.now();

  log(`${setup.label}: baseline, ${options.baselineBadges} badges alone over ${BASELINE_SPREAD_MS} ms, every wearer asking`);
  const baseline = await runFleet({
    serverUrl: urls,
    badges: tokens.slice(options.badges * fleets).map((token) => dockedBadge(token, release.from)),
    updateShare: 1,
    spreadMs: BASELINE_SPREAD_MS,
    seed: options.seed,
    threadNice: BADGE_THREAD_NICE,
  });
  const report: RunReport = {
    setup: setup.label,
    store: setup.store,
    instances: setup.instances,
    devices_added_s: round(devicesAddedS, 1),
    fleet: {
      outcomes: fleet.outcomes,
      check: latency(fleet.latencyMs.check),
      sync: latency(fleet.latencyMs.sync),
      download_head: latency(fleet.latencyMs.downloadHead),
      download: latency(fleet.latencyMs.download),
      server: { check: null, sync: null },
      max_concurrent_downloads: fleet.maxConcurrentDownloads,
      downloads,
      start_lag_p99_ms: round(fleet.startLagMs?.p99 ?? 0, 1),
      loop_delay_p99_ms: { badges: round(fleet.eventLoopDelayMs.badges.p99, 1), caller: round(fleet.eventLoopDelayMs.caller.p99, 1) },
      wall_s: round(fleet.wallMs / 1000, 1),
      updated: updatedOf(fleet),
      peak_rss_mb: Math.round(fleet.peakRssBytes / MiB),
      crashed: fleet.crashed,
    },
    instances_peak_rss_mb: instancesRss,
    without_resume: withoutResume,
    baseline: {
      badges: options.baselineBadges,
      check: latency(baseline.latencyMs.check),
      sync: latency(baseline.latencyMs.sync),
      download_head: latency(baseline.latencyMs.downloadHead),
    },
    // the fleet without resume is a figure too: one whose badges did not all end well served less than a fleet's downloads
    valid: endedWell(fleet) && endedWell(baseline) && (withoutResume === null || endedWell(withoutResume)),
  };
  return { report, fleetWindow: [fleetStarted, fleetEnded] };
}

const updatedOf = (fleet: FleetSummary) => fleet.outcomes.filter((row) => row.outcome === "updated").reduce((sum, row) => sum + row.count, 0);

function fleetOptionsOf(values: Record<string, string | undefined>, withoutResumeFirst: boolean): FleetOptions {
  const badges = positiveInt("badges", values.badges);
  const downloading = values.downloading === "all" ? badges : positiveInt("downloading", values.downloading);
  if (downloading > badges) throw new BenchUsageError(`--downloading (${downloading}) cannot exceed --badges (${badges})`);
  const burst = values.burst === undefined ? downloading : positiveInt("burst", values.burst);
  if (burst > downloading) throw new BenchUsageError(`--burst (${burst}) cannot exceed --downloading (${downloading})`);
  const cutShare = Number(values["cut-share"]);
  if (!(cutShare >= 0 && cutShare <= 1)) throw new BenchUsageError(`--cut-share must be from 0 to 1, got ${values["cut-share"]}`);
  const busyWallScale = Number(values["busy-wall-scale"]);
  if (!(busyWallScale >= 0)) throw new BenchUsageError(`--busy-wall-scale must be 0 or more, got ${values["busy-wall-scale"]}`);
  const askSpreadMs = Number(values["ask-spread-ms"]);
  if (!(askSpreadMs >= 0)) throw new BenchUsageError(`--ask-spread-ms must be 0 or more, got ${values["ask-spread-ms"]}`);
  return {
    badges,
    downloading,
    burst,
    imageBytes: positiveInt("image-size", values["image-size"]),
    spreadMs: positiveInt("spread-ms", values["spread-ms"]),
    ask: { atMs: positiveInt("ask-at-ms", values["ask-at-ms"]), spreadMs: askSpreadMs },
    baselineBadges: positiveInt("baseline", values.baseline),
    seed: positiveInt("seed", values.seed),
    cutShare,
    withoutResumeFirst,
    busyWallScale,
    maxDownloads: values["max-downloads"] === undefined ? undefined : positiveInt("max-downloads", values["max-downloads"]),
  };
}

async function main(): Promise<void> {
  const values = benchArgs({
    badges: { type: "string", default: "10000" },
    downloading: { type: "string", default: "1000" },
    burst: { type: "string" },
    "image-size": { type: "string", default: String(OTA_SLOT_BYTES) },
    "spread-ms": { type: "string", default: "120000" },
    "ask-at-ms": { type: "string", default: "20000" },
    "ask-spread-ms": { type: "string", default: "0" },
    baseline: { type: "string", default: "100" },
    seed: { type: "string", default: "1" },
    "cut-share": { type: "string", default: "0" },
    "without-resume": { type: "boolean", default: false },
    "busy-wall-scale": { type: "string", default: "1" },
    "max-downloads": { type: "string" },
    stores: { type: "string", default: "in-process" },
    instances: { type: "string", default: "2" },
    postgres: { type: "string", default: DEFAULT_BENCH_POSTGRES },
    "badge-link": { type: "boolean", default: false },
  });
  const { json, stores, instances, postgres, "without-resume": withoutResume, "badge-link": badgeLink, ...fleetValues } = values;
  const options = fleetOptionsOf(fleetValues, withoutResume);
  const setups = setupsOf(stores, positiveInt("instances", instances));
  if (badgeLink && !inBadgeLink()) {
    if (setups.some((setup) => setup.store === "postgres")) throw new BenchUsageError("--badge-link runs in a network namespace of its own, which cannot reach PostgreSQL on the host: use --stores in-process or sqlite");
    process.exitCode = await rerunInBadgeLink();
    return;
  }
  if (badgeLink) setUpBadgeLink();
  const loadBefore = loadAverage();
  dropDatabasesOnExit(postgres);
  try {
    const runs = await withTempDir("badgebench-bench-fleet-", async (tmp) => {
      const done: RunReport[] = [];
      for (const [i, setup] of setups.entries()) {
        done.push(await runSetup(setup, options, path.join(tmp, `setup-${i}`), postgres));
        // A long run's figures survive a later setup that fails or is stopped.
        log(`${setup.label}: done ${JSON.stringify(done.at(-1))}`);
      }
      return done;
    });
    const report: Report = {
      figure: "sim_fleet",
      badges: options.badges,
      downloading: options.downloading,
      burst: options.burst,
      image_bytes: options.imageBytes,
      cut_share: options.cutShare,
      spread_ms: options.spreadMs,
      ask: { at_ms: options.ask.atMs, spread_ms: options.ask.spreadMs },
      seed: options.seed,
      badge_link: badgeLink ? { ...BADGE_LINK_SYSCTLS } : null,
      machine: machine(loadBefore),
      runs,
      peak_rss_mb: Math.round((procMemory(process.pid)?.hwm ?? Number.NaN) / MiB),
      command: commandLine("bench-sim-fleet.ts"),
    };
    writeReport(report, json, table);
  } finally {
    if (setups.some((setup) => setup.store === "postgres")) await dropDatabases(postgres);
  }
}

function costText(d: DownloadCost): string {
  return `bytes served ${d.served_ratio.toFixed(3)}x badges x image (received ${d.received_ratio.toFixed(3)}x); most served at once ${d.server_peak_downloads.join(" / ")}; ${d.cut_downloads} cut, ${d.comebacks} comebacks, ${d.gave_up} gave up; longest badge run ${d.max_badge_s} s of badge time`;
}

function table(r: Report): string[] {
  const figure = (value: number) => (value < 10 ? value.toFixed(1) : Math.round(value).toLocaleString("en-US"));
  const ms = (l: Latency | null, key: "p50_ms" | "p99_ms") => (l ? figure(l[key]) : "-").padStart(10);
  const row = (name: string, fleet: Latency | null, alone: Latency | null) => `  ${name.padEnd(24)}${ms(fleet, "p50_ms")}${ms(fleet, "p99_ms")}${ms(alone, "p50_ms")}${ms(alone, "p99_ms")}`;
  const count = (n: number) => n.toLocaleString("en-US");
  const lines = [
    `badgebench fleet benchmark: ${count(r.badges)} badges over ${r.spread_ms / 1000} s; the wearers of ${count(r.downloading)} ask, ${count(r.burst)} of them at ${r.ask.at_ms / 1000} s`,
    `${r.ask.spread_ms === 0 ? "all at once" : `within ${r.ask.spread_ms} ms`}; image ${count(r.image_bytes)} bytes; ${describeMachine(r.machine)}`,
    r.badge_link ? `the badge link: a network namespace of its own, ${Object.entries(r.badge_link).map(([key, value]) => `${key.split("/").at(-1)} = ${value}`).join(", ")}` : "the link: the host's loopback",
  ];
  for (const run of r.runs) {
    const f = run.fleet;
    const instances = run.instances_peak_rss_mb.length === 0 ? "server in this process" : `instances' peak RSS ${run.instances_peak_rss_mb.map((mb) => `${count(mb)} MiB`).join(", ")}`;
    lines.push(
      "",
      `${run.setup} (${count(r.badges + run.baseline.badges)} devices added in ${run.devices_added_s} s)`,
      ...f.outcomes.map((o) => `  ${o.outcome.padEnd(16)}${(o.reason ?? "").padEnd(28)}${count(o.count).padStart(8)}`),
      "",
      `  ${"wall ms".padEnd(24)}${"fleet p50".padStart(10)}${"fleet p99".padStart(10)}${"alone p50".padStart(10)}${"alone p99".padStart(10)}`,
      row("update check", f.check, run.baseline.check),
      row("check-in sync", f.sync, run.baseline.sync),
      row("download, to headers", f.download_head, run.baseline.download_head),
      row("download, whole image", f.download, null),
      `  at the server (its own time per request, all instances): update check p50 ${ms(f.server.check, "p50_ms").trim()} ms, p99 ${ms(f.server.check, "p99_ms").trim()} ms (${count(f.server.check?.count ?? 0)}); check-in sync p50 ${ms(f.server.sync, "p50_ms").trim()} ms, p99 ${ms(f.server.sync, "p99_ms").trim()} ms`,
      `  ${count(f.updated)} badges run the release after ${f.wall_s} s; max concurrent downloads ${count(f.max_concurrent_downloads)}; start lag p99 ${figure(f.start_lag_p99_ms)} ms`,
      `  downloads: ${costText(f.downloads)}`,
      ...(run.without_resume ? [`  without resume: ${costText(run.without_resume.downloads)}; ${count(run.without_resume.updated)} run the release after ${run.without_resume.wall_s} s`] : []),
      `  simulator's peak RSS ${count(f.peak_rss_mb)} MiB; ${instances}`,
      `  event loop delay p99: badges' threads ${figure(f.loop_delay_p99_ms.badges)} ms, caller's thread ${figure(f.loop_delay_p99_ms.caller)} ms`,
      `  ${run.valid ? "completed: every badge updated or checked in" : "INVALID: some badges did not end well (see the outcomes)"}`,
    );
  }
  lines.push("", `benchmark process's peak RSS (VmHWM) ${count(r.peak_rss_mb)} MiB`);
  return lines;
}

await main();
