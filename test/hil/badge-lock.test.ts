// A badge reserved by one run at a time (issue 25): `hil run` holds an OS file lock per badge
// (hil/badge-lock.ts: flock(1) holding it for the process), so a second run fails at once saying
// who holds it, or waits up to --wait; a run SIGKILLed while it holds the locks leaves nothing
// locked, as the kernel drops them. And the farm's bad input: one line, exit 2, nothing locked.
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { BadgeBusyError, lockBadge, lockBadges, lockFileFor, readHolder } from "../../hil/badge-lock.ts";
import { openPtyPair } from "../../hil/pty-pair.ts";
import { startSimServer } from "../../scripts/harness/sim-server.ts";
import { baseEnv, ROOT, run, tempDirs } from "../server/cli-process.ts";

const SCRIPT = path.join(ROOT, "scripts/cli/badgebench.js");
const HAPPY = path.join(ROOT, "fixtures/scenarios/happy-path.json");
const scratch = tempDirs("badge-lock");
const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});
const lockDir = scratch("locks");
process.env.BADGEBENCH_LOCK_DIR = lockDir;
afterAll(() => void delete process.env.BADGEBENCH_LOCK_DIR);

/** Is the lock free (flock -n takes it at once)? */
const isFree = (file: string) => spawnSync("flock", ["-n", file, "true"]).status === 0;

describe("the badge lock", () => {
  it("takes over at once a lock file a dead process left, and says so in the file", async () => {
    const port = path.join(scratch("dead"), "ttyDEAD");
    const file = lockFileFor(port);
    const dead = spawnSync("true").pid!;
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, JSON.stringify({ pid: dead, command: "badgebench hil run (crashed)", since: "2026-01-01T00:00:00.000Z" }));
    const said: string[] = [];
    const lock = await lockBadge("bench-1", port, { waitS: 0, say: (line) => said.push(line) });
    expect(said).toEqual([`badge bench-1: its lock file names pid ${dead} (badgebench hil run (crashed)) since 2026-01-01T00:00:00.000Z, which is gone; the lock was free, taken over`]);
    expect(readHolder(file)).toMatchObject({ pid: process.pid });
    expect(isFree(file)).toBe(false);
    await lock.release();
    expect(isFree(file)).toBe(true);
  });

  it("makes a second run fail at once naming the holder, or wait for it; SIGKILLing the holder frees the badge", async () => {
    const server = await startSimServer();
    cleanups.push(() => server.close());
    const device = await server.addDevice("lock test badge");
    // what the happy path needs, so the run plays it (and holds the badge) rather than skip it
    await server.publish({ version: "1.4.0", size: 4096 });
    await server.publish({ version: "1.5.0", size: 4096 });
    // nothing answers on the badge end: the run holds the lock while it waits for a boot, 10 s a try;
    // with five retries about a minute, however long the two runs below take to start on a busy machine
    const pair = await openPtyPair();
    cleanups.push(pair.close);
    const dir = scratch("rig");
    const rig = path.join(dir, "rig.json");
    fs.writeFileSync(rig, JSON.stringify({ name: "lock-rig", port: pair.host, power: null, server: { url: `${server.url}/`, deviceToken: device.token, dataDir: server.dataDir } }));
    const env = baseEnv({ BADGEBENCH_LOCK_DIR: lockDir });
    const holder = spawn(process.execPath, [SCRIPT, "hil", "run", HAPPY, "--rig", rig, "--retries", "5"], { cwd: dir, env, stdio: "ignore" });
    cleanups.push(() => void holder.kill("SIGKILL"));
    const file = lockFileFor(pair.host);
    await expect.poll(() => readHolder(file)?.pid, { timeout: 120_000 }).toBe(holder.pid);

    const second = await run(["hil", "run", HAPPY, "--rig", rig], { cwd: dir, env });
    expect(second.code).toBe(4);
    const since = readHolder(file)!.since;
    expect(second.stderr).toBe(
      `badgebench: badge lock-rig is in use by pid ${holder.pid} (badgebench.js hil run happy-path.json --rig rig.json --retries 5) since ${since}: wait for it with --wait SECONDS, or stop that run (lock ${file})\n`,
    );
    const waited = await run(["hil", "run", HAPPY, "--rig", rig, "--wait", "1"], { cwd: dir, env });
    expect(waited.code).toBe(4);
    expect(waited.stderr).toMatch(new RegExp(`^badge lock-rig is in use by pid ${holder.pid} .*; waiting up to 1 s\\nbadgebench: badge lock-rig is still in use by pid ${holder.pid} .* after 1 s`));

    // a run waiting for the badge gets it once the holder is killed: the kernel released the lock
    const waiting = lockBadge("lock-rig", pair.host, { waitS: 60 });
    holder.kill("SIGKILL");
    const lock = await waiting;
    expect(readHolder(file)).toMatchObject({ pid: process.pid });
    await lock.release();
    expect(isFree(file)).toBe(true);
  });

  it("fails at once with --wait 0 when another process holds it, and never takes it", async () => {
    const port = path.join(scratch("busy"), "ttyBUSY");
    const first = await lockBadge("bench-2", port, { waitS: 0 });
    cleanups.push(() => first.release());
    await expect(lockBadge("bench-2", port, { waitS: 0 })).rejects.toThrow(BadgeBusyError);
    await expect(lockBadge("bench-2", port, { waitS: 0 })).rejects.toThrow(new RegExp(`^badge bench-2 is in use by pid ${process.pid} \\(`));
  });
});

describe("a farm's locks", () => {
  it("are taken all or none: one badge busy releases the ones already taken before it says so", async () => {
    const dir = scratch("farm-locks");
    const [a, b] = [path.join(dir, "ttyA"), path.join(dir, "ttyB")];
    const held = await lockBadge("b", b, { waitS: 0 });
    cleanups.push(() => held.release());
    await expect(lockBadges([{ name: "a", port: a }, { name: "b", port: b }], { waitS: 0 })).rejects.toThrow(/^badge b is in use by pid \d+ /);
    expect(isFree(lockFileFor(a))).toBe(true);
    expect(isFree(lockFileFor(b))).toBe(false);
  });
});

describe("a farm rig file's bad input", () => {
  it("gets one line and exit 2 for a port named twice, two badges on one relay, no --parallel, --retries -1; no badge left locked", async () => {
    const server = await startSimServer();
    cleanups.push(() => server.close());
    const [a, b] = [await server.addDevice("farm a"), await server.addDevice("farm b")];
    const pair = await openPtyPair();
    const other = await openPtyPair();
    cleanups.push(pair.close, other.close);
    const dir = scratch("rig");
    const relay = (topic: string) => ({ broker: "mqtt://127.0.0.1:1883", topic });
    const farm = (name: string, badges: object[]) => {
      const file = path.join(dir, `${name}.json`);
      fs.writeFileSync(file, JSON.stringify({ name: "farm", badges, server: { url: `${server.url}/`, dataDir: server.dataDir } }));
      return file;
    };
    const badgeA = { name: "a", port: pair.host, power: relay("farm-a"), deviceToken: a.token };
    const badgeB = { name: "b", port: other.host, power: relay("farm-b"), deviceToken: b.token };
    // a lock directory of this test's own, which taking any badge's lock would create
    const locks = path.join(scratch("bad-input"), "locks");
    const env = baseEnv({ BADGEBENCH_LOCK_DIR: locks });
    const cases = [
      { args: ["--rig", farm("same-port", [badgeA, { ...badgeB, port: pair.host }]), "--parallel"], line: `same-port.json: not a valid rig file:\n  badges[1].port: ${pair.host} is badge a's port as well: one badge per port` },
      { args: ["--rig", farm("same-relay", [badgeA, { ...badgeB, power: relay("farm-a") }]), "--parallel"], line: "same-relay.json: not a valid rig file:\n  badges[1].power.topic: the relay farm-a on mqtt://127.0.0.1:1883 is badge a's as well: one relay per badge, or a cut would switch both off" },
      { args: ["--rig", farm("no-parallel", [badgeA, badgeB])], line: "no-parallel.json names 2 badges: add --parallel to spread the scenarios over them" },
      { args: ["--rig", farm("retries", [badgeA, badgeB]), "--parallel", "--retries", "-1"], line: "--retries takes a whole number of retries, 0 or more (got -1)" },
    ];
    for (const { args, line } of cases) {
      const result = await run(["hil", "run", HAPPY, ...args], { cwd: dir, env });
      expect({ code: result.code, stderr: result.stderr }, result.stdout).toEqual({ code: 2, stderr: `badgebench: ${line}\n` });
    }
    // refused before any lock was taken (a lock the run had taken, the kernel would have freed as it exited: free proves nothing)
    expect(fs.existsSync(locks)).toBe(false);
  });
});
