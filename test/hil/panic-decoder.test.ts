// ESP-IDF panics on the console (issue 25): the watcher recognizes the panic handler's reports
// (Guru Meditation with its register dump and backtrace, abort(), the interrupt and task
// watchdogs; cut lines and cut backtraces said to be so), a fast-check fuzz feeds it lines from
// outside, and end to end the C badge's test build panics on its console with its own addresses,
// which the console decodes with addr2line from that build's ELF to function names and file:line.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadScenario } from "../../badge-sim/runners/scenario.ts";
import { runScenario } from "../../badge-sim/runners/scenario-runner.ts";
import { buildAppImage } from "../../firmware/index.ts";
import { decodeBacktrace, describeCrash, ElfError, PanicWatcher, type Crash, type ElfConfig } from "../../hil/panic-decoder.ts";
import { openPtyPair, type PtyPair } from "../../hil/pty-pair.ts";
import { BadgeCrashError, SerialConsole } from "../../hil/serial-console.ts";
import { ROOT, tempDirs } from "../server/cli-process.ts";

const BADGE_DIR = path.join(ROOT, "firmware/reference-badge");
const TEST_BUILD = path.join(BADGE_DIR, "build/reference-badge-test");
const HOST_ELF: ElfConfig = { path: TEST_BUILD, arch: process.arch === "arm64" ? "aarch64" : "x86-64" };
const scratch = tempDirs("panic");

/** Every crash the watcher reports for these lines (and what is open at the end). */
function crashesIn(lines: string[]): Crash[] {
  const watcher = new PanicWatcher();
  const crashes = lines.map((line) => watcher.line(line)).filter((crash) => crash !== null);
  const open = watcher.flush();
  return open ? [...crashes, open] : crashes;
}

describe("the panic watcher", () => {
  it("reads a Guru Meditation report: reason, core, every frame of the backtrace", () => {
    const [crash] = crashesIn([
      "I (1234) badge: @bb state path=online.downloading",
      "Guru Meditation Error: Core  1 panic'ed (LoadProhibited). Exception was unhandled.",
      "",
      "Core  1 register dump:",
      "PC      : 0x400d1b2e  PS      : 0x00060630  A0      : 0x800d0f0c  A1      : 0x3ffb1f70  ",
      "EXCCAUSE: 0x0000001c  EXCVADDR: 0x00000000  ",
      "",
      "Backtrace: 0x400d1b2b:0x3ffb1f70 0x400d0f09:0x3ffb1f90 0x4008a0e6:0x3ffb1fb0 |<-CORRUPTED",
      "Rebooting...",
    ]);
    expect(crash).toMatchObject({ reason: "LoadProhibited", core: 1, damaged: null });
    expect(crash!.frames).toEqual([
      { pc: "0x400d1b2b", sp: "0x3ffb1f70" },
      { pc: "0x400d0f09", sp: "0x3ffb1f90" },
      { pc: "0x4008a0e6", sp: "0x3ffb1fb0" },
    ]);
    expect(crash!.lines).toContain("Core  1 register dump:");
  });

  it("reads abort(), the interrupt watchdog and the task watchdog", () => {
    expect(crashesIn(["abort() was called at PC 0x400d2c8b on core 0", "", "Backtrace: 0x40081a2a:0x3ffb1d40"])[0]).toMatchObject({ reason: "abort() at 0x400d2c8b", core: 0, frames: [{ pc: "0x40081a2a" }] });
    expect(crashesIn(["Guru Meditation Error: Core  0 panic'ed (Interrupt wdt timeout on CPU0).", "Backtrace: 0x1:0x2"])[0]).toMatchObject({ reason: "Interrupt wdt timeout on CPU0", core: 0 });
    const [taskWdt] = crashesIn([
      "E (10123) task_wdt: Task watchdog got triggered. The following tasks did not reset the watchdog in time:",
      "E (10123) task_wdt:  - IDLE (CPU 0)",
      "abort() was called at PC 0x400d5f37 on core 0",
      "Backtrace: 0x400d5f34:0x3ffb0e80 0x40083b8d:0x3ffb0ea0",
    ]);
    expect(taskWdt).toMatchObject({ reason: "task watchdog", frames: [{ pc: "0x400d5f34" }, { pc: "0x40083b8d" }] });
    expect(taskWdt!.lines).toContain("abort() was called at PC 0x400d5f37 on core 0");
  });

  it("says what was cut: a panic line cut in the middle, a backtrace cut mid-frame, a report cut before its backtrace", () => {
    const [cutLine] = crashesIn(["Guru Meditation Error: Core  0 pani", "ets Jul 29 2019 12:21:46", "rst:0xc (SW_CPU_RESET)"]);
    expect(cutLine).toMatchObject({ reason: "unknown", frames: [] });
    expect(cutLine!.damaged).toBe('its first line was cut in the middle: "Guru Meditation Error: Core  0 pani"; the report ended without a backtrace');
    expect(describeCrash(cutLine!, null)).toBe(`the badge crashed: unknown (${cutLine!.damaged})`);
    const [cutTrace] = crashesIn(["Guru Meditation Error: Core  0 panic'ed (StoreProhibited). Exception was unhandled.", "Backtrace: 0x400d1b2b:0x3ffb1f70 0x400d0f"]);
    expect(cutTrace).toMatchObject({ reason: "StoreProhibited", frames: [{ pc: "0x400d1b2b" }], damaged: 'the backtrace was cut at "0x400d0f" after 1 frames' });
    expect(crashesIn(["abort() was called at PC 0x1 on core 0"])[0]!.damaged).toBe("the report was cut off before its backtrace");
    expect(crashesIn(["I (1) boot: ESP-IDF v5.1", "@bb boot slot=ota_0 version=1.4.0 cause=power-on", "Backtrace: 0x1:0x2"])).toEqual([]);
  });

  it("takes any line from outside without throwing, and reads every well-formed backtrace whole (fuzz)", () => {
    const hex = fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }).map((n) => `0x${n.toString(16).padStart(8, "0")}`);
    const line = fc.oneof(
      fc.string(),
      fc.constantFrom("Guru Meditation Error: Core  0 panic'ed (", "abort() was called at PC ", "Backtrace:", "Rebooting...", "rst:0x1 (POWERON_RESET)", "E (1) task_wdt: Task watchdog got triggered."),
      fc.tuple(fc.constantFrom("Guru Meditation", "Backtrace: 0x", "abort() was"), fc.string()).map(([start, rest]) => start + rest),
    );
    fc.assert(
      fc.property(fc.array(line, { maxLength: 30 }), (lines) => {
        for (const crash of crashesIn(lines)) {
          expect(crash.reason).toMatch(/./);
          for (const frame of crash.frames) expect(frame.pc).toMatch(/^0x[0-9a-fA-F]+$/);
        }
      }),
    );
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 1 }), fc.array(fc.tuple(hex, hex), { minLength: 1, maxLength: 20 }), fc.string().filter((reason) => !reason.includes("\n") && reason.length > 0), (core, frames, reason) => {
        const [crash] = crashesIn([`Guru Meditation Error: Core  ${core} panic'ed (${reason}).`, `Backtrace: ${frames.map(([pc, sp]) => `${pc}:${sp}`).join(" ")}`]);
        expect(crash).toMatchObject({ core, damaged: null, frames: frames.map(([pc, sp]) => ({ pc, sp })) });
      }),
    );
  });
});

describe("a panic on the C badge, decoded from its ELF", () => {
  let pair: PtyPair;
  let badge: ChildProcess;
  beforeAll(async () => {
    execFileSync("make", ["--no-print-directory", "-C", BADGE_DIR, "build/reference-badge-test"], { stdio: ["ignore", "ignore", "inherit"] });
    const dir = scratch("badge");
    fs.writeFileSync(path.join(dir, "badge.bin"), buildAppImage({ version: "1.4.0", size: 16384 }));
    execFileSync(TEST_BUILD, ["flash", "--flash", path.join(dir, "flash.bin"), path.join(dir, "badge.bin")], { stdio: "ignore" });
    // a server nobody serves: the badge boots and idles, which is all a panic needs
    execFileSync(TEST_BUILD, ["provision", "--nvs", path.join(dir, "nvs.txt"), "--server", "http://127.0.0.1:9", "--token", "dtk_test_panic"], { stdio: "ignore" });
    pair = await openPtyPair();
    badge = spawn(TEST_BUILD, ["run", "--console", pair.device, "--flash", path.join(dir, "flash.bin"), "--nvs", path.join(dir, "nvs.txt")], { stdio: "ignore" });
    // its first boot over (a command typed while it boots is dropped, as a UART reset drops it)
    const serial = await SerialConsole.open({ port: pair.host });
    await serial.expectEvent((event) => event.kind === "state" && event.path === "awake.idle", { timeoutMs: 20_000 });
    await serial.close();
  });
  afterAll(async () => {
    badge?.kill("SIGKILL");
    await pair?.close();
  });

  /** Opens the console, waits for the badge to idle, types `line` as a person would and returns the crash the console failed with. */
  async function crashOn(line: string, elf: ElfConfig): Promise<BadgeCrashError> {
    const serial = await SerialConsole.open({ port: pair.host, describeCrash: async (crash) => describeCrash(crash, await decodeBacktrace(elf, "1.4.0", crash.frames).catch((error: ElfError) => error)) });
    try {
      await serial.send({ name: "status" });
      await serial.expectEvent("status");
      // `panic` is the test build's own command, not the console contract's: typed as bytes, as a person at hil monitor would
      fs.writeFileSync(pair.host, `${line}\n`);
      const failure = await serial.expectEvent("state", { timeoutMs: 20_000 }).catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(BadgeCrashError);
      return failure as BadgeCrashError;
    } finally {
      await serial.close();
    }
  }

  const sourceLine = (file: string, line: number) => fs.readFileSync(file, "utf8").split("\n")[line - 1]!;

  it("fails the console with the reason and each frame's function and file:line, read by addr2line from the ELF", async () => {
    const error = await crashOn("panic", HOST_ELF);
    expect(error.crash).toMatchObject({ reason: "LoadProhibited", core: 0, damaged: null });
    const lines = error.message.split("\n");
    expect(lines[0]).toBe(`${pair.host}: the badge crashed on core 0: LoadProhibited`);
    // the frames as the ELF says: the crash, the command that called it, the console loop, main
    const frames = lines.filter((text) => /^ {2}#\d+ 0x/.test(text));
    expect(frames.length).toBe(error.crash.frames.length);
    const at = (text: string) => /^ {2}#\d+ 0x[0-9a-f]+ (\S+) at (\S+):(\d+)$/.exec(text);
    const [crash, command] = [at(frames[0]!), at(frames[1]!)];
    expect([crash?.[1], command?.[1]]).toEqual(["crash", "host_test_command"]);
    expect(sourceLine(crash![2]!, Number(crash![3]))).toContain("_Unwind_Backtrace(");
    expect(sourceLine(command![2]!, Number(command![3]))).toContain("crash(kind)");
    expect(frames.some((text) => at(text)?.[1] === "run_command" && at(text)?.[2]?.endsWith("host.c"))).toBe(true);
    expect(frames.some((text) => at(text)?.[1] === "main")).toBe(true);
    // libc's frames lie outside the badge's ELF: said so, not guessed
    expect(frames.some((text) => text.endsWith("(no symbol of the ELF covers this address)"))).toBe(true);
    expect(error.failedCheck).toMatchObject({ field: "crash", passed: false });
  });

  it("decodes the abort() and watchdog variants the same way", async () => {
    const aborted = await crashOn("panic abort", HOST_ELF);
    expect(aborted.crash.reason).toMatch(/^abort\(\) at 0x[0-9a-f]+$/);
    expect(aborted.message).toMatch(/#1 0x[0-9a-f]+ host_test_command at \S+host-panic\.c:\d+/);
    const watchdog = await crashOn("panic wdt", HOST_ELF);
    expect(watchdog.crash.reason).toBe("Interrupt wdt timeout on CPU0");
    expect(watchdog.message).toMatch(/#0 0x[0-9a-f]+ crash at /);
  });

  it("says in one line that an ELF of another architecture cannot decode it, keeping the addresses", async () => {
    const error = await crashOn("panic", { ...HOST_ELF, arch: "xtensa" });
    const [first, second, ...rest] = error.message.split("\n");
    expect(first).toMatch(/the badge crashed on core 0: LoadProhibited$/);
    expect(second).toMatch(/^backtrace not decoded: \S+reference-badge-test is built for [^,]+, and the badge is xtensa \(the rig file's elf\.arch\): point elf\.path at the release's own ELF: 0x[0-9a-f]+( 0x[0-9a-f]+)+$/);
    expect(rest.filter((line) => line.startsWith("  #"))).toEqual([]);
  });
});

describe("a crash in a scenario", () => {
  it("fails the scenario at once with the crash as its failed check", async () => {
    const scenario = loadScenario(path.join(ROOT, "fixtures/scenarios/happy-path.json"));
    const crash: Crash = { reason: "LoadProhibited", core: 0, lines: [], frames: [], damaged: null };
    const result = await runScenario(scenario, async () => ({ serverUrl: "http://127.0.0.1:9", token: "t", deviceId: "d", apiKey: "k", close: async () => {} }), {
      target: async () => {
        throw new BadgeCrashError("/dev/ttyUSB0: the badge crashed on core 0: LoadProhibited", crash);
      },
    });
    expect(result).toMatchObject({ outcome: "failed", checks: [{ field: "crash", expected: "no crash", observed: "/dev/ttyUSB0: the badge crashed on core 0: LoadProhibited", passed: false }] });
  });
});
