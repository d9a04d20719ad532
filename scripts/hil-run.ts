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
// badge not running the scenario's starting version is an error that says to flash it. Battery
// and USB power cannot be set on a real badge and are taken as they are.
//
// A revoked token, as a QA engineer does it on a bench: a device of its own for the scenario is
// added beside the rig's (same mode, room and model) and revoked at once, the rig's `provision`
// command writes its token into the badge, and when the scenario is over the same command
// writes the rig's token back, so the bench is as it was and its rig file still right.
import { execFile } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import type { BadgeTargetFactory } from "../badge-sim/badge-target.ts";
import { DEFAULT_STALL_TIMEOUT_MS, runScenario, type PrepareScenario } from "../badge-sim/scenario-runner.ts";
import { ModelOracle } from "../hil/model-oracle.ts";
import { connectPowerRelay, type PowerRelay } from "../hil/power-relay.ts";
import { loadRigFile, TOKEN_PLACEHOLDER, type Rig } from "../hil/rig-file.ts";
import { SerialConsole } from "../hil/serial-console.ts";
import { SerialTarget, SerialTargetError } from "../hil/serial-target.ts";
import { authenticateDevice, createDevice, revokeDevice, type DeviceRow } from "../server/services/devices.ts";
import { openStore, type Store } from "../server/store/database.ts";
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
  const relays: RigRelays = { power: null, usb: null };
  try {
    relays.power = rig.power ? await connectPowerRelay({ brokerUrl: rig.power.broker, topic: rig.power.topic }) : null;
    relays.usb = rig.usbPower ? await connectPowerRelay({ brokerUrl: rig.usbPower.broker, topic: rig.usbPower.topic }) : null;
    const transcriptDir = options.transcriptDir ?? path.resolve("var/transcripts");
    fs.mkdirSync(transcriptDir, { recursive: true });
    const target = realBadgeTarget(rig, { port: options.port, relays, transcriptDir });
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
    await relays.power?.close();
    await relays.usb?.close();
    await server.close();
  }
}

/** The rig's relays: its power (the battery, when there is a USB one) and its USB power. */
export interface RigRelays {
  power: PowerRelay | null;
  usb: PowerRelay | null;
}

/** The rig's device on the rig's server, as it is: see the header for when a scenario is skipped. */
export function prepareOnRig(rig: Rig, server: SimServer): PrepareScenario {
  return async (scenario) => {
    const revoked = scenario.badge.token === "revoked";
    if (revoked && !rig.provision) {
      return {
        skip: `the scenario revokes the badge's device token, and ${rig.file} has no \`provision\` command to write a token into the badge and the rig's own back after it, so the badge would be left unprovisioned; it runs on the simulated badge only`,
      };
    }
    // With one relay, that relay is the badge's only power: switching it on is plugging in, but
    // nothing leaves the badge running on its battery alone.
    if (!rig.usbPower && scenario.steps.some((step) => step.do === "power.unplug")) {
      return {
        skip: `the scenario unplugs USB power and runs on the battery alone, and ${rig.file} has no USB power relay (\`usbPower\`): its relay cuts all of the badge's power; it runs on the simulated badge only`,
      };
    }
    if (!rig.power && scenario.steps.some((step) => step.do === "power.plug")) {
      return { skip: `the scenario plugs in USB power, and ${rig.file} has no power relay (\`power\`)` };
    }
    const store = await openStore({ dataDir: server.dataDir });
    try {
      const rigDevice = await authenticateDevice(store.db, rig.server.deviceToken);
      if (!rigDevice) return { skip: `the server at ${server.url} does not accept the rig's device token (revoked or unknown); add the badge with \`badgebench devices add\` and put its token in ${rig.file}` };
      // the badge gets a revoked token from the target (realBadgeTarget), which watches it boot with it
      const device = revoked ? await revokedDevice(store.db, rigDevice) : { id: rigDevice.id, token: rig.server.deviceToken };
      const mismatch = await releaseMismatch(server, device.id, scenario);
      if (mismatch !== null) return { skip: `${mismatch} (publish it, or pick the scenarios for this release)` };
      return { serverUrl: server.url, token: device.token, deviceId: device.id, apiKey: server.apiKey, close: async () => {} };
    } finally {
      await store.close();
    }
  };
}

/** A device of the scenario's own beside the rig's (same mode, room and model), revoked at once. */
async function revokedDevice(db: Store["db"], rigDevice: DeviceRow): Promise<{ id: string; token: string }> {
  const mode = rigDevice.livemode === 1 ? "live" : "test";
  const device = await createDevice(db, { mode, room: rigDevice.room, model: rigDevice.model, name: "revoked-token scenario" });
  await revokeDevice(db, device.id);
  return device;
}

/**
 * Writes `token` into the badge's NVS with the rig's provision command, with the relays off
 * while it runs when the rig says so (switched back as they were). The token is not printed.
 */
async function provisionBadge(rig: Rig, relays: RigRelays, token: string): Promise<void> {
  const { command, powerOff, timeoutMs, cwd } = rig.provision!;
  const before = powerOff ? { power: await relays.power!.state(), usb: await relays.usb?.state() } : null;
  if (before) {
    await relays.power!.off();
    await relays.usb?.off();
  }
  try {
    const [program, ...args] = command.map((word) => word.replaceAll(TOKEN_PLACEHOLDER, token));
    await promisify(execFile)(program!, args, { cwd, timeout: timeoutMs, killSignal: "SIGKILL" });
  } catch (error) {
    const failure = error as { code?: unknown; killed?: boolean; stderr?: string; message: string };
    const how = failure.killed ? `did not finish within ${timeoutMs} ms` : typeof failure.code === "number" ? `exited ${failure.code}` : `could not start (${failure.message})`;
    const said = failure.stderr?.trim().split("\n").slice(-5).join("\n");
    throw new SimSetupError(`the provision command of ${rig.file} (${command[0]}) ${how}${said ? `:\n${said}` : ""}`);
  } finally {
    // USB first, so a badge that has it boots on it
    if (before?.usb === "ON") await relays.usb!.on();
    if (before?.power === "ON") await relays.power!.on();
  }
}

/**
 * The rig's badge as a target: its console, reset, checked for the scenario's starting version.
 * For a scenario with another token than the rig's (a revoked one), the rig's provision command
 * writes it into the badge, the console watching the boot that follows (the relays switching the
 * badge back on, or the reset esptool ends with), and the rig's own token goes back in when the
 * session ends; if that fails, every later scenario errs saying so.
 */
export function realBadgeTarget(rig: Rig, options: { port?: string; relays: RigRelays; transcriptDir: string }): BadgeTargetFactory {
  let session = 0;
  let leftWithoutToken: SimSetupError | null = null;
  const giveBackToken = async () => {
    try {
      await provisionBadge(rig, options.relays, rig.server.deviceToken);
    } catch (error) {
      leftWithoutToken = new SimSetupError(`the badge was left without the rig's device token: ${(error as Error).message}; provision it by hand before the next run`);
    }
  };
  return async ({ scenario, token }) => {
    if (leftWithoutToken) throw leftWithoutToken;
    const ownToken = token === rig.server.deviceToken;
    // a command that needs the serial port (esptool) runs before the console opens it
    if (!ownToken && !rig.provision!.powerOff) await provisionBadge(rig, options.relays, token);
    const stamp = new Date().toISOString().replace(/[:.]/g, "-");
    const transcriptPath = path.join(options.transcriptDir, `${stamp}-${++session}-${scenario.name.replace(/[^A-Za-z0-9]+/g, "-")}.txt`);
    let serial: SerialConsole;
    try {
      serial = await SerialConsole.open({ port: options.port ?? rig.port, baudRate: rig.baudRate, transcriptPath });
    } catch (error) {
      if (!ownToken) await giveBackToken();
      throw error;
    }
    const target = new SerialTarget(serial, {
      badge: "real",
      relay: options.relays.power,
      usbRelay: options.relays.usb,
      oracle: new ModelOracle(),
      transcriptPath,
      afterClose: ownToken ? undefined : giveBackToken,
    });
    try {
      if (ownToken) {
        await target.reset();
      } else {
        if (rig.provision!.powerOff) await provisionBadge(rig, options.relays, token);
        await target.awaitBoot(`after the provision command wrote the scenario's token`);
      }
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
