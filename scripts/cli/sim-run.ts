// `badgebench sim run FILES...`: plays scenario files on virtual badges and says what passed.
// Without --server each scenario gets its own server in this process on a temporary data
// directory, set up exactly as the scenario says. With --server URL and a test-mode API key
// every scenario gets a new test-mode device through the server's API (revoked after it) and
// plays against the releases the server already has; a scenario whose releases are not the
// server's (remoteMismatch) is skipped, with the reason. Exit codes: scripts/cli/exit-codes.ts.
import fs from "node:fs";
import { performance } from "node:perf_hooks";
import path from "node:path";
import { containsBytes, CRASH_ON_BOOT_MARKER, keyIdOf } from "../../firmware/index.ts";
import { scenarioReportHtml } from "../../badge-sim/reports/html-report.ts";
import { failureText, toJUnitXml } from "../../badge-sim/reports/junit.ts";
import { isFlaky } from "../../badge-sim/runners/flaky.ts";
import { loadScenario, ScenarioError, type Scenario } from "../../badge-sim/runners/scenario.ts";
import { runScenario, unloadableResult, type PrepareScenario, type ScenarioResult } from "../../badge-sim/runners/scenario-runner.ts";
import { counted } from "../../badge-sim/reports/text.ts";
import { UnreachableError } from "../../badge-sim/network/unreachable.ts";
import { connectRemoteServer, NotBadgebenchServerError, type RemoteServer, type ServerReleases } from "../harness/remote-server.ts";
import { SimSetupError, startSimServer, type SimRelease, type SimServer } from "../harness/sim-server.ts";
import { scenarioKeyFile, scenarioPublicKey } from "../../badge-sim/runners/scenario-keys.ts";
import { EXIT } from "./exit-codes.ts";

export interface SimRunOptions {
  /** scenario files, or directories whose *.json files are scenarios */
  files: string[];
  /** a running server's URL, set up through its API with `key` */
  server?: string;
  /** a test-mode API key with devices:write and releases:read */
  key?: string;
  /** the test-mode room on `server` the run's devices hang in */
  room: string;
  /** wall ms to wait for each answer of `server` */
  timeoutMs?: number;
  junit?: string;
  /** write the HTML report (summary, then each scenario's timeline) to this file */
  html?: string;
  json: boolean;
  stallTimeoutMs?: number;
  /** an updating progress line on stderr (a terminal); otherwise one plain line per scenario */
  interactive: boolean;
}

export async function runSimRun(options: SimRunOptions): Promise<number> {
  const files = scenarioFiles(options.files);
  const remote =
    options.server === undefined ? null : await connectRemoteServer({ url: options.server, key: options.key, room: options.room, timeoutMs: options.timeoutMs });
  // A server that stops answering, or refuses the key, ends the run: every later scenario would say the same.
  let fatal: Error | null = null;
  const prepare: PrepareScenario = remote
    ? async (scenario) => {
        try {
          return await prepareOnRemoteServer(remote, scenario);
        } catch (error) {
          if (error instanceof SimSetupError || error instanceof UnreachableError || error instanceof NotBadgebenchServerError) fatal = error;
          throw error;
        }
      }
    : prepareInProcess;
  try {
    return await playScenarioFiles(
      { ...options, files, jsonObject: "sim_run", suiteName: "badgebench scenarios" },
      oneAtATime(async (scenario) => {
        const result = await runScenario(scenario, prepare, { stallTimeoutMs: options.stallTimeoutMs });
        if (fatal) throw fatal;
        return result;
      }),
    );
  } finally {
    await remote?.close();
  }
}

/** How a run of scenario files is reported; shared by `sim run` and `hil run`. */
export interface ScenarioReportOptions {
  /** scenario files (directories already expanded by scenarioFiles) */
  files: string[];
  junit?: string;
  html?: string;
  json: boolean;
  interactive: boolean;
  /** the `object` of the --json answer: `sim_run`, `hil_run` */
  jsonObject: string;
  /** the JUnit test suite's name, and the HTML report's title */
  suiteName: string;
}

/** What a run reports as it plays: a scenario starting (on which badge), a scenario's result. */
export interface PlayProgress {
  starting(scenario: Scenario, badge?: string): void;
  finished(result: ScenarioResult): void;
}

/** Plays the loaded scenarios, telling `progress`; the results in the scenarios' order. */
export type PlayScenarios = (scenarios: Scenario[], progress: PlayProgress) => Promise<ScenarioResult[]>;

/** One scenario after the other (sim run, and hil run on one badge without --parallel). */
export const oneAtATime =
  (play: (scenario: Scenario) => Promise<ScenarioResult>): PlayScenarios =>
  async (scenarios, progress) => {
    const results: ScenarioResult[] = [];
    for (const scenario of scenarios) {
      progress.starting(scenario);
      const result = await play(scenario);
      progress.finished(result);
      results.push(result);
    }
    return results;
  };

/**
 * Loads each file, plays them with `play` and reports as it goes (progress lines, then a
 * summary), writes the JUnit and HTML reports and the --json object; the exit code is 1 when any
 * scenario failed or erred, 5 when none ran (every one skipped).
 */
export async function playScenarioFiles(options: ScenarioReportOptions, play: PlayScenarios): Promise<number> {
  const scenarios = new Map<string, Scenario>();
  // each file's result: one that could not be loaded at once, a scenario's once it was played
  const loaded: Array<ScenarioResult | Scenario> = [];
  const started = new Date();
  const startedAt = performance.now();
  const progress = new Progress(options, options.files.length);
  for (const file of options.files) {
    try {
      const scenario = loadScenario(file);
      scenarios.set(scenario.file, scenario);
      loaded.push(scenario);
    } catch (error) {
      if (!(error instanceof ScenarioError)) throw error;
      const result = unloadableResult(file, error.message);
      loaded.push(result);
      progress.finished(result);
    }
  }
  const toPlay = loaded.filter((entry): entry is Scenario => !("outcome" in entry));
  const played = await play(toPlay, progress);
  const results = loaded.map((entry) => ("outcome" in entry ? entry : played[toPlay.indexOf(entry)]!));

  if (options.junit) {
    fs.mkdirSync(path.dirname(path.resolve(options.junit)), { recursive: true });
    fs.writeFileSync(options.junit, toJUnitXml(results, { suiteName: options.suiteName, timestamp: started }));
  }
  if (options.html) {
    fs.mkdirSync(path.dirname(path.resolve(options.html)), { recursive: true });
    fs.writeFileSync(options.html, scenarioReportHtml({ title: options.suiteName, results, scenarios, generatedAt: started }));
  }
  const summary = summarise(results, performance.now() - startedAt);
  if (options.json) process.stdout.write(`${JSON.stringify({ object: options.jsonObject, ...summary, results: results.map(jsonOf) })}\n`);
  else progress.summary(summary);
  if (summary.failed + summary.errors > 0) return EXIT.failed;
  return summary.passed === 0 ? EXIT.nothingRan : EXIT.passed;
}

/** Files as given; a directory stands for its *.json files, in name order. */
export function scenarioFiles(given: string[]): string[] {
  if (given.length === 0) throw new SimSetupError("name at least one scenario file or directory (e.g. fixtures/scenarios)");
  return given.flatMap((entry) => {
    let isDirectory: boolean;
    try {
      isDirectory = fs.statSync(entry).isDirectory();
    } catch {
      return [entry]; // reported as unreadable with the other results
    }
    if (!isDirectory) return [entry];
    const inside = fs.readdirSync(entry).filter((name) => name.endsWith(".json")).sort();
    if (inside.length === 0) throw new SimSetupError(`${entry} holds no .json scenario files: nothing ran`, EXIT.nothingRan);
    return inside.map((name) => path.join(entry, name));
  });
}

/** Releases the fleet had before the scenario's own are only there to be known: small images. */
const HISTORY_IMAGE_BYTES = 64 * 1024;

/** A device name (at most 40 characters) that says which scenario made it. */
export const deviceName = (scenario: Scenario) => [...`sim ${scenario.name}`].slice(0, 40).join("");

/** A fresh server per scenario: its device, its release, nothing left over from the last one. */
export const prepareInProcess: PrepareScenario = async (scenario) => {
  const server = await startSimServer();
  try {
    const device = await server.addDevice(deviceName(scenario));
    for (const version of scenario.server.published) await server.publish({ version, size: HISTORY_IMAGE_BYTES });
    const release = scenario.server.release;
    if (release) await server.publish(simReleaseOf(scenario));
    if (scenario.badge.token === "revoked") await server.revokeDevice(device.id);
    return { serverUrl: server.url, token: device.token, deviceId: device.id, apiKey: server.apiKey, close: () => server.close() };
  } catch (error) {
    await server.close();
    throw error;
  }
};

/** The scenario's release as the simulation publishes it: signed, and trusting keys, as it says. */
export function simReleaseOf(scenario: Scenario): SimRelease {
  const release = scenario.server.release!;
  const trusted = release.trustedKeys ?? scenario.badge.trustedKeys;
  return {
    version: release.version,
    size: release.size,
    crashOnBoot: release.crashOnBoot,
    notes: release.notes,
    signingKeyFile: release.signedWith && scenarioKeyFile(release.signedWith),
    trustedKeys: trusted.map(scenarioPublicKey),
  };
}

/** A new test-mode device per scenario, revoked once the scenario is over; the server's releases stay as they are. */
async function prepareOnRemoteServer(server: RemoteServer, scenario: Scenario): ReturnType<PrepareScenario> {
  const mismatch = remoteMismatch(await server.releases(), scenario);
  if (mismatch !== null) return { skip: `the server at ${server.url} ${mismatch} (run without --server to set it up)` };
  const device = await server.addDevice(deviceName(scenario));
  if (scenario.badge.token === "revoked") await server.revokeDevice(device.id);
  const revoke = () => (scenario.badge.token === "revoked" ? Promise.resolve() : server.revokeDevice(device.id));
  return { serverUrl: server.url, token: device.token, deviceId: device.id, apiKey: server.apiKey, close: revoke };
}

/**
 * Null when the server's releases are what the scenario needs for a new device: its fleet
 * release is the scenario's release, every `published` version is there, and the badge's own
 * version is published exactly when the scenario publishes it (else the badge would show
 * `outdated` where the scenario expects `unreleased`, or the reverse). Else why not, e.g.
 * `has not published 1.4.0 (the scenario's published list)`. An image that crashes on boot
 * cannot be told from the API, so such a scenario needs a server of its own.
 */
export function remoteMismatch(server: ServerReleases, scenario: Scenario): string | null {
  const wanted = scenario.server.release;
  if (wanted?.crashOnBoot) return "cannot be told to offer an image that crashes on boot";
  if (wanted?.signedWith) return "cannot be told to sign its release with a key of fixtures/signing-keys";
  if (server.fleet !== (wanted?.version ?? null)) {
    return `offers ${server.fleet ?? "no release"} to its fleet; the scenario needs ${wanted?.version ?? "no release"}`;
  }
  return publishedMismatch(server.versions, scenario);
}

/**
 * Why the versions a server has published cannot hold the scenario's published list and badge, or
 * null. What else is published shows only in the badge's fleet state, so a scenario that expects
 * none (a revoked token, say) plays on any such server.
 */
function publishedMismatch(versions: string[], scenario: Scenario): string | null {
  if (scenario.expect.fleetState === undefined) return null;
  const missing = scenario.server.published.filter((version) => !versions.includes(version));
  if (missing.length > 0) return `has not published ${missing.join(", ")} (the scenario's published list)`;
  const scenarioKnows = [...scenario.server.published, scenario.server.release?.version].includes(scenario.badge.version);
  if (!scenarioKnows && versions.includes(scenario.badge.version)) {
    return `has published ${scenario.badge.version}, which the scenario's badge runs as an unpublished version`;
  }
  return null;
}

/**
 * For `hil run` (a server whose store this machine opens): null when what the server offers `deviceId` is the scenario's release (version, and whether it
 * crashes on boot) and its published versions hold the scenario's (as remoteMismatch says); else why not,
 * e.g. `the server at URL offers 1.6.0; the scenario needs 1.5.0`.
 */
export async function releaseMismatch(server: SimServer, deviceId: string, scenario: Scenario): Promise<string | null> {
  const wanted = scenario.server.release;
  const offered = await server.targetFor(deviceId);
  const offeredCrashes = offered ? containsBytes(await server.imageOf(deviceId, offered), new TextEncoder().encode(CRASH_ON_BOOT_MARKER)) : false;
  const offeredKey = offered?.signature?.key_id ?? null;
  const wantedKey = wanted?.signedWith ? keyIdOf(scenarioPublicKey(wanted.signedWith)) : null;
  const describe = (version: string | undefined, crashes: boolean, key: string | null) =>
    version ? `${version}${crashes ? " (an image that crashes on boot)" : ""}${key ? ` signed by key ${key}` : ""}` : "no release";
  if (offered?.version === wanted?.version && offeredCrashes === (wanted?.crashOnBoot ?? false) && offeredKey === wantedKey) {
    const mismatch = publishedMismatch(await server.publishedFor(deviceId), scenario);
    return mismatch && `the server at ${server.url} ${mismatch}`;
  }
  return `the server at ${server.url} offers ${describe(offered?.version, offeredCrashes, offeredKey)}; the scenario needs ${describe(wanted?.version, wanted?.crashOnBoot ?? false, wantedKey)}`;
}

interface Summary {
  scenarios: number;
  passed: number;
  /** of the passed, those that passed only on a retry (hil run --retries) */
  flaky: number;
  failed: number;
  errors: number;
  skipped: number;
  wall_ms: number;
}

function summarise(results: ScenarioResult[], wallMs: number): Summary {
  const count = (outcome: ScenarioResult["outcome"]) => results.filter((r) => r.outcome === outcome).length;
  return {
    scenarios: results.length,
    passed: count("passed"),
    flaky: results.filter(isFlaky).length,
    failed: count("failed"),
    errors: count("error"),
    skipped: count("skipped"),
    wall_ms: Math.round(wallMs),
  };
}

function jsonOf(result: ScenarioResult) {
  return {
    file: result.file,
    name: result.name,
    outcome: result.outcome,
    flaky: isFlaky(result),
    ...(result.badge === undefined ? {} : { badge: result.badge }),
    ...(result.reruns?.length ? { reruns: result.reruns.map((rerun) => ({ outcome: rerun.outcome, message: rerun.message, checks: rerun.checks.filter((check) => !check.passed) })) } : {}),
    ...(result.attachments?.length ? { attachments: result.attachments } : {}),
    message: result.message,
    wall_ms: Math.round(result.wallMs * 10) / 10,
    simulated_ms: result.simulatedMs,
    checks: result.checks,
    // The whole log only where someone has to find out what happened.
    observations: result.outcome === "failed" || result.outcome === "error" ? result.observations : undefined,
  };
}

/** A value for one line of text; a long list keeps its ends (--json and JUnit have it whole). */
function brief(value: unknown): string {
  const SHOWN_AT_EACH_END = 6;
  if (!Array.isArray(value) || value.length <= 2 * SHOWN_AT_EACH_END) return JSON.stringify(value);
  const left = value.length - 2 * SHOWN_AT_EACH_END;
  return `${JSON.stringify(value.slice(0, SHOWN_AT_EACH_END)).slice(0, -1)}, ... ${left} more ..., ${JSON.stringify(value.slice(-SHOWN_AT_EACH_END)).slice(1)}`;
}

const OUTCOME_LABEL = { passed: "PASS", failed: "FAIL", error: "ERROR", skipped: "SKIP" } as const;

/** On a terminal, one line that updates as scenarios run (one part per badge of a farm); in CI, one plain line per scenario. */
class Progress implements PlayProgress {
  #options: { json: boolean; interactive: boolean };
  #total: number;
  #done = 0;
  #started = 0;
  /** the scenario each badge plays now ("" for a run on one badge) */
  #running = new Map<string, string>();
  constructor(options: { json: boolean; interactive: boolean }, total: number) {
    this.#options = options;
    this.#total = total;
  }

  starting(scenario: Scenario, badge = ""): void {
    this.#started++;
    this.#running.set(badge, scenario.name);
    this.#redraw();
  }

  /** One badge: `[3/20] happy path ...`; a farm: `[2/20 done] badge-1: happy path | badge-2: ...`. */
  #redraw(): void {
    if (!this.#options.interactive || this.#running.size === 0) return;
    const [badge, name] = [...this.#running.entries()][0]!;
    const farm = `[${this.#done}/${this.#total} done] ${[...this.#running.entries()].map(([on, running]) => `${on}: ${running}`).join(" | ")}`;
    // a farm's line is cut to the terminal's width, so it stays one line that \r can redraw
    const line = this.#running.size === 1 && badge === "" ? `[${this.#started}/${this.#total}] ${name} ...` : farm.slice(0, (process.stderr.columns || 120) - 1);
    process.stderr.write(`\r\x1b[2K${line}`);
  }

  finished(result: ScenarioResult): void {
    this.#done++;
    this.#running.delete(result.badge ?? "");
    if (this.#options.interactive) process.stderr.write("\r\x1b[2K");
    if (!this.#options.json) process.stdout.write(`${resultLines(result).join("\n")}\n`);
    this.#redraw();
  }

  summary(summary: Summary): void {
    const passed = summary.flaky > 0 ? `${summary.passed} passed (${summary.flaky} of them flaky: passed on a retry)` : `${summary.passed} passed`;
    const parts = [passed, `${summary.failed} failed`, counted(summary.errors, "error"), `${summary.skipped} skipped`];
    process.stdout.write(`${counted(summary.scenarios, "scenario")}: ${parts.join(", ")} in ${(summary.wall_ms / 1000).toFixed(1)} s\n`);
  }
}

/** A result as the lines CI logs show: outcome, name, badge, time; what failed, and each failed try of a retried one. */
function resultLines(result: ScenarioResult): string[] {
  const timing = result.outcome === "passed" || result.outcome === "failed" ? ` (${Math.round(result.wallMs)} ms wall, ${(result.simulatedMs / 1000).toFixed(1)} s badge time)` : "";
  const where = result.name === result.file ? "" : ` [${result.file}]`;
  const label = isFlaky(result) ? "FLAKY" : OUTCOME_LABEL[result.outcome];
  const on = result.badge === undefined ? "" : ` on ${result.badge}`;
  const tries = result.reruns?.length ? `, ${result.reruns.length + 1} tries` : "";
  const lines = [`${label} ${result.name}${where}${on}${timing}${tries}`];
  for (const [index, rerun] of (result.reruns ?? []).entries()) lines.push(`     try ${index + 1}: ${rerun.outcome}: ${failureText(rerun).split("\n")[0]}`);
  for (const check of result.checks.filter((c) => !c.passed)) {
    lines.push(`     ${check.field}`, `       expected: ${brief(check.expected)}`, `       observed: ${brief(check.observed)}`);
  }
  if (result.message) lines.push(...result.message.split("\n").map((line) => `     ${line}`));
  return lines;
}
