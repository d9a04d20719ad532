// Shared pieces of the benchmark scripts (bench-*.ts): progress logging, percentiles, servers
// in child processes (badgebench exactly as `npm start` starts it, and the bare Express
// hello-world baseline), the autocannon wrapper, a temporary directory that is removed however
// the run ends, and a process's memory from /proc.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { SyncMode } from "../../server/store/database.ts";

export const ROOT = fileURLToPath(new URL("../..", import.meta.url));
/** The production server, built by `npm run build` (esbuild) as `npm start` does. */
export const SERVER_BUNDLE = path.join(ROOT, "dist", "serve.js");
/** The full command line (`npx badgebench`), which runs its bundle (scripts/cli/build-cli.js). */
export const CLI = path.join(ROOT, "scripts", "cli", "badgebench.js");

/** The node options `npm start` runs the bundle with, read from package.json's start script. */
function startScriptNodeOptions(): string[] {
  const start: string = JSON.parse(fs.readFileSync(path.join(ROOT, "package.json"), "utf8")).scripts.start;
  const words = start.split(/\s+/);
  const bundle = words.indexOf("dist/serve.js");
  if (words[0] !== "node" || bundle < 0) throw new Error(`package.json's start script no longer runs node dist/serve.js: ${start}`);
  return words.slice(1, bundle);
}

export function log(message: string): void {
  // Progress goes to stderr so that `--json` leaves exactly one object on stdout.
  process.stderr.write(`[bench] ${message}\n`);
}

/** Nearest-rank percentile: an actually observed sample, never an interpolation. */
export function percentile(samples: number[], p: number): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

/** The median of a few repeated runs (the mean of the middle two for an even count). */
export function median(samples: number[]): number {
  const sorted = [...samples].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

export const round = (value: number, digits = 2) => Number(value.toFixed(digits));

/** The machine a benchmark ran on, with the load average before it (`loadAverage()` then) and after. */
export interface Machine {
  cpus: number;
  node: string;
  loadavg_before: number[];
  loadavg_after: number[];
}

/** The machine in brief, for the reports that do not track the load. */
export interface CpusAndNode {
  cpus: number;
  node: string;
}

export const cpusAndNode = (): CpusAndNode => ({ cpus: os.cpus().length, node: process.version });

export const loadAverage = (): number[] => os.loadavg().map((x) => round(x));

/** Call when the measurements are over. */
export function machine(loadBefore: number[]): Machine {
  return { ...cpusAndNode(), loadavg_before: loadBefore, loadavg_after: loadAverage() };
}

export function describeMachine(m: Machine): string {
  return `${m.cpus} CPUs, node ${m.node}, load average ${m.loadavg_before.join(" ")} before, ${m.loadavg_after.join(" ")} after`;
}

/** The command line that reproduces this run, for the report. */
export function commandLine(script: string): string {
  return ["npx tsx", `scripts/bench/${script}`, ...process.argv.slice(2)].join(" ");
}

// ---------------------------------------------------------------------------------------------
// Child processes: every one started here is killed if the run ends early.

const children = new Set<ChildProcess>();

export function track(child: ChildProcess): ChildProcess {
  children.add(child);
  child.once("exit", () => children.delete(child));
  return child;
}

function killChildren(): void {
  for (const child of children) child.kill("SIGKILL");
}

/** Spawns a node process that prints `listening on URL` and resolves with that URL. */
function spawnServer(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ child: ChildProcess; url: string }> {
  const child = track(spawn(process.execPath, args, { cwd: ROOT, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "inherit"] }));
  return new Promise((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Error(`server did not start: ${out}`)), 30_000);
    child.stdout!.on("data", (chunk: Buffer) => {
      out += chunk.toString();
      const match = /listening on (http:\/\/\S+)/.exec(out);
      if (match) {
        clearTimeout(timer);
        resolve({ child, url: match[1]! });
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code} before listening: ${out}`));
    });
  });
}

export async function stopServer(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGTERM");
  await exited;
}

let built = false;
let serverNodeOptions: string[] | undefined;

/**
 * The badgebench server in its own process, built and started as `npm start` starts it (the
 * JavaScript bundle, no TypeScript loader), on a free port of 127.0.0.1. With `cpuProfDir` node
 * writes a .cpuprofile there when the server stops; with `databaseUrl` it runs on that
 * PostgreSQL database (`--database`) instead of SQLite in `dataDir`. `nodeArgs` go to node
 * before the bundle (a preload), `env` adds to the environment.
 */
export function spawnBadgebench(dataDir: string, sync: SyncMode, options: { cpuProfDir?: string; databaseUrl?: string; nodeArgs?: string[]; env?: NodeJS.ProcessEnv } = {}) {
  if (!built) {
    execFileSync("npm", ["run", "--silent", "build"], { cwd: ROOT, stdio: ["ignore", "ignore", "inherit"] });
    built = true;
  }
  serverNodeOptions ??= startScriptNodeOptions();
  const nodeArgs = [...serverNodeOptions, ...(options.cpuProfDir ? ["--cpu-prof", "--cpu-prof-dir", options.cpuProfDir] : []), ...(options.nodeArgs ?? [])];
  const database = options.databaseUrl === undefined ? [] : ["--database", options.databaseUrl];
  return spawnServer([...nodeArgs, SERVER_BUNDLE, "--port", "0", "--host", "127.0.0.1", "--data", dataDir, "--sync", sync, ...database], {
    LOG_LEVEL: "warn",
    // The benchmarks' webhook receivers listen on loopback.
    BADGEBENCH_WEBHOOK_LOCAL_TEST_TARGETS: "1",
    ...options.env,
  });
}

// An express() app with one route, in its own process: the ceiling for any Express route here.
const HELLO_SERVER = `
import express from "express";
const app = express();
app.get("/", (_req, res) => { res.send("hello"); });
const server = app.listen(0, "127.0.0.1", () => process.stdout.write("listening on http://127.0.0.1:" + server.address().port + "\\n"));
process.once("SIGTERM", () => server.close(() => process.exit(0)));
`;

/** The bare Express 5 hello-world baseline (`app.get("/", (req, res) => res.send("hello"))`). */
export function spawnHello() {
  return spawnServer(["--input-type=module", "-e", HELLO_SERVER]);
}

// ---------------------------------------------------------------------------------------------
// autocannon (it ships no types; this is the part of its API used here)

export interface AutocannonRequest {
  method?: string;
  path?: string;
  headers?: Record<string, string>;
  body?: string;
  setupRequest?: (req: AutocannonRequest) => AutocannonRequest;
}
interface AutocannonResult {
  requests: { average: number; total: number };
  non2xx: number;
  errors: number;
  timeouts: number;
  "2xx": number;
  latency: { p50: number; p99: number };
}
type Autocannon = (options: { url: string; connections: number; duration: number; requests?: AutocannonRequest[] }) => Promise<AutocannonResult>;
const autocannon = createRequire(import.meta.url)("autocannon") as Autocannon;

export interface LoadSettings {
  connections: number;
  durationS: number;
  warmupS: number;
}

export interface LoadResult {
  rps: number;
  total: number;
  non2xx: number;
  errors: number;
  timeouts: number;
  p50_ms: number;
  p99_ms: number;
  /**
   * CPU time the server process (all its threads) spent per request answered in the measured
   * run, in microseconds, when its pid was given: a figure the other jobs on a shared machine
   * disturb less than the rates.
   */
  server_cpu_us?: number;
}

/** Several rounds of one load: the median rate and latencies, the failures of every round added up. */
export interface RoundsSummary {
  rps: number;
  p50_ms: number;
  p99_ms: number;
  non2xx: number;
  errors: number;
  timeouts: number;
  server_cpu_us?: number;
  runs: LoadResult[];
}

export function summarizeRounds(runs: LoadResult[]): RoundsSummary {
  return {
    rps: round(median(runs.map((r) => r.rps)), 1),
    p50_ms: round(median(runs.map((r) => r.p50_ms))),
    p99_ms: round(median(runs.map((r) => r.p99_ms))),
    non2xx: runs.reduce((n, r) => n + r.non2xx, 0),
    errors: runs.reduce((n, r) => n + r.errors, 0),
    timeouts: runs.reduce((n, r) => n + r.timeouts, 0),
    server_cpu_us: runs.every((r) => r.server_cpu_us !== undefined) ? round(median(runs.map((r) => r.server_cpu_us!)), 1) : undefined,
    runs,
  };
}

/** User plus system CPU time of a process so far, in microseconds (procCpuSeconds); the process must be running. */
function procCpuUs(pid: number): number {
  const seconds = procCpuSeconds(pid);
  if (seconds === undefined) throw new Error(`process ${pid} is gone: no CPU time to read`);
  return seconds * 1_000_000;
}

/**
 * A warm-up run (not counted) and then the measured run, same connections and duration for every
 * server. With `serverPid`, the server's CPU per request in the measured run is reported too.
 */
export async function load(url: string, settings: LoadSettings, requests?: AutocannonRequest[], serverPid?: number): Promise<LoadResult> {
  const warm = await autocannon({ url, connections: settings.connections, duration: settings.warmupS, requests });
  const cpuBefore = serverPid === undefined ? 0 : procCpuUs(serverPid);
  const r = await autocannon({ url, connections: settings.connections, duration: settings.durationS, requests });
  const cpu = serverPid === undefined ? undefined : procCpuUs(serverPid) - cpuBefore;
  return {
    rps: round(r.requests.average, 1),
    total: r.requests.total,
    // Failures in the warm-up count too: they would mean the request set-up was wrong.
    non2xx: r.non2xx + warm.non2xx,
    errors: r.errors + warm.errors,
    timeouts: r.timeouts,
    p50_ms: r.latency.p50,
    p99_ms: r.latency.p99,
    server_cpu_us: cpu === undefined || r.requests.total === 0 ? undefined : round(cpu / r.requests.total, 1),
  };
}

/** The hello-world baseline: started, loaded with `settings`, stopped. */
export async function benchHello(settings: LoadSettings): Promise<LoadResult> {
  const { child, url } = await spawnHello();
  try {
    return await load(`${url}/`, settings, undefined, child.pid);
  } finally {
    await stopServer(child);
  }
}

// ---------------------------------------------------------------------------------------------
// The run's temporary directory

/**
 * Runs `work` with a fresh temporary directory; afterwards, and on Ctrl-C or SIGTERM, every
 * child process started here is killed and the directory is removed.
 */
export async function withTempDir<T>(prefix: string, work: (dir: string) => Promise<T>): Promise<T> {
  const dir = await fs.promises.mkdtemp(path.join(os.tmpdir(), prefix));
  const cleanup = () => {
    killChildren();
    fs.rmSync(dir, { recursive: true, force: true });
  };
  const interrupted = () => {
    cleanup();
    process.exit(130);
  };
  process.once("SIGINT", interrupted);
  process.once("SIGTERM", interrupted);
  try {
    return await work(dir);
  } finally {
    process.off("SIGINT", interrupted);
    process.off("SIGTERM", interrupted);
    cleanup();
  }
}

// ---------------------------------------------------------------------------------------------
// Memory and CPU time of a running process

export interface ProcMemory {
  /** resident set size now (VmRSS), bytes */
  rss: number;
  /** peak resident set size so far (VmHWM), bytes */
  hwm: number;
}

/** VmRSS and VmHWM from /proc/<pid>/status; undefined once the process is gone (or off Linux). */
export function procMemory(pid: number): ProcMemory | undefined {
  const status = readProcFile(pid, "status");
  if (status === undefined) return undefined;
  const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? NaN) * 1024;
  return { rss: kib("VmRSS"), hwm: kib("VmHWM") };
}

/**
 * CPU seconds (user + system, every thread) the process has used, from /proc/<pid>/stat;
 * undefined once it is gone (or off Linux). On a shared machine a process's CPU time per
 * request moves far less with the other jobs' load than its rate does.
 */
export function procCpuSeconds(pid: number): number | undefined {
  // utime and stime are fields 14 and 15
  return statSeconds(pid, 14, 15);
}

/** CPU seconds of the process's children that have ended and been waited for (cutime + cstime). */
export function procChildrenCpuSeconds(pid: number): number | undefined {
  return statSeconds(pid, 16, 17);
}

/** The sum of two clock-tick fields of /proc/<pid>/stat (numbered as proc(5) does), in seconds. */
function statSeconds(pid: number, first: number, second: number): number | undefined {
  const stat = readProcFile(pid, "stat");
  if (stat === undefined) return undefined;
  // Fields after the command name (which may hold spaces, so it is skipped by its parenthesis),
  // state being field 3; ticks per second from getconf CLK_TCK.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  clockTicksPerSecond ??= Number(execFileSync("getconf", ["CLK_TCK"]).toString());
  return (Number(fields[first - 3]) + Number(fields[second - 3])) / clockTicksPerSecond;
}

let clockTicksPerSecond: number | undefined;

function readProcFile(pid: number, name: string): string | undefined {
  try {
    return fs.readFileSync(`/proc/${pid}/${name}`, "utf8");
  } catch {
    return undefined;
  }
}

export const MB = 1_000_000;
export const MiB = 1024 * 1024;
