// Benchmarks POST /api/badge/ota/check: requests per second as a ratio to a bare Express 5
// hello-world route (`app.get("/", (req, res) => res.send("hello"))`) measured in the same run
// with the same autocannon load. Target (issue 12): ratio at least 0.6. Each server's CPU time
// per request (all its threads, from /proc) is reported beside the rates: on a machine shared
// with other jobs it moves less than they do.
//
// Each request is what a badge sends (`v=1`, `sv=1.3.0`, `fw`, `bat=3.95`, `chg=0`) with one of
// `--devices` device tokens in turn; a release 1.4.0 is published, so every answer is an offer
// (U, B, Z, M, P, L). Both servers run in their own processes (badgebench exactly as
// `badgebench serve --sync <mode>` starts it) and are loaded alternately, `--rounds` times each;
// the figures are the medians. A check writes the badge's report to its devices row, so the
// SQLite sync mode matters: run with `--sync full` (the default) and `--sync normal`.
// Everything runs on 127.0.0.1 in a temporary directory that is deleted at the end.
// Usage: npx tsx scripts/bench/bench-ota-check.ts [--sync full|normal] [--devices 20] [--connections 50]
//          [--duration 10] [--warmup 2] [--rounds 3] [--cpu-prof DIR] [--json]
import path from "node:path";
import { BADGE_PATHS } from "../../firmware/index.ts";
import { openStore, type SyncMode } from "../../server/store/database.ts";
import { countDevicesOffered } from "../../server/store/devices-store.ts";
import { badgeStatusLines, prepareBadgeBench, RELEASE_VERSION } from "./bench-badge-setup.ts";
import { benchArgs, CPU_PROF_OPTION, cpuProfDirOf, loadOptions, loadSettingsOf, positiveInt, SYNC_OPTION, syncModeOf, writeReport } from "./bench-cli.ts";
import { commandLine, load, log, round, spawnBadgebench, spawnHello, stopServer, withTempDir, type AutocannonRequest, summarizeRounds, type LoadResult, type RoundsSummary, cpusAndNode, type CpusAndNode } from "./bench-common.ts";

const TARGET_RATIO = 0.6;
const CHECK_PATH = BADGE_PATHS.check;


interface Report {
  figure: "ota_check";
  sync: SyncMode;
  devices: number;
  connections: number;
  duration_s: number;
  warmup_s: number;
  rounds: number;
  machine: CpusAndNode;
  hello: RoundsSummary;
  check: RoundsSummary;
  ratio: number;
  round_ratios: number[];
  target_ratio: number;
  valid: boolean;
  pass: boolean;
  devices_recorded: number;
  command: string;
}


/** One check by hand before the load: the answer must be an offer of the published release. */
async function checkIsOffer(url: string, token: string, md5: string): Promise<void> {
  const res = await fetch(`${url}${CHECK_PATH}`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "text/plain" },
    body: badgeStatusLines(),
  });
  const text = await res.text();
  const lines = text.split("\n");
  if (res.status !== 200 || lines[0] !== "V1" || !lines.includes(`U ${RELEASE_VERSION}`) || !lines.includes(`M ${md5}`)) {
    throw new Error(`the check is not an offer of ${RELEASE_VERSION}: ${res.status}\n${text}`);
  }
}

function table(r: Report): string[] {
  const row = (name: string, s: RoundsSummary) =>
    `  ${name.padEnd(34)}${s.rps.toFixed(1).padStart(10)}${String(s.p50_ms).padStart(9)}${String(s.p99_ms).padStart(9)}${String(s.non2xx + s.errors + s.timeouts).padStart(10)}${String(s.server_cpu_us ?? "-").padStart(13)}`;
  return [
    `badgebench OTA check benchmark: --sync ${r.sync}, ${r.devices} device tokens, ${r.connections} connections,`,
    `${r.duration_s} s (after ${r.warmup_s} s warm-up) per run, ${r.rounds} rounds alternating; medians; ${r.machine.cpus} CPUs, node ${r.machine.node}`,
    "",
    `  ${"".padEnd(34)}${"req/s".padStart(10)}${"p50 ms".padStart(9)}${"p99 ms".padStart(9)}${"failures".padStart(10)}${"server CPU".padStart(13)}`,
    row("Express hello-world GET /", r.hello),
    row(`POST ${CHECK_PATH} (offer)`, r.check),
    "  (server CPU: microseconds of the server process's CPU, all threads, per request answered; medians of the rounds)",
    "",
    `  ratio check/hello ${r.ratio} (rounds: ${r.round_ratios.join(", ")}), target >= ${r.target_ratio}: ${r.pass ? "ok" : r.valid ? "MISSED" : "INVALID (failed requests)"}`,
    `  devices rows updated by checks: ${r.devices_recorded} of ${r.devices}`,
  ];
}

async function main(): Promise<void> {
  const values = benchArgs({ ...SYNC_OPTION, devices: { type: "string", default: "20" }, ...loadOptions({ connections: 50, duration: 10, warmup: 2 }), rounds: { type: "string", default: "3" }, ...CPU_PROF_OPTION });
  const sync = syncModeOf(values.sync);
  const devices = positiveInt("devices", values.devices);
  const rounds = positiveInt("rounds", values.rounds);
  const settings = loadSettingsOf(values);
  const cpuProfDir = cpuProfDirOf(values);

  const report = await withTempDir("badgebench-bench-check-", async (tmp) => {
    log(`preparing ${devices} devices and release ${RELEASE_VERSION}`);
    const bench = await prepareBadgeBench(path.join(tmp, "data"), path.join(tmp, "scratch"), { rooms: 1, studentsPerRoom: 1, devicesPerRoom: devices });
    const server = await spawnBadgebench(bench.dataDir, sync, { cpuProfDir });
    const hello = await spawnHello();
    try {
      await checkIsOffer(server.url, bench.devices[0]!.token, bench.release.md5);
      let next = 0;
      const body = badgeStatusLines();
      const check: AutocannonRequest = {
        method: "POST",
        path: CHECK_PATH,
        headers: { "content-type": "text/plain" },
        body,
        // Every request takes the next device token, so the checks spread over all the badges' rows.
        setupRequest: (req) => ({ ...req, headers: { ...req.headers, authorization: `Bearer ${bench.devices[next++ % devices]!.token}` } }),
      };
      const helloRuns: LoadResult[] = [];
      const checkRuns: LoadResult[] = [];
      for (let i = 0; i < rounds; i++) {
        log(`round ${i + 1}/${rounds}: hello-world`);
        helloRuns.push(await load(`${hello.url}/`, settings, undefined, hello.child.pid));
        log(`round ${i + 1}/${rounds}: ${CHECK_PATH} (${helloRuns.at(-1)!.rps} req/s for hello)`);
        checkRuns.push(await load(server.url, settings, [check], server.child.pid));
        log(`  ${checkRuns.at(-1)!.rps} req/s`);
      }
      await stopServer(server.child);
      const store = await openStore({ dataDir: bench.dataDir });
      const recorded = await countDevicesOffered(store.db, RELEASE_VERSION).finally(() => store.close());

      const h = summarizeRounds(helloRuns);
      const c = summarizeRounds(checkRuns);
      const valid = c.non2xx + c.errors + c.timeouts + h.non2xx + h.errors + h.timeouts === 0;
      const ratio = round(c.rps / h.rps, 3);
      const result: Report = {
        figure: "ota_check",
        sync,
        devices,
        connections: settings.connections,
        duration_s: settings.durationS,
        warmup_s: settings.warmupS,
        rounds,
        machine: cpusAndNode(),
        hello: h,
        check: c,
        ratio,
        round_ratios: checkRuns.map((run, i) => round(run.rps / helloRuns[i]!.rps, 3)),
        target_ratio: TARGET_RATIO,
        valid,
        pass: valid && ratio >= TARGET_RATIO,
        devices_recorded: recorded,
        command: commandLine("bench-ota-check.ts"),
      };
      return result;
    } finally {
      await stopServer(hello.child);
      await stopServer(server.child);
    }
  });
  writeReport(report, values.json, table, cpuProfDir);
}

await main();
