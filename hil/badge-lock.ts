// One run per badge (issue 25): `hil run` takes an exclusive OS file lock per badge, which the
// kernel releases when the process holding it dies however it dies (SIGKILL, a crash, a power cut
// of the CI machine's container), so a crashed run never leaves a badge reserved. A second run
// waits for it up to `--wait` seconds, saying who holds it (pid, command, since when), or fails
// at once.
//
// Node has no flock(2). The lock is held by a child: util-linux's flock(1) (on every Linux, as
// socat and the serial drivers the rig needs are) locks the file and runs `cat`, which reads the
// pipe from this process: when this process dies, the pipe closes, cat ends, flock exits and the
// kernel drops the lock. fs-ext would hold it in this process, but is a native addon built at
// install time on every machine; a lock *file* (mkdir/proper-lockfile) is not released by the
// kernel at all and needs a staleness guess. Who holds the lock is written into the file itself
// once it is taken (JSON: pid, command, since); a file left by a dead process is just a file, and
// the next run takes the lock at once.
import { spawn, type ChildProcess } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

/** Where the locks live: one directory for every user of this machine's badges. */
export function lockDirectory(): string {
  return process.env.BADGEBENCH_LOCK_DIR ?? path.join(os.tmpdir(), "badgebench-locks");
}

/** The lock file of a badge, named after what identifies it on this machine: its port. */
export function lockFileFor(port: string | object): string {
  const id = typeof port === "string" ? path.resolve(port) : JSON.stringify(port);
  const readable = id.replace(/[^A-Za-z0-9]+/g, "-").replace(/^-|-$/g, "").slice(-40);
  const hash = crypto.createHash("sha256").update(id).digest("hex").slice(0, 8);
  return path.join(lockDirectory(), `${readable}-${hash}.lock`);
}

export interface Holder {
  pid: number;
  command: string;
  since: string;
}

/** A badge another run holds: the message names it, the holder, and what to do. */
export class BadgeBusyError extends Error {
  override name = "BadgeBusyError";
}

export interface BadgeLock {
  readonly file: string;
  release(): Promise<void>;
}

/** What the lock file says about its holder, or null (empty, or not ours). */
export function readHolder(file: string): Holder | null {
  try {
    const holder = JSON.parse(fs.readFileSync(file, "utf8")) as Holder;
    return typeof holder.pid === "number" ? holder : null;
  } catch {
    return null;
  }
}

const describeHolder = (holder: Holder | null) => (holder ? `pid ${holder.pid} (${holder.command}) since ${holder.since}` : "another process (it did not say which)");

export interface LockOptions {
  /** seconds to wait for a badge another process holds (0: fail at once) */
  waitS: number;
  /** hears, in one line, that the run waits (and for whom), or that it took over a dead process's lock file */
  say?: (message: string) => void;
}

/** Is a process of this pid alive (signal 0 checks without sending)? */
function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * Takes the badge's lock: at once when it is free, else waits up to `waitS` seconds (0: fails at
 * once), saying who holds it. `what` names the badge in messages.
 */
export async function lockBadge(what: string, port: string | object, options: LockOptions): Promise<BadgeLock> {
  const file = lockFileFor(port);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  let child = await tryFlock(file, 0);
  const left = child && readHolder(file);
  if (left && !isRunning(left.pid)) options.say?.(`badge ${what}: its lock file names pid ${left.pid} (${left.command}) since ${left.since}, which is gone; the lock was free, taken over`);
  if (!child) {
    const holder = readHolder(file);
    if (options.waitS <= 0) throw new BadgeBusyError(`badge ${what} is in use by ${describeHolder(holder)}: wait for it with --wait SECONDS, or stop that run (lock ${file})`);
    options.say?.(`badge ${what} is in use by ${describeHolder(holder)}; waiting up to ${options.waitS} s`);
    child = await tryFlock(file, options.waitS);
    if (!child) throw new BadgeBusyError(`badge ${what} is still in use by ${describeHolder(readHolder(file) ?? holder)} after ${options.waitS} s (lock ${file})`);
  }
  const holder: Holder = { pid: process.pid, command: process.argv.slice(1).map((word) => path.basename(word)).join(" ").slice(0, 200), since: new Date().toISOString() };
  fs.writeFileSync(file, `${JSON.stringify(holder)}\n`);
  const locked = child;
  return {
    file,
    release: async () => {
      if (locked.exitCode !== null || locked.signalCode !== null) return;
      const gone = new Promise((resolve) => locked.once("close", resolve));
      // referenced again, so this process waits for the lock to go
      locked.ref();
      for (const stream of [locked.stdin, locked.stdout, locked.stderr]) (stream as unknown as { ref?: () => void })?.ref?.();
      locked.stdin!.end(); // cat ends, flock exits, the lock goes
      await gone;
    },
  };
}

/** flock -x on `file` holding it with cat, waiting up to `waitS` (0: not at all); the child once it holds the lock, or null. */
function tryFlock(file: string, waitS: number): Promise<ChildProcess | null> {
  const wait = waitS > 0 ? ["-w", String(waitS)] : ["-n"];
  // 75 (EX_TEMPFAIL) when the lock is taken; `echo` says it is held, then cat holds it as long as our pipe is open
  const child = spawn("flock", ["-x", ...wait, "-E", "75", file, "sh", "-c", "echo locked; exec cat >/dev/null"], { stdio: ["pipe", "pipe", "pipe"] });
  return new Promise((resolve, reject) => {
    let stderr = "";
    child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
    child.stdout!.once("data", () => {
      // the child must not keep this process alive; it ends with it
      child.unref();
      for (const stream of [child.stdin, child.stdout, child.stderr]) (stream as unknown as { unref?: () => void })?.unref?.();
      resolve(child);
    });
    child.once("error", (error) => reject(new Error(`cannot lock ${file}: flock(1) from util-linux is needed (${error.message})`)));
    child.once("close", (code) => {
      if (code === 75) resolve(null);
      else reject(new Error(`cannot lock ${file}: flock exited ${code}${stderr ? `: ${stderr.trim()}` : ""}`));
    });
  });
}

/** Takes every badge's lock, or none: on a failure the ones taken are released before the error. */
export async function lockBadges(badges: Array<{ name: string; port: string | object }>, options: LockOptions): Promise<BadgeLock[]> {
  const locks: BadgeLock[] = [];
  try {
    for (const badge of badges) locks.push(await lockBadge(badge.name, badge.port, options));
    return locks;
  } catch (error) {
    await Promise.all(locks.map((lock) => lock.release()));
    throw error;
  }
}
