// `badgebench hil ports | monitor | flash` as a user runs them: the real CLI in a child process,
// against a socat pty pair whose other end the test plays the badge on.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { SerialPort } from "serialport";
import { afterEach, describe, expect, it, vi } from "vitest";
import { checkTranscript, linesOf } from "../../hil/model-oracle.ts";
import { Transcript } from "../../hil/transcript.ts";
import { baseEnv, ROOT, run, tempDirs } from "../server/cli-process.ts";
import { openPtyPair } from "../../hil/pty-pair.ts";
import { listFromSysfs } from "../../hil/port-list.ts";

const SCRIPT = join(ROOT, "scripts/cli/badgebench.js");
const scratch = tempDirs("hil-cli");
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const noStack = (text: string) => expect(text).not.toMatch(/\n\s+at /);

describe("hil ports", () => {
  it("lists the ports from /dev and sysfs when udevadm is not there, exit 0", async () => {
    // PATH with node alone: no udevadm, which node-serialport lists ports with on Linux
    const env = baseEnv({ PATH: dirname(process.execPath) });
    const expected = listFromSysfs();
    const text = await run(["hil", "ports"], { env });
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toEqual(expected.length === 0 ? "no serial ports\n" : expect.stringContaining(`${expected[0]!.path}  `));
    const json = await run(["hil", "ports", "--json"], { env });
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toEqual({ object: "list", data: expected.map((port) => expect.objectContaining({ path: port.path })) });
  });

  it("reads a USB port's ids, serial number and maker from sysfs, and leaves out ttys without a port", () => {
    const root = scratch("sysfs");
    const [sys, dev] = [join(root, "sys"), join(root, "dev")];
    const usbDevice = join(sys, "devices/pci0000:00/usb1/1-2");
    mkdirSync(join(usbDevice, "1-2:1.0/tty/ttyACM0"), { recursive: true });
    for (const [file, value] of Object.entries({ idVendor: "303a", idProduct: "1001", serial: "A1B2C3", manufacturer: "Espressif" })) writeFileSync(join(usbDevice, file), `${value}\n`);
    mkdirSync(join(sys, "devices/platform/serial8250/tty/ttyS0"), { recursive: true });
    mkdirSync(join(sys, "bus/serial-base/drivers/serial8250"), { recursive: true });
    symlinkSync(join(sys, "bus/serial-base/drivers/serial8250"), join(sys, "devices/platform/serial8250/driver"));
    mkdirSync(join(sys, "class/tty/tty0"), { recursive: true });
    for (const name of ["ttyACM0", "ttyS0"]) mkdirSync(join(sys, "class/tty", name), { recursive: true });
    symlinkSync(join(usbDevice, "1-2:1.0"), join(sys, "class/tty/ttyACM0/device"));
    symlinkSync(join(sys, "devices/platform/serial8250"), join(sys, "class/tty/ttyS0/device"));
    mkdirSync(dev);
    for (const name of ["ttyACM0", "ttyS0", "tty0"]) writeFileSync(join(dev, name), "");
    expect(listFromSysfs({ sys, dev })).toEqual([{ path: join(dev, "ttyACM0"), vendorId: "303a", productId: "1001", serialNumber: "A1B2C3", manufacturer: "Espressif" }]);
  });
});

interface Badge {
  hostPath: string;
  print(text: string): Promise<void>;
  heard(): string;
}

/** A socat pty pair: the CLI opens `hostPath`, the test is the badge on the other end. */
async function ptyBadge(): Promise<Badge> {
  const pair = await openPtyPair();
  const [hostPath, badgePath] = [pair.host, pair.device];
  const port = new SerialPort({ path: badgePath, baudRate: 115200, autoOpen: false, lock: false });
  await new Promise<void>((resolve, reject) => port.open((error) => (error ? reject(error) : resolve())));
  let heard = "";
  port.on("data", (chunk: Buffer) => (heard += chunk.toString()));
  port.on("error", () => {});
  cleanups.push(async () => {
    if (port.isOpen) await new Promise((resolve) => port.close(resolve));
    await pair.close();
  });
  return {
    hostPath,
    print: (text) => new Promise((resolve, reject) => port.write(text, (error) => (error ? reject(error) : port.drain(() => resolve())))),
    heard: () => heard,
  };
}

interface Monitor {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  exited: Promise<number | null>;
}

/** `badgebench hil monitor ...`, resolved once it says it is monitoring. */
async function startMonitor(args: string[]): Promise<Monitor> {
  const child = spawn(process.execPath, [SCRIPT, "hil", "monitor", ...args], { cwd: ROOT, env: baseEnv(), stdio: ["pipe", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const exited = new Promise<number | null>((resolve) => child.once("close", (code) => resolve(code)));
  cleanups.push(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    await exited;
  });
  await vi.waitFor(() => expect(stderr).toMatch(/^monitoring /m), { timeout: 15_000, interval: 50 });
  return { child, stdout: () => stdout, stderr: () => stderr, exited };
}

const SESSION =
  "ets Jun  8 2016 00:22:57\r\nrst:0x1 (POWERON_RESET),boot:0x13 (SPI_FAST_FLASH_BOOT)\r\n" +
  "\x1b[0;32mI (29) boot: ESP-IDF v5.1.2 2nd stage bootloader\x1b[0m\r\n" +
  "@bb boot slot=ota_0 version=1.4.0 cause=power-on\r\n@bb state path=booting\r\n@bb screen text=Starting...\r\n" +
  "@bb state path=awake.opportunity\r\n@bb state path=awake.idle\r\n@bb screen text=\"Badge 1.4.0 - ready\"\r\n";

describe("hil monitor over a socat pty pair", () => {
  it("prints what the badge sends, exits 0 once --until matched, and saves a transcript that parses", async () => {
    const badge = await ptyBadge();
    const transcript = join(scratch("transcripts"), "session.txt");
    const monitor = await startMonitor(["--port", badge.hostPath, "--transcript", transcript, "--until", "state path=awake\\.idle", "--timeout", "15000"]);
    await badge.print(SESSION);
    expect(await monitor.exited).toBe(0);
    // not a terminal: the lines as received, line ends and colour codes removed (the transcript keeps them)
    expect(monitor.stdout()).toContain("rst:0x1 (POWERON_RESET),boot:0x13 (SPI_FAST_FLASH_BOOT)\nI (29) boot: ESP-IDF v5.1.2 2nd stage bootloader\n");
    expect(monitor.stdout()).toContain("@bb boot slot=ota_0 version=1.4.0 cause=power-on\n@bb state path=booting\n");
    expect(monitor.stdout().trimEnd().split("\n").at(-1)).toBe("@bb state path=awake.idle");
    expect(monitor.stderr()).toContain(`transcript saved to ${transcript}`);
    const saved = Transcript.parse(readFileSync(transcript, "utf8"));
    expect(saved.entries[0]).toMatchObject({ kind: "note", text: `opened ${badge.hostPath} at 115200 baud` });
    expect(linesOf(saved).map((line) => line.text)).toContain("@bb state path=awake.idle");
    expect(checkTranscript(saved)).toMatchObject({ deviation: null, events: 6 });
  });

  it("writes a log without colour codes, a 1 MiB download's progress in a few lines (stdout not a terminal, as under | tee)", async () => {
    const badge = await ptyBadge();
    const transcript = join(scratch("transcripts"), "download.txt");
    const monitor = await startMonitor(["--port", badge.hostPath, "--transcript", transcript, "--until", "^@bb md5", "--timeout", "15000"]);
    const total = 1024 * 1024;
    const screens = Array.from({ length: 101 }, (_, percent) => `@bb screen text="Updating to 1.5.0\\nDownloading ${percent}%"\r\n`);
    const progress = Array.from({ length: 16 }, (_, i) => `@bb progress bytes=${(i + 1) * 65536} total=${total}\r\n`);
    // as the badge prints them: screens and progress interleaved, log lines in colour between
    const download = screens.map((line, i) => line + (i % 6 === 5 ? progress[(i - 5) / 6] ?? "" : "") + (i % 10 === 0 ? `\x1b[0;32mI (${i}) http: body ${i}\x1b[0m\r\n` : "")).join("");
    await badge.print(`${SESSION}@bb state path=online.checking\r\n@bb state path=online.downloading\r\n${download}${progress.slice(-1)[0]}@bb md5 result=ok got=${"a".repeat(32)} want=${"a".repeat(32)}\r\n`);
    expect(await monitor.exited).toBe(0);
    const out = monitor.stdout();
    expect(out).not.toContain("\x1b");
    expect(out).toContain("I (10) http: body 10\n");
    const shown = (pattern: RegExp) => out.split("\n").filter((line) => pattern.test(line));
    expect(shown(/^@bb screen .*Downloading/).map((line) => /(\d+)%/.exec(line)![1])).toEqual(["0", "25", "50", "75", "100"]);
    expect(shown(/^@bb progress/)).toEqual([`@bb progress bytes=65536 total=${total}`, `@bb progress bytes=262144 total=${total}`, `@bb progress bytes=524288 total=${total}`, `@bb progress bytes=786432 total=${total}`, `@bb progress bytes=${total} total=${total}`]);
    // the transcript keeps every line
    expect(linesOf(Transcript.parse(readFileSync(transcript, "utf8"))).filter((line) => line.text.includes("Downloading"))).toHaveLength(101);
  });

  it("sends typed lines as console commands and refuses what the console would", async () => {
    const badge = await ptyBadge();
    const transcript = join(scratch("transcripts"), "typed.txt");
    const monitor = await startMonitor(["--port", badge.hostPath, "--transcript", transcript, "--until", "@bb status", "--timeout", "15000"]);
    monitor.child.stdin!.write("bogus\n  status  \n");
    await vi.waitFor(() => expect(badge.heard()).toBe("status\n"), { timeout: 10_000, interval: 20 });
    await badge.print("@bb status version=1.4.0 slot=ota_0 state=awake.idle mv=3950 power=charging token=yes taps=0\r\n");
    expect(await monitor.exited).toBe(0);
    expect(monitor.stderr()).toMatch(/not sent: unknown command "bogus"/);
    expect(Transcript.parse(readFileSync(transcript, "utf8")).entries).toContainEqual(expect.objectContaining({ kind: "sent", bytes: Buffer.from("status\n") }));
  });

  it("prints one JSON object per line and one for the session with --json, model deviations flagged", async () => {
    const badge = await ptyBadge();
    const transcript = join(scratch("transcripts"), "json.txt");
    const monitor = await startMonitor(["--port", badge.hostPath, "--transcript", transcript, "--until", "^@bb progress", "--timeout", "15000", "--json"]);
    await badge.print("noise\r\n@bb boot slot=ota_0 version=1.4.0 cause=power-on\r\n@bb state path=booting\r\n@bb state path=awake.idle\r\n@bb progress bytes=1 total=2\r\n");
    expect(await monitor.exited).toBe(0);
    const objects = monitor.stdout().trimEnd().split("\n").map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(objects[0]).toMatchObject({ line: "noise", event: null });
    expect(objects[1]).toMatchObject({ event: { kind: "boot", slot: "ota_0", version: "1.4.0", cause: "power-on" } });
    expect(objects[4]).toMatchObject({ event: { kind: "progress" }, deviation: expect.stringMatching(/^in awake\.idle the model allows progress only in online\.downloading/) });
    expect(objects[5]).toEqual({ object: "hil_monitor", port: badge.hostPath, transcript, lines: 5, events: 4, deviations: 1, matched: "@bb progress bytes=1 total=2", exit: 0 });
  });

  it("exits 1 with the recent lines when --until does not match within --timeout", async () => {
    const badge = await ptyBadge();
    const transcript = join(scratch("transcripts"), "timeout.txt");
    const monitor = await startMonitor(["--port", badge.hostPath, "--transcript", transcript, "--until", "never", "--timeout", "1500"]);
    await badge.print("first line\r\n@bb state path=awake.idle\r\n");
    expect(await monitor.exited).toBe(1);
    expect(monitor.stderr()).toContain(`badgebench: no line matched /never/ on ${badge.hostPath} within 1500 ms; last lines received:\n  "first line"\n  "@bb state path=awake.idle"\ntranscript: ${transcript}`);
    noStack(monitor.stderr());
    expect(existsSync(transcript)).toBe(true);
  });

  it("saves the transcript when stopped with SIGTERM", async () => {
    const badge = await ptyBadge();
    const transcript = join(scratch("transcripts"), "sigterm.txt");
    const monitor = await startMonitor(["--port", badge.hostPath, "--transcript", transcript]);
    await badge.print("@bb state path=awake.idle\r\n");
    await vi.waitFor(() => expect(monitor.stdout()).toContain("@bb state path=awake.idle"), { timeout: 10_000, interval: 20 });
    monitor.child.kill("SIGTERM");
    expect(await monitor.exited).toBe(143);
    const saved = Transcript.parse(readFileSync(transcript, "utf8"));
    expect(linesOf(saved).map((line) => line.text)).toEqual(["@bb state path=awake.idle"]);
    expect(saved.entries.at(-1)).toMatchObject({ kind: "note", text: "closed" });
  });

  it("names a port another program holds", async () => {
    const badge = await ptyBadge();
    const holder = new SerialPort({ path: badge.hostPath, baudRate: 115200, autoOpen: false });
    await new Promise<void>((resolve, reject) => holder.open((error) => (error ? reject(error) : resolve())));
    cleanups.push(() => new Promise((resolve) => holder.close(() => resolve())));
    const result = await run(["hil", "monitor", "--port", badge.hostPath, "--transcript", join(scratch("transcripts"), "busy.txt")]);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(new RegExp(`^badgebench: serial port ${badge.hostPath.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")} is in use by another program .*\\n$`));
  });
});

describe("hil monitor and flash: errors a user can fix", () => {
  it("names a port that does not exist, in one line, and exits 1", async () => {
    const transcript = join(scratch("transcripts"), "missing.txt");
    const result = await run(["hil", "monitor", "--port", "/dev/ttyNOPE0", "--transcript", transcript]);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/^badgebench: serial port \/dev\/ttyNOPE0 does not exist .*is the badge plugged in, and is that its path\?\n$/);
    const json = await run(["hil", "monitor", "--port", "/dev/ttyNOPE0", "--transcript", transcript, "--json"]);
    expect(json.code).toBe(1);
    expect(JSON.parse(json.stdout)).toEqual({ error: { code: "no_such_port", message: expect.stringContaining("/dev/ttyNOPE0 does not exist") } });
  });

  it("refuses bad monitor arguments with exit 2", async () => {
    const badRegex = await run(["hil", "monitor", "--port", "/dev/ttyNOPE0", "--until", "(unclosed"]);
    expect(badRegex).toMatchObject({ code: 2, stdout: "" });
    expect(badRegex.stderr).toMatch(/^badgebench: --until "\(unclosed" is not a regular expression: .*\n$/);
    const badPort = await run(["hil", "monitor", "--port", "usb:303a"]);
    expect(badPort.code).toBe(2);
    expect(badPort.stderr).toMatch(/--port usb:303a is not usb:<vid>:<pid>/);
    const noPort = await run(["hil", "monitor"]);
    expect(noPort.code).toBe(2);
    expect(noPort.stderr).toMatch(/Missing required argument: port/);
  });

  it("exits 2 with the message when hil flash gets a bad argument", async () => {
    const dir = scratch("flash");
    const result = await run(["hil", "flash", "--port", "/dev/ttyNOPE0", join(dir, "missing.bin@0x10000")]);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/^badgebench: cannot read .*missing\.bin: no such file\n$/);
    noStack(result.stderr);
    const offset = await run(["hil", "flash", "--port", "/dev/ttyNOPE0", "app.bin@ten", "--json"]);
    expect(offset.code).toBe(2);
    expect(JSON.parse(offset.stdout)).toEqual({ error: { code: "bad_arguments", message: expect.stringContaining('the offset "ten" is not a number') } });
    const none = await run(["hil", "flash", "--port", "/dev/ttyNOPE0"]);
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/^badgebench: Not enough non-option arguments/);
  });
});
