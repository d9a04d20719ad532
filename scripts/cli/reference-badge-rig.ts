// Runs the rig against the reference badge (issue 15): `badgebench hil run` plays scenario files
// on the C badge of firmware/reference-badge exactly as on a real one. The bench is built here:
//
// - the badge: `make` builds the host program; it runs on the device end of a socat pty pair,
//   and `hil run`'s rig file names the other end as the badge's port;
// - its power: two Tasmota-style relays on MQTT (`cmnd/<topic>/POWER`, answered on
//   `stat/<topic>/POWER`; topics `reference-badge-<random>` and `...-usb`), one on its battery
//   and one on its USB power. The badge process runs
//   while either is on: the first switched on starts it, the last switched off kills it with
//   SIGKILL, and the USB relay's state is what the badge's VBUS sense reads (its `--usb` file),
//   so power cuts, unplugging and plugging in go through hil/power-relay.ts and the broker as on
//   a real bench;
// - its bench supply: the volts the scenario starts with and whether its USB power is plugged
//   in, charging or not, written by the rig file's `setup` command (supply.txt) and read by the
//   relay as it starts the badge;
// - its provisioning: the rig file's `provision` command is `reference-badge provision` on its
//   NVS file, run with both relays off, so `hil run` can give it a revoked token and its own back;
// - the server: one in this process (scripts/harness/sim-server.ts), publishing what the run's
//   scenarios say (`server.published`, `server.release`); started again only for a run that
//   wants other releases than the run before;
// - the network: the badge's NVS points at the fault proxy `hil run` starts for every scenario.
//
// One `hil run` plays every scenario that wants the same server, the same trusted release keys
// and the same partition-switch hold (`runsOf`): its rig file's `setup` command (setupScriptText)
// brings the badge to each scenario's start when it does not stand there already (hil/farm.ts:
// after a scenario that leaves it on another version or with a failed update's download
// checkpoint in NVS, or on another version or supply): with the relays off, the supply written,
// the starting version flashed and NVS written afresh with the token of a new device on the
// server, as QA would on a bench. A `hil run` process per group of scenarios cost each group
// its start (the CLI loaded, the broker and the server's store connected), a third of the whole.
//
// Usage: npx tsx scripts/cli/reference-badge-rig.ts [SCENARIOS...] [--json] [--link-kib-s 64] [--clock-factor 1] [--work DIR]
// (default: every file in fixtures/scenarios; --work keeps the flash, NVS, badge log and
// transcripts in DIR; --clock-factor runs the badge's clock that many times faster than the wall,
// and the rig file says so, so `hil run` scales its waits). Exit 1 when a scenario failed or errored.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import mqtt, { type MqttClient } from "mqtt";
import { loadScenario, startingPower, type Scenario } from "../../badge-sim/runners/scenario.ts";
import { buildAppImage } from "../../firmware/index.ts";
import { openPtyPair } from "../../hil/pty-pair.ts";
import { TOKEN_PLACEHOLDER, VERSION_PLACEHOLDER } from "../../hil/rig-file.ts";
import { CLI, ROOT } from "../bench/bench-common.ts";
import { scenarioFiles, simReleaseOf } from "./sim-run.ts";
import { scenarioPublicKey, type ScenarioKeyName } from "../../badge-sim/runners/scenario-keys.ts";
import { startSimServer, type SimServer } from "../harness/sim-server.ts";
import { counted } from "../../badge-sim/reports/text.ts";

export const BADGE_DIR = path.join(ROOT, "firmware/reference-badge");
const BADGE = path.join(BADGE_DIR, "build/reference-badge");
// Topics of this run's own: on a shared broker, another bench's commands must not switch this badge.
const RELAY_TOPIC = `reference-badge-${crypto.randomBytes(4).toString("hex")}`;
const USB_RELAY_TOPIC = `${RELAY_TOPIC}-usb`;
/** the badge's starting image; the fleet's older releases are only there to be known */
export const IMAGE_BYTES = 256 * 1024;
export const HISTORY_IMAGE_BYTES = 64 * 1024;

/** What one `hil run` of the rig shares: the server's releases, the firmware's keys, the badge's switch hold and clock. */
export interface RunBench {
  published: string[];
  release: Scenario["server"]["release"];
  clockFactor: number;
  /** the release keys the flashed firmware trusts */
  trustedKeys: ScenarioKeyName[];
  /** the badge waits in the partition switch for its power to be cut (holdSwitchArgs): a scenario cuts it there */
  holdSwitch: boolean;
}

/**
 * How long (wall ms) the badge waits in the partition switch, after the otadata erase, for a cut
 * during the switch (`--hold-switch`, host.c): the relay's latency must stay below it. Without it
 * the switch's window is the 45 ms erase, 4.5 ms at 10x, shorter than a relay on a busy machine.
 */
export const SWITCH_HOLD_WALL_MS = 1000;

/** `--hold-switch` for a badge whose clock runs `clockFactor` times faster: SWITCH_HOLD_WALL_MS of wall time. */
export const holdSwitchArgs = (clockFactor: number) => ["--hold-switch", String(SWITCH_HOLD_WALL_MS * clockFactor)];

/**
 * A scenario's run bench. Every one runs at the rig's clock factor: a cut at a byte lands on time
 * at any speed (the fault proxy holds the download at the end of the cut's window until the power
 * is gone: hil/target-strategies.ts, RelayPower.armBrownout); a cut during the partition switch
 * has no bytes to hold, so its badge waits in the switch (holdSwitchArgs) until the cut comes, and
 * only there: a switch nobody cuts would wait as long.
 */
export function runBenchFor(scenario: Scenario, clockFactor = 1): RunBench {
  const { badge, server } = scenario;
  return {
    published: server.published,
    release: server.release,
    clockFactor,
    trustedKeys: badge.trustedKeys,
    holdSwitch: scenario.faults.power.some((fault) => "during" in fault),
  };
}

/** The scenarios by the `hil run` that plays them, in the order each run first appears; each scenario with its place in `scenarios`. */
export function runsOf<S extends Scenario>(scenarios: S[], clockFactor = 1): Array<{ bench: RunBench; scenarios: Array<{ index: number; scenario: S }> }> {
  const runs = new Map<string, { bench: RunBench; scenarios: Array<{ index: number; scenario: S }> }>();
  for (const [index, scenario] of scenarios.entries()) {
    const bench = runBenchFor(scenario, clockFactor);
    const key = JSON.stringify(bench);
    if (!runs.has(key)) runs.set(key, { bench, scenarios: [] });
    runs.get(key)!.scenarios.push({ index, scenario });
  }
  return [...runs.values()];
}

/**
 * The badge's setup command as a shell script (`setup.sh VERSION MV POWER TOKEN`): the supply
 * for its relay, the version's image from `imagesDir` flashed, NVS written afresh with the token
 * of the device hil run gave it; each setup adds a line to `setupsLog` when there is one.
 */
export function setupScriptText(options: { badge: string; dir: string; imagesDir: string; badgeUrl: string; setupsLog?: string; failFirst?: { version: string; mark: string } }): string {
  const quote = (text: string) => `'${text.replaceAll("'", "'\\''")}'`;
  const failFirst = options.failFirst
    ? `if [ "$1" = ${quote(options.failFirst.version)} ] && mkdir ${quote(options.failFirst.mark)} 2>/dev/null; then echo "the flash of $1 failed (on purpose, once: --flaky-setup)" >&2; exit 1; fi\n`
    : "";
  const logged = options.setupsLog ? `echo "$1 $2 $3" >> ${quote(options.setupsLog)}\n` : "";
  return `#!/bin/sh
# setup.sh VERSION MV POWER TOKEN: the bench of ${path.basename(options.dir)} (scripts/cli/reference-badge-rig.ts)
set -e
printf '%s %s\\n' "$2" "$3" > ${quote(path.join(options.dir, "supply.txt"))}
${failFirst}${quote(options.badge)} flash --flash ${quote(path.join(options.dir, "flash.bin"))} ${quote(options.imagesDir)}/badge-"$1".bin > /dev/null
rm -f ${quote(path.join(options.dir, "nvs.txt"))}
${quote(options.badge)} provision --nvs ${quote(path.join(options.dir, "nvs.txt"))} --server ${quote(options.badgeUrl)} --token "$4" > /dev/null
${logged}`;
}

/** What USB power gives the badge when its relay is on: the `--usb` file's word. */
export type UsbSupply = "charging" | "external";

export interface ProcessRelayOptions {
  brokerUrl: string;
  /** the battery relay's topic */
  topic: string;
  /** the USB power relay's topic */
  usbTopic: string;
  /** the badge's `--usb` file: `charging` or `external` while the USB relay is on, `none` while off */
  usbFile: string;
  /** the bench supply file (`<mv> <power>`, as the setup command writes it): USB power is `external` when its power word says so, else `charging` */
  supplyFile: string;
  start: () => ChildProcess;
}

/**
 * Two relays as Tasmota speaks them, powering one process: the badge runs while the battery or
 * the USB relay is on (switching one on starts it if it is not running), and switching the last
 * one off kills it with SIGKILL (a power cut). The USB relay's state is written to the badge's
 * `--usb` file, which it reads as its VBUS sense. ON, OFF, or an empty command (a question) on
 * `cmnd/<topic>/POWER`; every answer is a non-retained `stat/<topic>/POWER`. Commands are handled
 * one at a time, in the order they came.
 */
export class ProcessRelay {
  readonly topics: { battery: string; usb: string };
  /** process starts and kills that MQTT commands made (a power cut is one kill) */
  readonly switched = { on: 0, off: 0 };
  #client: MqttClient;
  #options: ProcessRelayOptions;
  #contacts = { battery: false, usb: false };
  #child: ChildProcess | null = null;
  #exited: Promise<void> = Promise.resolve();
  #queue: Promise<void> = Promise.resolve();
  /** what the `--usb` file holds */
  #usbSense = "";

  private constructor(client: MqttClient, options: ProcessRelayOptions) {
    this.#client = client;
    this.#options = options;
    this.topics = { battery: options.topic, usb: options.usbTopic };
  }

  static async connect(options: ProcessRelayOptions): Promise<ProcessRelay> {
    const client = await mqtt.connectAsync(options.brokerUrl, { connectTimeout: 5000, reconnectPeriod: 0 });
    const relay = new ProcessRelay(client, options);
    relay.#writeUsb();
    const contactOf: Record<string, "battery" | "usb"> = { [`cmnd/${options.topic}/POWER`]: "battery", [`cmnd/${options.usbTopic}/POWER`]: "usb" };
    client.on("message", (received, payload) => {
      const contact = contactOf[received];
      if (!contact) return;
      relay.#queue = relay.#queue.then(() => relay.#command(contact, payload.toString().trim().toUpperCase()));
    });
    await client.subscribeAsync(Object.keys(contactOf), { qos: 1 });
    return relay;
  }

  /** the badge process runs */
  get isOn(): boolean {
    return this.#child !== null;
  }

  /** Switches one relay; resolves once the process has started or is gone, as that switch makes it. */
  async set(contact: "battery" | "usb", on: boolean): Promise<void> {
    this.#contacts[contact] = on;
    const powered = this.#contacts.battery || this.#contacts.usb;
    if (!powered) await this.#kill();
    // the VBUS sense follows the USB relay; a process killed first never saw it go
    this.#writeUsb();
    if (powered) this.#start();
  }

  /** Both relays off: the process is gone before this resolves. */
  async off(): Promise<void> {
    await this.set("battery", false);
    await this.set("usb", false);
  }

  async close(): Promise<void> {
    await this.#queue;
    await this.off();
    await this.#client.endAsync();
  }

  /**
   * Writes the VBUS sense when it changes, replacing the file at once: the badge reads it before
   * every read of a download, and a file caught truncated would read as USB power gone.
   */
  #writeUsb(): void {
    const supply = readSupply(this.#options.supplyFile).usb;
    const sense = `${this.#contacts.usb ? supply : "none"}\n`;
    if (sense === this.#usbSense) return;
    fs.writeFileSync(`${this.#options.usbFile}.new`, sense);
    fs.renameSync(`${this.#options.usbFile}.new`, this.#options.usbFile);
    this.#usbSense = sense;
  }

  #start(): void {
    if (this.#child) return;
    const child = this.#options.start();
    this.#child = child;
    this.#exited = new Promise((resolve) => child.once("close", () => resolve()));
    child.once("close", () => {
      if (this.#child === child) this.#child = null;
    });
    // a badge that cannot start stays off, as a relay whose load is missing
    child.once("error", (error) => console.error(`reference-badge-rig: the badge did not start: ${error.message}`));
  }

  async #kill(): Promise<void> {
    const child = this.#child;
    if (!child) return;
    child.kill("SIGKILL");
    await this.#exited;
    this.#child = null;
  }

  async #command(contact: "battery" | "usb", payload: string): Promise<void> {
    const wasOn = this.isOn;
    if (payload === "ON" || payload === "OFF") await this.set(contact, payload === "ON");
    if (this.isOn && !wasOn) this.switched.on++;
    if (!this.isOn && wasOn) this.switched.off++;
    // not waited for: the next command (the other relay of a cut) is switched at once, as by a
    // relay; QoS 0 as Tasmota answers (its MQTT client publishes nothing else), and a QoS 1
    // answer's PUBACK held the broker's next message to this relay for its delayed ACK (40 ms)
    this.#client.publish(`stat/${this.topics[contact]}/POWER`, this.#contacts[contact] ? "ON" : "OFF", { qos: 0, retain: false });
  }
}

/** A bench supply file: the battery's mV and what USB power gives (3950 charging when there is none yet). */
export function readSupply(file: string): { mv: number; usb: UsbSupply } {
  const [mv, power] = fs.existsSync(file) ? fs.readFileSync(file, "utf8").trim().split(/\s+/) : [];
  return { mv: Number(mv) || 3950, usb: power === "external" ? "external" : "charging" };
}

export async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** One scenario's line of `hil run --json`. */
export interface HilScenarioResult {
  file: string;
  name: string;
  outcome: "passed" | "failed" | "skipped" | "error";
  message: string | null;
  wall_ms: number;
  checks: Array<{ field: string; expected: unknown; observed: unknown; passed: boolean }>;
  /** the badge clock's factor it ran at (set by runReferenceRig) */
  clock_factor?: number;
}

export interface ReferenceRigRun {
  results: HilScenarioResult[];
  /** hil run processes started, one per run bench (runsOf) */
  runs: number;
  /** the setups hil run made: the badge flashed, its supply set and NVS written afresh */
  setups: number;
  /** how often MQTT commands started and killed the badge process (a power cut is one off) */
  relay: { on: number; off: number };
  wallMs: number;
}

export interface ReferenceRigOptions {
  files: string[];
  /** the badge's download speed, KiB/s of badge time (a badge on Wi-Fi: 64) */
  linkKibS?: number;
  /** how many times faster than the wall the badge's clock runs (1: real time) */
  clockFactor?: number;
  brokerUrl?: string;
  /** where the work directory goes (default: a temporary one, removed after) */
  workDir?: string;
  /** hears each run's start */
  onRun?: (index: number, count: number, bench: RunBench, files: string[]) => void;
}

export async function runReferenceRig(options: ReferenceRigOptions): Promise<ReferenceRigRun> {
  const started = performance.now();
  // hil run works in the work directory, so it gets the files by their absolute paths
  const scenarios = scenarioFiles(options.files).map((file) => ({ ...loadScenario(file), file: path.resolve(file) }));
  const linkKibS = options.linkKibS ?? 64;
  const runs = runsOf(scenarios, options.clockFactor ?? 1);
  execFileSync("make", ["--no-print-directory", "-C", BADGE_DIR, "build/reference-badge"], { stdio: ["ignore", "ignore", "inherit"] });

  const work = options.workDir ?? fs.mkdtempSync(path.join(os.tmpdir(), "reference-badge-rig-"));
  fs.mkdirSync(work, { recursive: true });
  const file = (name: string) => path.join(work, name);
  const setupsLog = file("setups.log");
  fs.rmSync(setupsLog, { force: true });
  const badgeLog = fs.openSync(file("badge.log"), "a");
  const pair = await openPtyPair();
  let relay: ProcessRelay | null = null;
  let server: SimServer | null = null;
  /** what the server running now published (runs that want the same play on it) */
  let lastServerSetup = "";
  const results: HilScenarioResult[] = new Array(scenarios.length);
  /** the setups hil run made, counted from setupsLog */
  let setups = 0;
  try {
    const proxyPort = await freePort();
    const brokerUrl = options.brokerUrl ?? process.env.MQTT_URL ?? "mqtt://127.0.0.1:1883";
    // the clock factor and the switch hold: set per run; the supply by the setup command
    const badgeArgs = { clockFactor: 1, holdSwitch: false };
    relay = await ProcessRelay.connect({
      brokerUrl,
      topic: RELAY_TOPIC,
      usbTopic: USB_RELAY_TOPIC,
      usbFile: file("usb.txt"),
      supplyFile: file("supply.txt"),
      start: () =>
        spawn(
          BADGE,
          [
            ...["run", "--console", pair.device, "--flash", file("flash.bin"), "--nvs", file("nvs.txt"), "--mv", String(readSupply(file("supply.txt")).mv), "--usb", file("usb.txt")],
            ...["--link-kib-s", String(linkKibS), "--clock-factor", String(badgeArgs.clockFactor), ...(badgeArgs.holdSwitch ? holdSwitchArgs(badgeArgs.clockFactor) : [])],
          ],
          { stdio: ["ignore", badgeLog, badgeLog] },
        ),
    });
    const badgeUrl = `http://127.0.0.1:${proxyPort}`;
    const setupScript = file("setup.sh");
    for (const [index, run] of runs.entries()) {
      const files = run.scenarios.map(({ scenario }) => scenario.file);
      options.onRun?.(index, runs.length, run.bench, files);
      await relay.off();
      const { bench } = run;
      badgeArgs.clockFactor = bench.clockFactor;
      badgeArgs.holdSwitch = bench.holdSwitch;
      const first = run.scenarios[0]!.scenario;
      // the server as the run's scenarios say: the fleet's history, then the release; the one
      // before it when that published the same (each setup is a new device on it all the same)
      const serverSetup = JSON.stringify({ published: bench.published, release: bench.release && simReleaseOf(first) });
      if (!server || serverSetup !== lastServerSetup) {
        await server?.close();
        server = await startSimServer();
        for (const version of bench.published) await server.publish({ version, size: HISTORY_IMAGE_BYTES });
        if (bench.release) await server.publish(simReleaseOf(first));
        lastServerSetup = serverSetup;
      }
      // every version a scenario of the run starts from, with the keys its firmware trusts
      const imagesDir = file(`images-${index + 1}`);
      fs.mkdirSync(imagesDir, { recursive: true });
      for (const version of new Set(run.scenarios.map(({ scenario }) => scenario.badge.version))) {
        fs.writeFileSync(path.join(imagesDir, `badge-${version}.bin`), buildAppImage({ version, size: IMAGE_BYTES, trustedKeys: bench.trustedKeys.map(scenarioPublicKey) }));
      }
      fs.writeFileSync(setupScript, setupScriptText({ badge: BADGE, dir: work, imagesDir, badgeUrl, setupsLog }));
      // The rig file's own device; each setup makes a new one. The relays stay off: hil run's
      // first setup switches them on, so the badge boots as the rig watches.
      const device = await server.addDevice(`reference badge, run ${index + 1}`);
      const rig = file("rig.json");
      fs.writeFileSync(
        rig,
        JSON.stringify({
          name: "reference-badge",
          port: pair.host,
          clockFactor: bench.clockFactor,
          trustedKeys: bench.trustedKeys,
          power: { broker: brokerUrl, topic: RELAY_TOPIC },
          usbPower: { broker: brokerUrl, topic: USB_RELAY_TOPIC },
          provision: { command: [BADGE, "provision", "--nvs", file("nvs.txt"), "--server", badgeUrl, "--token", TOKEN_PLACEHOLDER], powerOff: true },
          setup: { command: ["sh", setupScript, VERSION_PLACEHOLDER, "{mv}", "{power}", TOKEN_PLACEHOLDER], powerOff: true },
          server: { url: `${server.url}/`, deviceToken: device.token, dataDir: server.dataDir },
          proxy: { host: "127.0.0.1", port: proxyPort },
        }),
      );
      const played = await hilRun(files, rig, work);
      // hil run answers in the order of the files it was given
      for (const [at, { index: place }] of run.scenarios.entries()) results[place] = { ...played[at]!, clock_factor: bench.clockFactor };
    }
  } finally {
    await relay?.close();
    await pair.close();
    await server?.close();
    fs.closeSync(badgeLog);
    setups = fs.existsSync(setupsLog) ? fs.readFileSync(setupsLog, "utf8").split("\n").filter(Boolean).length : 0;
    // a temporary work directory goes whether the run ended or failed
    if (!options.workDir) fs.rmSync(work, { recursive: true, force: true });
  }
  return { results, runs: runs.length, setups, relay: relay ? { ...relay.switched } : { on: 0, off: 0 }, wallMs: performance.now() - started };
}

/** `badgebench hil run FILES --rig RIG --json` in `cwd` (its transcripts go to cwd/var/transcripts). */
async function hilRun(files: string[], rig: string, cwd: string): Promise<HilScenarioResult[]> {
  const child = spawn(process.execPath, [CLI, "hil", "run", ...files, "--rig", rig, "--json"], { cwd, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const code = await new Promise<number | null>((resolve) => child.once("close", resolve));
  try {
    return (JSON.parse(stdout) as { results: HilScenarioResult[] }).results;
  } catch {
    throw new Error(`hil run exited ${code} without its JSON report:\n${stderr || stdout}`);
  }
}

async function main(): Promise<void> {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      json: { type: "boolean", default: false },
      "link-kib-s": { type: "string", default: "64" },
      "clock-factor": { type: "string", default: "1" },
      work: { type: "string" },
    },
  });
  const linkKibS = Number(values["link-kib-s"]);
  if (!(Number.isInteger(linkKibS) && linkKibS > 0)) throw new Error("--link-kib-s takes a whole number of KiB/s above 0");
  const clockFactor = Number(values["clock-factor"]);
  if (!(Number.isInteger(clockFactor) && clockFactor >= 1 && clockFactor <= 1000)) throw new Error("--clock-factor takes a whole number from 1 to 1000");
  const run = await runReferenceRig({
    files: positionals.length > 0 ? positionals : [path.join(ROOT, "fixtures/scenarios")],
    linkKibS,
    clockFactor,
    workDir: values.work && path.resolve(values.work),
    onRun: (index, count, bench, files) => {
      const keys = bench.trustedKeys.length > 0 ? `, keys ${bench.trustedKeys.join(", ")}` : "";
      if (!values.json) console.error(`hil run ${index + 1}/${count}: clock ${bench.clockFactor}x${bench.holdSwitch ? ", switch held" : ""}${keys}: ${files.map((file) => path.basename(file)).join(", ")}`);
    },
  });
  const count = (outcome: HilScenarioResult["outcome"]) => run.results.filter((result) => result.outcome === outcome).length;
  const summary = {
    scenarios: run.results.length,
    passed: count("passed"),
    failed: count("failed"),
    errors: count("error"),
    skipped: count("skipped"),
    runs: run.runs,
    setups: run.setups,
    relay: run.relay,
    clock_factor: clockFactor,
    wall_ms: Math.round(run.wallMs),
    machine: `${os.cpus().length} cores, node ${process.version}`,
  };
  if (values.json) {
    console.log(JSON.stringify({ object: "reference_badge_rig", ...summary, results: run.results }));
  } else {
    for (const result of run.results) {
      const failed = result.checks.filter((check) => !check.passed).map((check) => `${check.field}: expected ${JSON.stringify(check.expected)}, observed ${JSON.stringify(check.observed)}`);
      console.log(`${result.outcome.toUpperCase().padEnd(7)} ${result.name} (${Math.round(result.wall_ms)} ms)${result.message ? `: ${result.message}` : ""}${failed.length ? `\n  ${failed.join("\n  ")}` : ""}`);
    }
    console.log(
      `${counted(summary.scenarios, "scenario")} on the reference badge: ${summary.passed} passed, ${summary.failed} failed, ${counted(summary.errors, "error")}, ${summary.skipped} skipped; ` +
        `${counted(summary.runs, "hil run")}, ${counted(summary.setups, "setup")}, relay ${counted(summary.relay.off, "time")} off; ${(summary.wall_ms / 1000).toFixed(1)} s wall, badge clock at ${clockFactor}x (${summary.machine})`,
    );
  }
  process.exitCode = summary.failed + summary.errors > 0 ? 1 : 0;
}

if (process.argv[1] && path.resolve(process.argv[1]) === path.resolve(import.meta.filename)) {
  main().catch((error: unknown) => {
    console.error(`reference-badge-rig: ${(error as Error).message}`);
    process.exitCode = 1;
  });
}
