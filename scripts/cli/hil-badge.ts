// One badge of a rig as `hil run` drives it (scripts/cli/hil-run.ts): how a scenario is prepared
// on the rig's server for it (or skipped, saying why), its console as a BadgeTarget (reset, the
// starting version checked, a revoked token provisioned and the badge's own given back, a panic
// decoded), and the rig's setup command that brings it to a scenario's start.
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import path from "node:path";
import type { BadgeTargetFactory } from "../../badge-sim/runners/badge-target.ts";
import { startingPower, type Scenario } from "../../badge-sim/runners/scenario.ts";
import type { PrepareScenario } from "../../badge-sim/runners/scenario-runner.ts";
import { ModelOracle } from "../../hil/model-oracle.ts";
import { decodeBacktrace, describeCrash, ElfError, type Crash } from "../../hil/panic-decoder.ts";
import type { PowerRelay } from "../../hil/power-relay.ts";
import { TOKEN_PLACEHOLDER, type Rig, type RigBadge } from "../../hil/rig-file.ts";
import { SerialConsole } from "../../hil/serial-console.ts";
import { SerialTarget, SerialTargetError } from "../../hil/serial-target.ts";
import { consolePower, relayPower, simulatedClock, wallClock } from "../../hil/target-strategies.ts";
import { authenticateDevice, createDevice, revokeDevice, type DevicePrincipal } from "../../server/services/devices.ts";
import type { Store } from "../../server/store/database.ts";
import { SimSetupError, type SimServer } from "../harness/sim-server.ts";
import { EXIT } from "./exit-codes.ts";
import { releaseMismatch } from "./sim-run.ts";

/** The rig's relays: its power (the battery, when there is a USB one) and its USB power. */
export interface RigRelays {
  power: PowerRelay | null;
  usb: PowerRelay | null;
}

/** The rig's device on the rig's server, as it is: see the header for when a scenario is skipped. */
export function prepareOnRig(rig: Rig, badge: RigBadge, server: SimServer, tried: TryRecord): PrepareScenario {
  return async (scenario) => {
    const revoked = scenario.badge.token === "revoked";
    // Without the proxy in the badge's path the fault never strikes, and the scenario would fail for nothing.
    if (scenario.faults.network.length > 0 && !badge.proxy) {
      return {
        skip: `the scenario has network faults, and ${rig.file} has no \`proxy\`${of(rig, badge)}: add one and point the badge's server URL at it (sim serial --server, or the URL in its NVS)`,
      };
    }
    // the simulated badge is set up, tokens and power included, by console commands
    if (badge.badge === "real") {
      const skip = realBenchSkip(rig, badge, scenario, revoked);
      if (skip) return { skip };
    }
    // the store hil run opened beside the server: a farm's badges prepare at once, and a
    // connection each of this one process would wait on one another (SimServer.store)
    const { store } = server;
    const rigDevice = await authenticateDevice(store.db, badge.deviceToken);
    if (!rigDevice) return { skip: `the server at ${server.url} does not accept the rig's device token (revoked or unknown); add the badge with \`badgebench devices add\` and put its token in ${rig.file}` };
    // The badge gets a revoked token from the target (realBadgeTarget), which watches it boot
    // with it. The simulated badge starts each scenario as a new device, as the reference
    // badge's rig provisions one per group: its reports and fleet state start empty.
    const simulated = badge.badge === "simulated";
    // A setup that writes a token ({token}) starts the badge as a new device, as a bench
    // provisioned per group does: the fleet state of the scenarios before does not carry over.
    const fresh = tried.setUp && !simulated && setupWritesToken(badge) ? await createDevice(store.db, deviceBeside(rigDevice, `hil ${badge.name} ${scenario.name}`.slice(0, 40))) : null;
    const holds = fresh ?? { id: tried.holds.id ?? rigDevice.id, token: tried.holds.token };
    const device = revoked
      ? await revokedDevice(store.db, rigDevice)
      : simulated
        ? await createDevice(store.db, deviceBeside(rigDevice, `hil ${scenario.name}`.slice(0, 40)))
        : holds;
    const mismatch = await releaseMismatch(server, device.id, scenario);
    // the scenario's own device is revoked when it ends: it is left out of the live fleet
    const close = simulated && !revoked ? async () => void (await revokeDevice(store.db, device.id)) : async () => {};
    if (mismatch !== null) {
      await close();
      if (fresh) await revokeDevice(store.db, fresh.id);
      return { skip: `${mismatch} (publish it, or pick the scenarios for this release)` };
    }
    if (fresh) {
      // the device it replaces leaves the live fleet (never the rig file's own)
      if (tried.holds.id !== null && tried.holds.id !== rigDevice.id) await revokeDevice(store.db, tried.holds.id);
      tried.holds = fresh;
    }
    const offered = await server.targetFor(device.id);
    tried.imageSha256 = offered?.sha256 ?? null;
    tried.imageBytes = offered?.size ?? null;
    return { serverUrl: server.url, token: device.token, deviceId: device.id, apiKey: server.apiKey, close };
  };
}

/** Why a real badge's bench cannot play the scenario (no provision command, no relay for its power steps), or null. */
function realBenchSkip(rig: Rig, badge: RigBadge, scenario: Scenario, revoked: boolean): string | null {
  if (revoked && !badge.provision) {
    return `the scenario revokes the badge's device token, and ${rig.file} has no \`provision\` command${of(rig, badge)} to write a token into the badge and the rig's own back after it, so the badge would be left unprovisioned; it runs on the simulated badge only`;
  }
  // With one relay, that relay is the badge's only power: switching it on is plugging in, but
  // nothing leaves the badge running on its battery alone.
  if (!badge.usbPower && scenario.steps.some((step) => step.do === "power.unplug")) {
    return `the scenario unplugs USB power and runs on the battery alone, and ${rig.file} has no USB power relay (\`usbPower\`)${of(rig, badge)}: its relay cuts all of the badge's power; it runs on the simulated badge only`;
  }
  if (!badge.power && scenario.steps.some((step) => step.do === "power.plug")) {
    return `the scenario plugs in USB power, and ${rig.file} has no power relay (\`power\`)${of(rig, badge)}`;
  }
  // a badge that trusts other keys refuses (or accepts) releases for another reason than the scenario's
  const keys = (names: readonly string[]) => (names.length === 0 ? "none" : [...names].sort().join(", "));
  if (keys(badge.trustedKeys) !== keys(scenario.badge.trustedKeys)) {
    return `the scenario's badge trusts the release keys ${keys(scenario.badge.trustedKeys)} (fixtures/signing-keys), and ${rig.file} says the firmware${of(rig, badge)} trusts ${keys(badge.trustedKeys)} (\`trustedKeys\`); it runs on the simulated badge only`;
  }
  return null;
}

/** A new device in the rig device's mode, room and model. */
function deviceBeside(rigDevice: DevicePrincipal, name: string) {
  return { mode: rigDevice.livemode === 1 ? ("live" as const) : ("test" as const), room: rigDevice.room, model: rigDevice.model, name };
}

/** A device of the scenario's own beside the rig's (same mode, room and model), revoked at once. */
async function revokedDevice(db: Store["db"], rigDevice: DevicePrincipal): Promise<{ id: string; token: string }> {
  const device = await createDevice(db, deviceBeside(rigDevice, "revoked-token scenario"));
  await revokeDevice(db, device.id);
  return device;
}

/**
 * Writes `token` into the badge's NVS with the rig's provision command, with the relays off
 * while it runs when the rig says so (switched back as they were). The token is not printed.
 */
async function provisionBadge(rig: Rig, badge: RigBadge, relays: RigRelays, token: string): Promise<void> {
  const { command, powerOff, timeoutMs, cwd } = badge.provision!;
  const before = powerOff ? { power: await relays.power!.state(), usb: await relays.usb?.state() } : null;
  if (before) {
    await relays.power!.off();
    await relays.usb?.off();
  }
  try {
    const [program, ...args] = command.map((word) => word.replaceAll(TOKEN_PLACEHOLDER, token));
    await promisify(execFile)(program!, args, { cwd, timeout: timeoutMs, killSignal: "SIGKILL" });
  } catch (error) {
    throw new SimSetupError(`the provision command of ${rig.file}${of(rig, badge)} (${command[0]}) ${commandFailure(error, timeoutMs)}`);
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
export function realBadgeTarget(rig: Rig, badge: RigBadge, options: { port?: string; relays: RigRelays; transcriptDir: string; tried: TryRecord }): BadgeTargetFactory {
  let session = 0;
  let leftWithoutToken: SimSetupError | null = null;
  const giveBackToken = async () => {
    try {
      await provisionBadge(rig, badge, options.relays, options.tried.holds.token);
    } catch (error) {
      leftWithoutToken = new SimSetupError(`the badge was left without the rig's device token: ${(error as Error).message}; provision it by hand before the next run`, EXIT.failed);
    }
  };
  if (badge.badge === "simulated") return simulatedRigTarget(rig, badge, options);
  return async ({ scenario, token, faultProxy }) => {
    if (leftWithoutToken) throw leftWithoutToken;
    const ownToken = token === options.tried.holds.token;
    // a command that needs the serial port (esptool) runs before the console opens it
    if (options.tried.setUp && badge.setup) await setUpBadge(rig, badge, options.relays, scenario, options.tried.holds.token);
    if (!ownToken && !badge.provision!.powerOff) await provisionBadge(rig, badge, options.relays, token);
    const transcriptPath = sessionTranscriptPath(options.transcriptDir, badge.name, ++session, scenario.name);
    options.tried.transcript = transcriptPath;
    let serial: SerialConsole;
    try {
      serial = await SerialConsole.open({ port: options.port ?? badge.port, baudRate: badge.baudRate, transcriptPath, describeCrash: crashDescriber(rig, scenario) });
    } catch (error) {
      if (!ownToken) await giveBackToken();
      throw error;
    }
    const target = new SerialTarget(serial, {
      power: relayPower({ relay: options.relays.power, usbRelay: options.relays.usb, clockFactor: badge.clockFactor, proxy: faultProxy, imageBytes: options.tried.imageBytes ?? undefined }),
      clock: wallClock({ factor: badge.clockFactor }),
      oracle: new ModelOracle(),
      transcriptPath,
      afterClose: ownToken ? undefined : giveBackToken,
    });
    try {
      // a badge the rig left off (the reference badge between groups) is switched on as the scenario starts
      const poweredUp = await target.powerUp(startingPower(scenario) !== "battery");
      if (ownToken) {
        if (!poweredUp) await target.reset();
      } else {
        if (badge.provision!.powerOff) await provisionBadge(rig, badge, options.relays, token);
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

/**
 * `badgebench sim serial` on the rig's port: it has no ROM to flash, so each scenario starts
 * with the console's `setup` command, which starts it over as a new badge running the scenario's
 * version on its supply (with the scenario's token when that is not the rig's own: the rig's
 * token is not written into the transcript). It lives on its own clock: `wait`, `rest` and
 * power faults are console commands too.
 */
function simulatedRigTarget(rig: Rig, badge: RigBadge, options: { port?: string; transcriptDir: string; tried: TryRecord }): BadgeTargetFactory {
  let session = 0;
  return async ({ scenario, token }) => {
    const transcriptPath = sessionTranscriptPath(options.transcriptDir, badge.name, ++session, scenario.name);
    options.tried.transcript = transcriptPath;
    const serial = await SerialConsole.open({ port: options.port ?? badge.port, baudRate: badge.baudRate, transcriptPath, describeCrash: crashDescriber(rig, scenario) });
    const target = new SerialTarget(serial, { power: consolePower(), clock: simulatedClock(), oracle: new ModelOracle(), transcriptPath });
    const start = scenario.badge;
    try {
      await target.setUp({ version: start.version, mv: Math.round(start.battery.volts * 1000), power: startingPower(scenario), ...(token === badge.deviceToken ? {} : { token }) });
      await target.comeToRest();
    } catch (error) {
      await target.close().catch(() => {});
      throw error;
    }
    return target;
  };
}

/** var/transcripts/<time>-<badge>-<session>-<scenario>.txt */
function sessionTranscriptPath(dir: string, badge: string, session: number, scenarioName: string): string {
  const stamp = new Date().toISOString().replace(/[:.]/g, "-");
  return path.join(dir, `${stamp}-${badge}-${session}-${scenarioName.replace(/[^A-Za-z0-9]+/g, "-")}.txt`);
}

/** What a try left for its attachments, and whether the farm asked for a setup first (hil/farm.ts). */
export interface TryRecord {
  transcript: string | null;
  imageSha256: string | null;
  /** the size of the image the server offers the badge: a power cut's byte is a percent of it */
  imageBytes: number | null;
  setUp: boolean;
  /** the device whose token the badge holds: the rig file's (id unknown until read) or the one its last setup wrote */
  holds: { id: string | null; token: string };
}

/** The setup command writes a device token too ({token}): each setup starts the badge as a new device. */
const setupWritesToken = (badge: RigBadge) => badge.setup?.command.some((word) => word.includes(TOKEN_PLACEHOLDER)) ?? false;

/** ` for badge NAME` in a farm's messages; nothing for a one-badge rig. */
const of = (rig: Rig, badge: RigBadge) => (rig.badges.length > 1 ? ` for badge ${badge.name}` : "");

/**
 * A panic on the console, described with its backtrace decoded from the ELF of the version the
 * badge started the scenario on (the rig file's `elf`); without one, the addresses as printed.
 */
function crashDescriber(rig: Rig, scenario: Scenario): (crash: Crash) => Promise<string> {
  return async (crash) => {
    if (!rig.elf) return describeCrash(crash, null);
    try {
      return describeCrash(crash, await decodeBacktrace(rig.elf, scenario.badge.version, crash.frames));
    } catch (error) {
      if (error instanceof ElfError) return describeCrash(crash, error);
      throw error;
    }
  };
}

/**
 * Brings the badge to where the scenario starts with the rig's setup command ({version}, {mv},
 * {power}, {token}: the token of the device the badge is from now on) replaced), the relays off while it runs when it says so; then the battery's relay on
 * and the USB relay as the scenario starts (on unless it starts on its battery).
 */
async function setUpBadge(rig: Rig, badge: RigBadge, relays: RigRelays, scenario: Scenario, token: string): Promise<void> {
  const { command, powerOff, timeoutMs, cwd } = badge.setup!;
  if (powerOff) {
    await relays.power?.off();
    await relays.usb?.off();
  }
  const values: Record<string, string> = { "{version}": scenario.badge.version, "{mv}": String(Math.round(scenario.badge.battery.volts * 1000)), "{power}": startingPower(scenario), "{token}": token };
  const [program, ...args] = command.map((word) => word.replace(/\{version\}|\{mv\}|\{power\}|\{token\}/g, (placeholder) => values[placeholder]!));
  try {
    await promisify(execFile)(program!, args, { cwd, timeout: timeoutMs, killSignal: "SIGKILL" });
  } catch (error) {
    throw new SimSetupError(`the setup command of ${badge.name} in ${rig.file} (${command[0]}) ${commandFailure(error, timeoutMs)}`);
  }
  // USB first, so a badge that has it boots on it
  if (relays.usb) await (startingPower(scenario) === "battery" ? relays.usb.off() : relays.usb.on());
  await relays.power?.on();
}

/** How a rig command failed, in a few words and its last lines of stderr. */
function commandFailure(error: unknown, timeoutMs: number): string {
  const failure = error as { code?: unknown; killed?: boolean; stderr?: string; message: string };
  const how = failure.killed ? `did not finish within ${timeoutMs} ms` : typeof failure.code === "number" ? `exited ${failure.code}` : `could not start (${failure.message})`;
  const said = failure.stderr?.trim().split("\n").slice(-5).join("\n");
  return `${how}${said ? `:\n${said}` : ""}`;
}
