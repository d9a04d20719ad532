// `badgebench hil run SCENARIOS... --rig FILE`: plays scenario files on the real badge a rig file
// describes, through its serial console (hil/serial-target.ts), with its power relay for power
// faults and the model as oracle on every console event; reported like `sim run` (progress
// lines, summary, --junit, --json).
//
// A real badge keeps its device token in NVS, so the scenario cannot be given a new device: the
// rig's device must already exist on the rig's server, and the rig file must name the server's
// data directory (`server.dataDir`), which is how the run reads the device and the releases.
// Each scenario is then prepared on what is there, as `sim run --server` does: a scenario is
// SKIPPED, with the reason, when the server offers the badge another release than the scenario
// names, when the scenario needs a revoked token and the rig has no `provision` command (it
// would leave the rig's badge unprovisioned), when it unplugs USB power on a rig without a USB
// power relay (`usbPower`; with one relay, that relay is all the badge's power and `power.plug`
// switches it on), when it plugs in on a rig without a relay, or when the server no longer
// accepts the rig's token. The badge is restarted (`reboot`) at the start of each scenario; a
// badge not running the scenario's starting version is an error that says to flash it, unless
// the rig has a `setup` command, which brings it there (version, supply) and is run only when the
// badge does not stand where the next scenario starts. Without one, battery and USB power cannot
// be set on a real badge and are taken as they are.
//
// Every badge is locked first (hil/badge-lock.ts; busy: exit 4, or wait up to --wait). A rig
// file naming several badges (a farm) needs --parallel: the scenarios are spread over them
// (hil/farm.ts), one progress view, one JUnit and one HTML report naming each case's badge.
// --retries plays a failed scenario again; one that passes on a retry is flaky. With a report,
// each case gets attachments (transcript, timeline, the offered image's SHA-256). The badge's
// per-badge target and preparation live in hil-badge.ts.
//
// A revoked token, as a QA engineer does it on a bench: a device of its own for the scenario is
// added beside the rig's (same mode, room and model) and revoked at once, the rig's `provision`
// command writes its token into the badge, and when the scenario is over the same command
// writes the rig's token back, so the bench is as it was and its rig file still right.
import fs from "node:fs";
import path from "node:path";
import { formatObservations } from "../../badge-sim/reports/junit.ts";
import { counted } from "../../badge-sim/reports/text.ts";
import { startingPower, type Scenario } from "../../badge-sim/runners/scenario.ts";
import { DEFAULT_STALL_TIMEOUT_MS, runScenario, type ScenarioResult } from "../../badge-sim/runners/scenario-runner.ts";
import { UnreachableError } from "../../badge-sim/network/unreachable.ts";
import { BadgeBusyError, lockBadges, type BadgeLock } from "../../hil/badge-lock.ts";
import { playOnFarm } from "../../hil/farm.ts";
import { connectPowerRelay } from "../../hil/power-relay.ts";
import { loadRigFile, type Rig, type RigBadge } from "../../hil/rig-file.ts";
import { connectSimServer, SimSetupError, type SimServer } from "../harness/sim-server.ts";
import { EXIT } from "./exit-codes.ts";
import { prepareOnRig, realBadgeTarget, type RigRelays, type TryRecord } from "./hil-badge.ts";
import { playScenarioFiles, scenarioFiles } from "./sim-run.ts";

export interface HilRunOptions {
  /** scenario files, or directories whose *.json files are scenarios */
  files: string[];
  /** the rig file (fixtures/rigs/*.json) */
  rig: string;
  /** a serial port path instead of the rig file's `port` (e.g. from BADGE_PORT); a one-badge rig only */
  port?: string;
  junit?: string;
  /** write the HTML report (summary, then each scenario's timeline) to this file */
  html?: string;
  json: boolean;
  interactive: boolean;
  /** where session transcripts are saved (default var/transcripts) */
  transcriptDir?: string;
  /** spread the scenarios over every badge of the rig file (a farm) */
  parallel?: boolean;
  /** seconds to wait for a badge another run holds (default 0: fail at once) */
  waitS?: number;
  /** how often a failed scenario is played again; one that then passes is flaky */
  retries?: number;
}

/** Exit codes: scripts/cli/exit-codes.ts (0 passed, 1 failed or errored, 2 bad input, 3 server unreachable, 4 a badge in use, 5 nothing ran). */
export async function runHilRun(options: HilRunOptions): Promise<number> {
  const retries = options.retries ?? 0;
  if (!Number.isInteger(retries) || retries < 0) throw new SimSetupError(`--retries takes a whole number of retries, 0 or more (got ${options.retries})`, EXIT.usage);
  const waitS = options.waitS ?? 0;
  if (!Number.isFinite(waitS) || waitS < 0) throw new SimSetupError(`--wait takes the seconds to wait for a badge in use, 0 or more (got ${options.waitS})`, EXIT.usage);
  const rig = checkedRig(options);
  let files: string[];
  try {
    files = scenarioFiles(options.files);
  } catch (error) {
    throw new SimSetupError(`${(error as Error).message}; name scenario files or a directory that holds some (e.g. fixtures/scenarios)`, EXIT.nothingRan);
  }
  await checkReachable(rig.server.url);
  let locks: BadgeLock[];
  try {
    locks = await lockBadges(rig.badges, { waitS, say: (message) => process.stderr.write(`${message}\n`) });
  } catch (error) {
    if (error instanceof BadgeBusyError) throw new SimSetupError(error.message, EXIT.busy);
    throw error;
  }
  const benches: RigBench[] = [];
  let server: SimServer | null = null;
  try {
    server = await connectSimServer(rig.server.url, rig.server.dataDir!);
    const transcriptDir = options.transcriptDir ?? path.resolve("var/transcripts");
    fs.mkdirSync(transcriptDir, { recursive: true });
    const report = options.junit ?? options.html;
    const attachmentDir = report && path.resolve(`${report.replace(/\.[a-z]+$/i, "")}-attachments`);
    for (const badge of rig.badges) benches.push(await openBench(rig, badge, { port: options.port, transcriptDir, server }));
    const suiteName = rig.badges.length > 1 ? `badgebench scenarios on rig ${rig.name} (${counted(rig.badges.length, "badge")})` : `badgebench scenarios on rig ${rig.name}`;
    return await playScenarioFiles({ ...options, files, jsonObject: "hil_run", suiteName }, async (scenarios, progress) =>
      playOnFarm(scenarios, {
        badges: benches,
        retries,
        benchOf: (scenario) => `${scenario.badge.version} ${benchSupply(scenario)}`,
        play: (bench, scenario, setUp) => bench.play(scenario, setUp, attachmentDir),
        onStart: (bench, scenario) => progress.starting(scenario, rig.badges.length > 1 ? bench.name : undefined),
        onResult: (result) => progress.finished(rig.badges.length > 1 ? result : { ...result, badge: undefined }),
      }).then((results) => (rig.badges.length > 1 ? results : results.map((result) => ({ ...result, badge: undefined })))),
    );
  } finally {
    for (const bench of benches) await bench.close();
    await server?.close();
    await Promise.all(locks.map((lock) => lock.release()));
  }
}

/** The volts and supply a scenario starts on, as a setup command's {mv} and {power}. */
const benchSupply = (scenario: Scenario) => `${Math.round(scenario.badge.battery.volts * 1000)} ${startingPower(scenario)}`;

/** One badge of the rig with what drives it: its relays, its target, how a scenario is prepared on it. */
interface RigBench {
  name: string;
  play(scenario: Scenario, setUp: boolean, attachmentDir: string | undefined): Promise<ScenarioResult>;
  close(): Promise<void>;
}

async function openBench(rig: Rig, badge: RigBadge, options: { port?: string; transcriptDir: string; server: SimServer }): Promise<RigBench> {
  const relays: RigRelays = { power: null, usb: null };
  const connect = (relay: { broker: string; topic: string }) => connectPowerRelay({ brokerUrl: relay.broker, topic: relay.topic });
  relays.power = badge.power ? await connect(badge.power) : null;
  relays.usb = badge.usbPower ? await connect(badge.usbPower) : null;
  // what the current try recorded, for its attachments
  const tried: TryRecord = { transcript: null, imageSha256: null, imageBytes: null, setUp: false, holds: { id: null, token: badge.deviceToken } };
  const target = realBadgeTarget(rig, badge, { port: options.port, relays, transcriptDir: options.transcriptDir, tried });
  const prepare = prepareOnRig(rig, badge, options.server, tried);
  let tries = 0;
  return {
    name: badge.name,
    async play(scenario, setUp, attachmentDir) {
      Object.assign(tried, { transcript: null, imageSha256: null, imageBytes: null, setUp });
      const result = await runScenario(scenario, prepare, {
        target,
        // The badge's NVS points at the rig's proxy, so the proxy runs for every scenario, where the rig says.
        faultProxy: badge.proxy ? { host: badge.proxy.host, port: badge.proxy.port } : undefined,
        // A real badge's own stall timeout is what it is; this only sizes the proxy's patience.
        stallTimeoutMs: DEFAULT_STALL_TIMEOUT_MS,
      });
      const attachments = attachmentDir && result.outcome !== "skipped" ? writeAttachments(path.join(attachmentDir, `${badge.name}-${++tries}-${slug(scenario.name)}`), result, tried) : [];
      return { ...result, attachments };
    },
    async close() {
      await relays.power?.close();
      await relays.usb?.close();
    },
  };
}

/** The files that go with a try in the reports: its serial transcript, its timeline (power, proxy, console), the offered image's SHA-256. */
function writeAttachments(dir: string, result: ScenarioResult, tried: { transcript: string | null; imageSha256: string | null }): Array<{ name: string; path: string }> {
  fs.mkdirSync(dir, { recursive: true });
  const attachments: Array<{ name: string; path: string }> = [];
  const add = (name: string, write: (file: string) => void) => {
    const file = path.join(dir, name);
    write(file);
    attachments.push({ name, path: file });
  };
  if (tried.transcript && fs.existsSync(tried.transcript)) add("transcript.txt", (file) => fs.copyFileSync(tried.transcript!, file));
  if (result.observations.length > 0) add("timeline.txt", (file) => fs.writeFileSync(file, `${formatObservations(result.observations)}\n`));
  if (tried.imageSha256) add("image.sha256", (file) => fs.writeFileSync(file, `${tried.imageSha256}\n`));
  return attachments;
}

const slug = (name: string) => name.replace(/[^A-Za-z0-9]+/g, "-").replace(/^-|-$/g, "").slice(0, 60);

/** The rig file, refused (exit 2) when it cannot be used: before anything is opened or changed. */
function checkedRig(options: HilRunOptions): Rig {
  let rig: Rig;
  try {
    rig = loadRigFile(options.rig);
  } catch (error) {
    throw new SimSetupError((error as Error).message, EXIT.usage);
  }
  if (!rig.server.dataDir) {
    throw new SimSetupError(`${rig.file}: server.dataDir is needed for hil run: the data directory of the server at ${rig.server.url}, to read the badge's device and the releases`, EXIT.usage);
  }
  if (rig.badges.length > 1 && !options.parallel) {
    throw new SimSetupError(`${rig.file} names ${rig.badges.length} badges: add --parallel to spread the scenarios over them`, EXIT.usage);
  }
  if (rig.badges.length > 1 && options.port) throw new SimSetupError(`--port replaces the port of a one-badge rig; ${rig.file} names ${rig.badges.length} badges, each with its port`, EXIT.usage);
  for (const [index, badge] of rig.badges.entries()) {
    // hil run reads the fleet with a test-mode key, which sees test-mode devices only
    if (badge.deviceToken.startsWith("dtk_live_")) {
      const field = rig.badges.length > 1 ? `badges[${index}].deviceToken` : "server.deviceToken";
      throw new SimSetupError(`${rig.file}: ${field} is a live-mode token, and hil run works in test mode: add the rig's badge with \`badgebench devices add\` (test mode) and put its dtk_test_ token in ${rig.file}`, EXIT.usage);
    }
    const port = options.port ?? badge.port;
    if (typeof port === "string" && !fs.existsSync(port)) {
      const from = options.port ? "--port" : `${rig.file}: port${rig.badges.length > 1 ? ` of ${badge.name}` : ""}`;
      throw new SimSetupError(`${from} ${port} does not exist: plug the badge in (or start badgebench sim serial on the other end of the pty), or give its path (badgebench hil ports lists them)`, EXIT.usage);
    }
  }
  return rig;
}

/** Exit 3 with one line naming the URL and the cause when the rig's server does not answer. */
async function checkReachable(url: string): Promise<void> {
  let response: Response;
  try {
    response = await fetch(new URL("/fleet", url), { signal: AbortSignal.timeout(10_000) });
  } catch (error) {
    throw new SimSetupError(`${new UnreachableError(url, error).message}: start the server (badgebench serve) or correct server.url in the rig file`, EXIT.unreachable);
  }
  await response.body?.cancel();
  if (!response.ok) throw new SimSetupError(`${url} answered ${response.status} for /fleet: is it a badgebench server? correct server.url in the rig file`, EXIT.unreachable);
}
