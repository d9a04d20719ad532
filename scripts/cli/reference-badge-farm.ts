// A board farm of reference badges (issue 25): N C badges (firmware/reference-badge's test build)
// on N socat pty pairs, each with its two MQTT relays (ProcessRelay: battery and USB power) and
// its fault proxy, all on one server, described by one farm rig file; one `badgebench hil run
// --parallel` spreads the scenarios over them, locking each badge, and writes one JUnit and one
// HTML report naming the badge of each case.
//
// Each badge's `setup` command (hil run runs it with the relays off when the next scenario starts
// elsewhere than the badge stands) is a shell script of its own: it writes the bench supply (mV
// and what USB power gives) that the relay reads when it starts the badge, flashes the scenario's
// starting version and writes NVS afresh with the badge's server and the token of a new device
// hil run adds for it (so no fleet state carries over from the scenarios before). Scenarios go to
// any badge, so every badge waits SWITCH_HOLD_WALL_MS in each partition switch (holdSwitchArgs):
// a cut during the switch lands there, and a switch nobody cuts takes that much longer. The server publishes
// 1.4.0 (history) and 1.5.0 (the release, with the happy path's note): the scenarios that need
// another server (an image that crashes on boot, no release) are skipped by hil run, saying so.
//
// Usage: npx tsx scripts/cli/reference-badge-farm.ts [SCENARIOS...] [--badges 4] [--retries N]
//   [--junit FILE] [--html FILE] [--work DIR] [--flaky-setup VERSION] [--link-kib-s 64] [--json]
// --flaky-setup makes the farm's first setup for VERSION fail (a flash that failed once), so the
// scenario it was for errs on its first try: with --retries it passes on the next, flaky.
// Prints hil run's output and exits with its code.
import { execFileSync, spawn } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { loadScenario } from "../../badge-sim/runners/scenario.ts";
import { buildAppImage } from "../../firmware/index.ts";
import { openPtyPair, type PtyPair } from "../../hil/pty-pair.ts";
import { TOKEN_PLACEHOLDER, VERSION_PLACEHOLDER } from "../../hil/rig-file.ts";
import { CLI, ROOT } from "../bench/bench-common.ts";
import { startSimServer, type SimServer } from "../harness/sim-server.ts";
import { BADGE_DIR, freePort, HISTORY_IMAGE_BYTES, holdSwitchArgs, IMAGE_BYTES, ProcessRelay, readSupply, setupScriptText } from "./reference-badge-rig.ts";
import { scenarioFiles } from "./sim-run.ts";

/** The test build: the host badge with the `panic` command, linked without PIE (its ELF decodes a backtrace). */
export const FARM_BADGE = path.join(BADGE_DIR, "build/reference-badge-test");

export interface FarmRunOptions {
  files: string[];
  badges: number;
  retries?: number;
  junit?: string;
  html?: string;
  workDir?: string;
  flakySetup?: string;
  linkKibS?: number;
  brokerUrl?: string;
}

export interface FarmRun {
  /** hil run's exit code and its --json report */
  code: number | null;
  report: { results: Array<{ name: string; outcome: string; badge?: string; flaky: boolean; message: string | null; wall_ms: number; attachments?: Array<{ name: string; path: string }> }> } & Record<string, unknown>;
  stderr: string;
  wallMs: number;
  /** the farm's rig file (removed with the work directory unless workDir was given) */
  rigFile: string;
}

export async function runReferenceFarm(options: FarmRunOptions): Promise<FarmRun> {
  const files = scenarioFiles(options.files).map((file) => path.resolve(file));
  execFileSync("make", ["--no-print-directory", "-C", BADGE_DIR, "build/reference-badge-test"], { stdio: ["ignore", "ignore", "inherit"] });
  const work = options.workDir ?? fs.mkdtempSync(path.join(os.tmpdir(), "reference-badge-farm-"));
  fs.mkdirSync(work, { recursive: true });
  const brokerUrl = options.brokerUrl ?? process.env.MQTT_URL ?? "mqtt://127.0.0.1:1883";
  const topic = `reference-farm-${crypto.randomBytes(4).toString("hex")}`;
  const pairs: PtyPair[] = [];
  const relays: ProcessRelay[] = [];
  const logs: number[] = [];
  let server: SimServer | null = null;
  try {
    server = await startSimServer();
    await server.publish({ version: "1.4.0", size: HISTORY_IMAGE_BYTES });
    await server.publish({ version: "1.5.0", size: IMAGE_BYTES, notes: ["Faster card reads"] });
    // every version a scenario starts from, as an image the setup command flashes
    for (const version of new Set(files.map((file) => loadScenario(file).badge.version))) {
      fs.writeFileSync(path.join(work, `badge-${version}.bin`), buildAppImage({ version, size: IMAGE_BYTES }));
    }
    const badges = [];
    for (let index = 1; index <= options.badges; index++) {
      const dir = path.join(work, `badge-${index}`);
      fs.mkdirSync(dir, { recursive: true });
      const pair = await openPtyPair();
      pairs.push(pair);
      const proxyPort = await freePort();
      const device = await server.addDevice(`farm badge ${index}`);
      const file = (name: string) => path.join(dir, name);
      const log = fs.openSync(file("badge.log"), "a");
      logs.push(log);
      const relayTopic = `${topic}-${index}`;
      const relay = await ProcessRelay.connect({
        brokerUrl,
        topic: relayTopic,
        usbTopic: `${relayTopic}-usb`,
        usbFile: file("usb.txt"),
        supplyFile: file("supply.txt"),
        start: () =>
          spawn(
            FARM_BADGE,
            ["run", "--console", pair.device, "--flash", file("flash.bin"), "--nvs", file("nvs.txt"), "--mv", String(readSupply(file("supply.txt")).mv), "--usb", file("usb.txt"), "--link-kib-s", String(options.linkKibS ?? 64), ...holdSwitchArgs(1)],
            { stdio: ["ignore", log, log] },
          ),
      });
      relays.push(relay);
      const badgeUrl = `http://127.0.0.1:${proxyPort}`;
      const setupScript = file("setup.sh");
      const failFirst = options.flakySetup === undefined ? undefined : { version: options.flakySetup, mark: path.join(work, "flaky-setup-failed") };
      fs.writeFileSync(setupScript, setupScriptText({ badge: FARM_BADGE, dir, imagesDir: work, badgeUrl, failFirst }));
      badges.push({
        name: `badge-${index}`,
        port: pair.host,
        power: { broker: brokerUrl, topic: relayTopic },
        usbPower: { broker: brokerUrl, topic: `${relayTopic}-usb` },
        provision: { command: [FARM_BADGE, "provision", "--nvs", file("nvs.txt"), "--server", badgeUrl, "--token", TOKEN_PLACEHOLDER], powerOff: true },
        setup: { command: ["sh", setupScript, VERSION_PLACEHOLDER, "{mv}", "{power}", TOKEN_PLACEHOLDER], powerOff: true },
        proxy: { host: "127.0.0.1", port: proxyPort },
        deviceToken: device.token,
      });
    }
    const rigFile = path.join(work, "farm.json");
    fs.writeFileSync(
      rigFile,
      JSON.stringify({ name: "reference-farm", badges, server: { url: `${server.url}/`, dataDir: server.dataDir }, elf: { path: FARM_BADGE, arch: os.arch() === "arm64" ? "aarch64" : "x86-64" } }, null, 2),
    );
    const args = [CLI, "hil", "run", ...files, "--rig", rigFile, "--parallel", "--json", "--retries", String(options.retries ?? 0)];
    if (options.junit) args.push("--junit", path.resolve(options.junit));
    if (options.html) args.push("--html", path.resolve(options.html));
    const started = performance.now();
    const child = spawn(process.execPath, args, { cwd: work, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, BADGEBENCH_LOCK_DIR: process.env.BADGEBENCH_LOCK_DIR ?? path.join(work, "locks") } });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
    const code = await new Promise<number | null>((resolve) => child.once("close", resolve));
    const wallMs = performance.now() - started;
    let report: FarmRun["report"];
    try {
      report = JSON.parse(stdout);
    } catch {
      throw new Error(`hil run exited ${code} without its JSON report:\n${stderr || stdout}`);
    }
    return { code, report, stderr, wallMs, rigFile };
  } finally {
    for (const relay of relays) await relay.close();
    for (const pair of pairs) await pair.close();
    await server?.close();
    for (const log of logs) fs.closeSync(log);
    if (!options.workDir) fs.rmSync(work, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      badges: { type: "string", default: "4" },
      retries: { type: "string", default: "0" },
      junit: { type: "string" },
      html: { type: "string" },
      work: { type: "string" },
      "flaky-setup": { type: "string" },
      "link-kib-s": { type: "string", default: "64" },
      json: { type: "boolean", default: false },
    },
  });
  const badges = Number(values.badges);
  if (!(Number.isInteger(badges) && badges > 0)) throw new Error("--badges takes a whole number of badges above 0");
  const run = await runReferenceFarm({
    files: positionals.length > 0 ? positionals : [path.join(ROOT, "fixtures/scenarios")],
    badges,
    retries: Number(values.retries),
    junit: values.junit,
    html: values.html,
    workDir: values.work && path.resolve(values.work),
    flakySetup: values["flaky-setup"],
    linkKibS: Number(values["link-kib-s"]),
  });
  if (values.json) console.log(JSON.stringify({ object: "reference_badge_farm", badges, code: run.code, wall_ms: Math.round(run.wallMs), hil_run: run.report }));
  else {
    process.stderr.write(run.stderr);
    for (const result of run.report.results) console.log(`${result.flaky ? "FLAKY" : result.outcome.toUpperCase()} ${result.name} on ${result.badge}${result.message ? `: ${result.message.split("\n")[0]}` : ""}`);
    console.log(`${badges} badges: hil run exited ${run.code} after ${(run.wallMs / 1000).toFixed(1)} s (${os.cpus().length} cores)`);
  }
  process.exitCode = run.code ?? 1;
}

if (process.argv[1] && path.resolve(process.argv[1]) === path.resolve(import.meta.filename)) {
  main().catch((error: unknown) => {
    console.error(`reference-badge-farm: ${(error as Error).message}`);
    process.exitCode = 1;
  });
}
