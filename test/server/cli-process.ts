// Spawns the real badgebench command: one-shot admin commands and `serve` processes; and the
// temporary directories the CLI tests give it.
import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll } from "vitest";
import { openStore } from "../../server/store/database.ts";

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const SCRIPT = path.join(ROOT, "scripts/cli/badgebench.js");
export const DEMO = path.join(ROOT, "fixtures/demo-school.json");
export const DB_FILE = "badgebench.sqlite";
export const LISTENING = /^listening on http:\/\/127\.0\.0\.1:\d+$/;
const CLI_TIMEOUT_MS = 20_000;

/** The environment a user would have, minus anything that changes where or how the CLI runs. */
export function baseEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = { ...process.env };
  delete env.BADGEBENCH_DATA;
  delete env.PORT;
  delete env.HOST;
  delete env.LOG_LEVEL;
  delete env.BADGEBENCH_SQLITE_SYNC;
  delete env.DATABASE_URL;
  delete env.DATABASE_POOL_SIZE;
  delete env.DATABASE_STATEMENT_TIMEOUT_MS;
  delete env.DATABASE_CHANGE_CHECK_MS;
  for (const name of Object.keys(env)) if (name.startsWith("BADGEBENCH_WEBHOOK_")) delete env[name];
  return { ...env, ...extra };
}

export interface RunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export interface RunOptions {
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** What node runs instead of the badgebench command, e.g. ["--import", "tsx", "scripts/cli/publish.ts"]. */
  program?: string[];
  /** ms before the command is killed and the run rejects (default 20 s) */
  timeoutMs?: number;
}

/** Runs one CLI command to completion; never rejects on a non-zero exit. */
export function run(args: string[], options: RunOptions = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...(options.program ?? [SCRIPT]), ...args], {
      cwd: options.cwd ?? ROOT,
      env: options.env ?? baseEnv(),
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`badgebench ${args.join(" ")} timed out\nstdout: ${stdout}\nstderr: ${stderr}`));
    }, options.timeoutMs ?? CLI_TIMEOUT_MS);
    child.on("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

// Running servers, killed (by their own pid) if a test leaves one behind.
export interface Server {
  url: string;
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}
const servers = new Set<Server>();

/**
 * Starts `badgebench serve ...` (or `program`, e.g. the built dist/serve.js) and resolves once it
 * printed its first stdout line.
 */
export function serve(args: string[], options: { program?: string[]; env?: Record<string, string> } = {}): Promise<Server> {
  const child = spawn(process.execPath, [...(options.program ?? [SCRIPT, "serve"]), "--port", "0", ...args], {
    cwd: ROOT,
    env: baseEnv(options.env),
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout!.setEncoding("utf8");
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on("close", (code, signal) => resolve({ code, signal })),
  );
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`serve did not start\nstdout: ${stdout}\nstderr: ${stderr}`));
    }, CLI_TIMEOUT_MS);
    child.on("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`serve exited early (code ${code}, signal ${signal})\nstdout: ${stdout}\nstderr: ${stderr}`));
    });
    child.stdout!.on("data", (chunk: string) => {
      const before = stdout;
      stdout += chunk;
      if (before.includes("\n") || !stdout.includes("\n")) return;
      clearTimeout(timer);
      const firstLine = stdout.slice(0, stdout.indexOf("\n"));
      const server: Server = {
        url: firstLine.replace(/^listening on /, ""),
        child,
        stdout: () => stdout,
        stderr: () => stderr,
        exited,
      };
      servers.add(server);
      if (LISTENING.test(firstLine)) resolve(server);
      else reject(new Error(`serve printed '${firstLine}' instead of 'listening on http://127.0.0.1:PORT'`));
    });
  });
}

/** SIGTERM, then the exit status. */
export async function stop(server: Server) {
  server.child.kill("SIGTERM");
  const result = await server.exited;
  servers.delete(server);
  return result;
}

/** Kills (SIGKILL) every server a test left running. */
export async function killLeftoverServers() {
  for (const server of servers) {
    server.child.kill("SIGKILL");
    await server.exited;
  }
  servers.clear();
}

/** A maker of temporary directories for one test file, all removed after its tests. */
export function tempDirs(prefix: string): (label: string) => string {
  const made: string[] = [];
  afterAll(() => {
    for (const dir of made) fs.rmSync(dir, { recursive: true, force: true });
  });
  return (label) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), `badgebench-${prefix}-${label}-`));
    made.push(dir);
    return dir;
  };
}

/** `dir` holding an empty store, as `serve` leaves it: only the server creates one, the admin commands open it. */
export async function storeIn(dir: string): Promise<string> {
  const store = await openStore({ dataDir: dir });
  await store.close();
  return dir;
}
