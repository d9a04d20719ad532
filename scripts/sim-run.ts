// `badgebench sim run FILES...`: plays scenario files on virtual badges and says what passed.
// Without --server each scenario gets its own server in this process on a temporary data
// directory, set up exactly as the scenario says. With --server URL (and --data, that server's
// data directory on this machine) every scenario gets a new device on that server, and plays
// against the release the server already offers; a scenario that needs another release is
// skipped, with the reason.
import fs from "node:fs";
import path from "node:path";
import { containsBytes, CRASH_ON_BOOT_MARKER } from "../firmware/index.ts";
import { scenarioReportHtml } from "../badge-sim/html-report.ts";
import { toJUnitXml } from "../badge-sim/junit.ts";
import { loadScenario, ScenarioError, type Scenario } from "../badge-sim/scenario.ts";
import { runScenario, unloadableResult, type PrepareScenario, type ScenarioResult } from "../badge-sim/scenario-runner.ts";
import { connectNamedServer, SimSetupError, startSimServer, type SimServer } from "./sim-server.ts";

export interface SimRunOptions {
  /** scenario files, or directories whose *.json files are scenarios */
  files: string[];
  /** a running server's URL; needs `data`, its data directory on this machine */
  server?: string;
  data?: string;
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
  const external = await connectNamedServer(options.server, options.data);
  const prepare = external ? prepareOnRunningServer(external) : prepareInProcess;
  try {
    return await playScenarioFiles({ ...options, files, jsonObject: "sim_run", suiteName: "badgebench scenarios" }, (scenario) =>
      runScenario(scenario, prepare, { stallTimeoutMs: options.stallTimeoutMs }),
    );
  } finally {
    await external?.close();
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

/**
 * Plays each file with `play` and reports as it goes (progress lines, then a summary), writes
 * the JUnit report and the --json object; the exit code is 1 when any scenario failed or erred.
 */
export async function playScenarioFiles(options: ScenarioReportOptions, play: (scenario: Scenario) => Promise<ScenarioResult>): Promise<number> {
  const results: ScenarioResult[] = [];
  const scenarios = new Map<string, Scenario>();
  const started = new Date();
  const progress = new Progress(options, options.files.length);
  for (const [index, file] of options.files.entries()) {
    let scenario: Scenario;
    try {
      scenario = loadScenario(file);
    } catch (error) {
      if (!(error instanceof ScenarioError)) throw error;
      const result = unloadableResult(file, error.message);
      results.push(result);
      progress.finished(result);
      continue;
    }
    progress.starting(index, scenario);
    scenarios.set(scenario.file, scenario);
    const result = await play(scenario);
    results.push(result);
    progress.finished(result);
  }

  if (options.junit) {
    fs.mkdirSync(path.dirname(path.resolve(options.junit)), { recursive: true });
    fs.writeFileSync(options.junit, toJUnitXml(results, { suiteName: options.suiteName, timestamp: started }));
  }
  if (options.html) {
    fs.mkdirSync(path.dirname(path.resolve(options.html)), { recursive: true });
    fs.writeFileSync(options.html, scenarioReportHtml({ title: options.suiteName, results, scenarios, generatedAt: started }));
  }
  const summary = summarise(results);
  if (options.json) process.stdout.write(`${JSON.stringify({ object: options.jsonObject, ...summary, results: results.map(jsonOf) })}\n`);
  else progress.summary(summary);
  return summary.failed + summary.errors > 0 ? 1 : 0;
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
    if (inside.length === 0) throw new SimSetupError(`${entry} holds no .json scenario files`);
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
    if (release) await server.publish({ version: release.version, size: release.size, crashOnBoot: release.crashOnBoot, notes: release.notes });
    if (scenario.badge.token === "revoked") await server.revokeDevice(device.id);
    return { serverUrl: server.url, token: device.token, deviceId: device.id, apiKey: server.apiKey, close: () => server.close() };
  } catch (error) {
    await server.close();
    throw error;
  }
};

/** A new device per scenario on a server that is already running; its releases stay as they are. */
function prepareOnRunningServer(server: SimServer): PrepareScenario {
  return async (scenario) => {
    const device = await server.addDevice(deviceName(scenario));
    const mismatch = await releaseMismatch(server, device.id, scenario);
    if (mismatch !== null) {
      await server.revokeDevice(device.id);
      return { skip: `${mismatch} (run without --server to set it up)` };
    }
    if (scenario.badge.token === "revoked") await server.revokeDevice(device.id);
    return { serverUrl: server.url, token: device.token, deviceId: device.id, apiKey: server.apiKey, close: async () => {} };
  };
}

/**
 * Null when what the server offers `deviceId` is the scenario's release (version, and whether it
 * crashes on boot); else why not, e.g. `the server at URL offers 1.6.0; the scenario needs 1.5.0`.
 */
export async function releaseMismatch(server: SimServer, deviceId: string, scenario: Scenario): Promise<string | null> {
  const wanted = scenario.server.release;
  const offered = await server.targetFor(deviceId);
  const offeredCrashes = offered ? containsBytes(await server.imageOf(offered), new TextEncoder().encode(CRASH_ON_BOOT_MARKER)) : false;
  const describe = (version: string | undefined, crashes: boolean) => (version ? `${version}${crashes ? " (an image that crashes on boot)" : ""}` : "no release");
  if (offered?.version === wanted?.version && offeredCrashes === (wanted?.crashOnBoot ?? false)) return null;
  return `the server at ${server.url} offers ${describe(offered?.version, offeredCrashes)}; the scenario needs ${describe(wanted?.version, wanted?.crashOnBoot ?? false)}`;
}

interface Summary {
  scenarios: number;
  passed: number;
  failed: number;
  errors: number;
  skipped: number;
  wall_ms: number;
}

function summarise(results: ScenarioResult[]): Summary {
  const count = (outcome: ScenarioResult["outcome"]) => results.filter((r) => r.outcome === outcome).length;
  return {
    scenarios: results.length,
    passed: count("passed"),
    failed: count("failed"),
    errors: count("error"),
    skipped: count("skipped"),
    wall_ms: Math.round(results.reduce((sum, r) => sum + r.wallMs, 0)),
  };
}

function jsonOf(result: ScenarioResult) {
  return {
    file: result.file,
    name: result.name,
    outcome: result.outcome,
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

/** On a terminal, one line that updates as scenarios run; in CI, one plain line per scenario. */
class Progress {
  #options: { json: boolean; interactive: boolean };
  #total: number;
  #done = 0;
  constructor(options: { json: boolean; interactive: boolean }, total: number) {
    this.#options = options;
    this.#total = total;
  }

  starting(index: number, scenario: Scenario): void {
    if (this.#options.interactive) process.stderr.write(`\r\x1b[2K[${index + 1}/${this.#total}] ${scenario.name} ...`);
  }

  finished(result: ScenarioResult): void {
    this.#done++;
    if (this.#options.interactive) process.stderr.write("\r\x1b[2K");
    if (this.#options.json) return;
    const timing = result.outcome === "passed" || result.outcome === "failed" ? ` (${Math.round(result.wallMs)} ms wall, ${(result.simulatedMs / 1000).toFixed(1)} s badge time)` : "";
    const where = result.name === result.file ? "" : ` [${result.file}]`;
    const lines = [`${OUTCOME_LABEL[result.outcome]} ${result.name}${where}${timing}`];
    for (const check of result.checks.filter((c) => !c.passed)) {
      lines.push(`     ${check.field}`, `       expected: ${brief(check.expected)}`, `       observed: ${brief(check.observed)}`);
    }
    if (result.message) lines.push(...result.message.split("\n").map((line) => `     ${line}`));
    process.stdout.write(`${lines.join("\n")}\n`);
  }

  summary(summary: Summary): void {
    const parts = [`${summary.passed} passed`, `${summary.failed} failed`, `${summary.errors} errors`, `${summary.skipped} skipped`];
    process.stdout.write(`${summary.scenarios} scenarios: ${parts.join(", ")} in ${(summary.wall_ms / 1000).toFixed(1)} s\n`);
  }
}
