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
// names, when the scenario needs a revoked token (that would unprovision the rig's badge), when
// it unplugs USB power (a rig's relay is all the badge's power; `power.plug` switches it on),
// when it plugs in on a rig without a relay, or when the server no longer accepts the rig's
// token. The badge is restarted (`reboot`) at the start of each scenario; a badge not running
// the scenario's starting version is an error that says to flash it. Battery and USB power
// cannot be set on a real badge and are taken as they are.
import fs from "node:fs";
import path from "node:path";
import type { BadgeTargetFactory } from "../badge-sim/badge-target.ts";
import { DEFAULT_STALL_TIMEOUT_MS, runScenario, type PrepareScenario } from "../badge-sim/scenario-runner.ts";
import { ModelOracle } from "../hil/model-oracle.ts";
import { connectPowerRelay, type PowerRelay } from "../hil/power-relay.ts";
import { loadRigFile, type Rig } from "../hil/rig-file.ts";
import { SerialConsole } from "../hil/serial-console.ts";
import { SerialTarget, SerialTargetError } from "../hil/serial-target.ts";
import { authenticateDevice } from "../server/services/devices.ts";
import { openStore } from "../server/store/database.ts";
import { playScenarioFiles, releaseMismatch, scenarioFiles } from "./sim-run.ts";
import { connectSimServer, SimSetupError, type SimServer } from "./sim-server.ts";

export interface HilRunOptions {
  /** scenario files, or directories whose *.json files are scenarios */
  files: string[];
  /** the rig file (fixtures/rigs/*.json) */
  rig: string;
  /** a serial port path instead of the rig file's `port` (e.g. from BADGE_PORT) */
  port?: string;
  junit?: string;
  /** write the HTML report (summary, then each scenario's timeline) to this file */
  html?: string;
  json: boolean;
  interactive: boolean;
  /** where session transcripts are saved (default var/transcripts) */
  transcriptDir?: string;
}

export async function runHilRun(options: HilRunOptions): Promise<number> {
  const files = scenarioFiles(options.files);
  let rig: Rig;
  try {
    rig = loadRigFile(options.rig);
  } catch (error) {
    throw new SimSetupError((error as Error).message);
  }
  if (!rig.server.dataDir) {
    throw new SimSetupError(`${rig.file}: server.dataDir is needed for hil run: the data directory of the server at ${rig.server.url}, to read the badge's device and the releases`);
  }
  const server = await connectSimServer(rig.server.url, rig.server.dataDir);
  let relay: PowerRelay | null = null;
  try {
    relay = rig.power ? await connectPowerRelay({ brokerUrl: rig.power.broker, topic: rig.power.topic }) : null;
    const transcriptDir = options.transcriptDir ?? path.resolve("var/transcripts");
    fs.mkdirSync(transcriptDir, { recursive: true });
    const target = realBadgeTarget(rig, { port: options.port, relay, transcriptDir });
    const prepare = prepareOnRig(rig, server);
    return await playScenarioFiles({ ...options, files, jsonObject: "hil_run", suiteName: `badgebench scenarios on rig ${rig.name}` }, (scenario) =>
      runScenario(scenario, prepare, {
        target,
        // The badge's NVS points at the rig's proxy, so the proxy runs for every scenario, where the rig says.
        faultProxy: rig.proxy ? { host: rig.proxy.host, port: rig.proxy.port } : undefined,
        // A real badge's own stall timeout is what it is; this only sizes the proxy's patience.
        stallTimeoutMs: DEFAULT_STALL_TIMEOUT_MS,
      }),
    );
  } finally {
    await relay?.close();
    await server.close();
  }
}

/** The rig's device on the rig's server, as it is: see the header for when a scenario is skipped. */
export function prepareOnRig(rig: Rig, server: SimServer): PrepareScenario {
  return async (scenario) => {
    if (scenario.badge.token === "revoked") {
      return { skip: "the scenario revokes the badge's device token, which would leave the rig's badge unprovisioned; it runs on the simulated badge only" };
    }
    // The rig's relay is the badge's only power: switching it on is plugging in, but nothing
    // leaves the badge running on its battery alone.
    if (scenario.steps.some((step) => step.do === "power.unplug")) {
      return { skip: "the scenario unplugs USB power and runs on the battery alone, which a rig cannot do: its relay cuts all of the badge's power; it runs on the simulated badge only" };
    }
    if (!rig.power && scenario.steps.some((step) => step.do === "power.plug")) {
      return { skip: `the scenario plugs in USB power, and ${rig.file} has no power relay (\`power\`)` };
    }
    const store = await openStore({ dataDir: server.dataDir });
    let deviceId: string | undefined;
    try {
      deviceId = (await authenticateDevice(store.db, rig.server.deviceToken))?.id;
    } finally {
      await store.close();
    }
    if (!deviceId) return { skip: `the server at ${server.url} does not accept the rig's device token (revoked or unknown); add the badge with \`badgebench devices add\` and put its token in ${rig.file}` };
    const mismatch = await releaseMismatch(server, deviceId, scenario);
    if (mismatch !== null) return { skip: `${mismatch} (publish it, or pick the scenarios for this release)` };
    return { serverUrl: server.url, token: rig.server.deviceToken, deviceId, apiKey: server.apiKey, close: async () => {} };
  };
}

/** The rig's badge as a target: its console, reset, checked for the scenario's starting version. */
export function realBadgeTarget(rig: Rig, options: { port?: string; relay: PowerRelay | null; transcriptDir: string }): BadgeTargetFactory {
  let session = 0;
  return async ({ scenario }) => {
    const stamp = new Date().toISOString().replace(/[:.]/g, "-");
    const transcriptPath = path.join(options.transcriptDir, `${stamp}-${++session}-${scenario.name.replace(/[^A-Za-z0-9]+/g, "-")}.txt`);
    const serial = await SerialConsole.open({ port: options.port ?? rig.port, baudRate: rig.baudRate, transcriptPath });
    const target = new SerialTarget(serial, { badge: "real", relay: options.relay, oracle: new ModelOracle(), transcriptPath });
    try {
      await target.reset();
      await target.comeToRest();
      if (target.runningVersion() !== scenario.badge.version) {
        throw new SerialTargetError(
          `the badge runs ${target.runningVersion()}; the scenario starts at ${scenario.badge.version} (flash it first: badgebench hil flash)`,
        );
      }
    } catch (error) {
      await target.close().catch(() => {});
      throw error;
    }
    return target;
  };
}
