// Plays a scenario file on a virtual badge: the server is set up as the scenario says (by the
// caller, who may reach into a server's store; this module reaches the server over HTTP only),
// network faults go through a fault proxy, power faults through the virtual battery, the
// wearer's steps are played one at a time, and every expectation is compared with what was
// observed. A result says, for each expectation, what was expected and what was observed.
//
// The badge is a `BadgeTarget` (badge-target.ts) made by a factory: by default a virtual badge;
// hil/ passes one that drives a badge over its serial console, so the same file runs on both.
import { virtualTarget, type BadgeTarget, type BadgeTargetFactory } from "./badge-target.ts";
import { startFaultProxy, type FaultProxy } from "../network/fault-proxy/proxy.ts";
import { v1Client } from "../network/v1-client.ts";
import { reportMatches, type Scenario } from "./scenario.ts";
import type { Observation } from "../virtual-badge/observation-log.ts";

export { RESTING_STATES } from "./badge-target.ts";

/** Where a prepared scenario's badge talks to, and how the runner reads the server's view of it. */
export interface ScenarioTarget {
  serverUrl: string;
  token: string;
  deviceId: string;
  /** a key with `devices:read`, for GET /v1/devices/{id} */
  apiKey: string;
  /** undoes what prepare() set up */
  close(): Promise<void>;
}

/**
 * Sets up the server side of a scenario: a device (its token revoked when the scenario says
 * so) and the release. `{ skip }` says why this server cannot play the scenario.
 */
export type PrepareScenario = (scenario: Scenario) => Promise<ScenarioTarget | { skip: string }>;

export interface ScenarioCheck {
  /** the expectation's field, e.g. `expect.report` */
  field: string;
  expected: unknown;
  observed: unknown;
  passed: boolean;
}

export type ScenarioOutcome = "passed" | "failed" | "skipped" | "error";

export interface ScenarioResult {
  file: string;
  name: string;
  outcome: ScenarioOutcome;
  checks: ScenarioCheck[];
  /** why it was skipped, or what went wrong when it could not be played */
  message: string | null;
  wallMs: number;
  /** badge time the scenario took: simulated ms on the virtual badge, wall ms on a serial one */
  simulatedMs: number;
  observations: Observation[];
  /** the badge of a farm it was played on (hil run --parallel) */
  badge?: string;
  /** earlier tries that failed or erred (hil run --retries), oldest first: passed with reruns is flaky */
  reruns?: ScenarioResult[];
  /** files that go with the result in reports: the serial transcript, the timeline, the image's SHA-256 */
  attachments?: Array<{ name: string; path: string }>;
}

export interface ScenarioRunOptions {
  /**
   * How long the badge waits on a silent download before giving up, in wall ms (the badge's own
   * default is 5000). A stall can only be seen in wall time, so the runner shortens it.
   */
  stallTimeoutMs?: number;
  /** makes the badge the scenario is played on (default: a virtual badge) */
  target?: BadgeTargetFactory;
  /** where the fault proxy listens (default 127.0.0.1 on any free port); a real badge's NVS names a fixed one */
  faultProxy?: { host?: string; port?: number };
}

export const DEFAULT_STALL_TIMEOUT_MS = 500;

/** A scenario file that could not be loaded, as a result, so it is reported with the others. */
export function unloadableResult(file: string, message: string): ScenarioResult {
  return { file, name: file, outcome: "error", checks: [], message, wallMs: 0, simulatedMs: 0, observations: [] };
}

export async function runScenario(scenario: Scenario, prepare: PrepareScenario, options: ScenarioRunOptions = {}): Promise<ScenarioResult> {
  const started = performance.now();
  const result = (outcome: ScenarioOutcome, rest: Partial<ScenarioResult>): ScenarioResult => ({
    file: scenario.file,
    name: scenario.name,
    outcome,
    checks: [],
    message: null,
    simulatedMs: 0,
    observations: [],
    ...rest,
    wallMs: performance.now() - started,
  });

  let target: ScenarioTarget | { skip: string };
  try {
    target = await prepare(scenario);
  } catch (error) {
    return result("error", { message: `could not set up the server: ${(error as Error).message}` });
  }
  if ("skip" in target) return result("skipped", { message: target.skip });

  let proxy: FaultProxy | null = null;
  let badge: BadgeTarget | null = null;
  try {
    // A scenario with network faults, or a rig that names where the proxy listens, gets a proxy.
    if (scenario.faults.network.length > 0 || options.faultProxy) {
      proxy = await startFaultProxy({ target: target.serverUrl, faults: scenario.faults.network, ...options.faultProxy });
    }
    const makeTarget = options.target ?? virtualTarget;
    badge = await makeTarget({
      scenario,
      serverUrl: proxy?.url ?? target.serverUrl,
      token: target.token,
      stallTimeoutMs: options.stallTimeoutMs ?? DEFAULT_STALL_TIMEOUT_MS,
      silentPeers: proxy ?? undefined,
      faultProxy: proxy ?? undefined,
    });
    for (const fault of scenario.faults.power) await badge.armBrownout(fault);
    await badge.comeToRest();
    for (const step of scenario.steps) {
      await play(badge, step);
      await badge.comeToRest();
    }
    await badge.comeToRest({ poweredOnly: true });
    const checks = [...(await checkExpectations(scenario, badge, target)), ...(badge.extraChecks?.() ?? [])];
    return result(checks.every((check) => check.passed) ? "passed" : "failed", {
      checks,
      simulatedMs: badge.elapsedMs(),
      observations: badge.observations,
    });
  } catch (error) {
    // A badge that crashed failed the scenario, with what it crashed on; anything else is an error.
    const failedCheck = (error as { failedCheck?: ScenarioCheck }).failedCheck;
    if (failedCheck) return result("failed", { checks: [failedCheck], message: (error as Error).message, simulatedMs: badge?.elapsedMs() ?? 0, observations: badge?.observations ?? [] });
    return result("error", { message: (error as Error).message, observations: badge?.observations ?? [] });
  } finally {
    await badge?.close().catch(() => {});
    await proxy?.close();
    await target.close();
  }
}

async function play(badge: BadgeTarget, step: Scenario["steps"][number]): Promise<void> {
  switch (step.do) {
    case "menu.checkForUpdate":
      return badge.checkForUpdate();
    case "sync":
      return badge.syncNow();
    case "card.tap":
      return badge.tapCard(step.uid);
    case "power.plug":
      return badge.plugIn();
    case "power.unplug":
      return badge.unplug();
    case "wait":
      return badge.wait(step.seconds);
  }
}

async function checkExpectations(scenario: Scenario, badge: BadgeTarget, target: ScenarioTarget): Promise<ScenarioCheck[]> {
  const expect = scenario.expect;
  const checks: ScenarioCheck[] = [];
  const check = (field: string, expected: unknown, observed: unknown, passed: boolean) => checks.push({ field, expected, observed, passed });

  if (expect.states) {
    const passed = badge.stateHistory();
    const matches = (want: string, state: string) => state === want || state.startsWith(`${want}.`);
    check("expect.states", expect.states, passed, inOrder(expect.states, passed, matches, { sameItemTwice: false }));
  }
  if (expect.screen) {
    const shown = badge.screenHistory().filter((text) => text !== "");
    // Lines of one screen may be expected separately, so a screen can match more than one.
    check("expect.screen", expect.screen, shown, inOrder(expect.screen, shown, (want, text) => text.includes(want), { sameItemTwice: true }));
  }
  if (expect.runningVersion !== undefined) {
    check("expect.runningVersion", expect.runningVersion, badge.runningVersion(), badge.runningVersion() === expect.runningVersion);
  }
  if (expect.unprovisioned !== undefined) {
    const unprovisioned = !badge.isProvisioned();
    check("expect.unprovisioned", expect.unprovisioned, unprovisioned, unprovisioned === expect.unprovisioned);
  }
  if (expect.report !== undefined || expect.fleetState !== undefined) {
    const firmware = await fleetViewOf(target);
    const report = firmware.last_report && [firmware.last_report.outcome, firmware.last_report.version, firmware.last_report.message].filter((part) => part !== null).join("|");
    if (expect.report !== undefined) {
      const passed = expect.report === null ? report === null : report !== null && reportMatches(expect.report, report);
      check("expect.report", expect.report, report, passed);
    }
    if (expect.fleetState !== undefined) check("expect.fleetState", expect.fleetState, firmware.state, firmware.state === expect.fleetState);
  }
  return checks;
}

/** Each wanted item matches something seen, in the same order, with anything in between. */
function inOrder(wanted: string[], seen: string[], matches: (want: string, item: string) => boolean, options: { sameItemTwice: boolean }): boolean {
  let at = 0;
  for (const want of wanted) {
    while (at < seen.length && !matches(want, seen[at]!)) at++;
    if (at === seen.length) return false;
    if (!options.sameItemTwice) at++;
  }
  return true;
}

async function fleetViewOf(target: ScenarioTarget) {
  const api = v1Client(target.serverUrl, target.apiKey);
  const { data, error, response } = await api.GET("/v1/devices/{id}", { params: { path: { id: target.deviceId } } });
  if (!data?.firmware) throw new Error(`GET ${response.url} answered ${response.status}${error?.error?.message ? `: ${error.error.message}` : ""}`);
  return data.firmware;
}
