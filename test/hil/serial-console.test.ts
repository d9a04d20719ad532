// The serial console through the real driver (node-serialport's stream), once over
// @serialport/binding-mock and once over a real pty pair made by socat, with the same tests: a
// rig stands for the badge end of the cable. Then transcripts, and replaying them.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SerialPort, SerialPortMock } from "serialport";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { ConsoleEvent } from "../../firmware/index.ts";
import { createReplayTarget } from "../../hil/replay-target.ts";
import {
  ConsoleProtocolError,
  ExpectTimeoutError,
  PortBusyError,
  PortListError,
  PortNotFoundError,
  PortVanishedError,
  SerialConsole,
  SerialConsoleError,
  type SerialBinding,
  type SerialConsoleOptions,
} from "../../hil/serial-console.ts";
import { Transcript, TranscriptFormatError } from "../../hil/transcript.ts";
import { openPtyPair } from "../../hil/pty-pair.ts";

// @serialport/binding-mock, by way of serialport: its own types do not resolve under NodeNext.
const MockBinding = SerialPortMock.binding;
type MockPortBinding = Awaited<ReturnType<typeof MockBinding.open>>;
const FIXTURE = join(import.meta.dirname, "../../fixtures/transcripts/happy-update.txt");

/** The badge end of the cable. */
interface Rig {
  path: string;
  binding?: SerialBinding;
  /** the badge prints: one write, so one read on the host as far as the transport keeps it */
  print(bytes: string | Buffer): Promise<void>;
  /** everything the badge has read from the host */
  heard(): string;
  /** the badge goes away, as when its USB cable is pulled */
  unplug(): Promise<void>;
  dispose(): Promise<void>;
}

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const scratch = () => {
  const dir = mkdtempSync(join(tmpdir(), "badgebench-serial-"));
  cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
  return dir;
};

async function openConsole(options: SerialConsoleOptions): Promise<SerialConsole> {
  const serial = await SerialConsole.open(options);
  cleanups.push(() => serial.close());
  return serial;
}

let mockPorts = 0;

function mockRig(): Rig {
  const path = `/dev/ttyMOCK${++mockPorts}`;
  MockBinding.createPort(path, { record: true, vendorId: "303a", productId: "1001" });
  let badge: MockPortBinding | undefined;
  let pull!: (error: Error) => void;
  const unplugged = new Promise<never>((_, reject) => (pull = reject));
  unplugged.catch(() => {});
  const binding: SerialBinding = {
    list: () => MockBinding.list(),
    async open(options) {
      const port = await MockBinding.open(options);
      badge = port;
      // bindings-cpp fails the pending read when the device goes away; binding-mock cannot, so the rig does.
      const read = port.read.bind(port);
      port.read = (...args) => Promise.race([read(...args), unplugged]);
      return port;
    },
  };
  return {
    path,
    binding,
    print: async (bytes) => badge!.emitData(bytes),
    heard: () => badge!.recording.toString(),
    unplug: async () => pull(Object.assign(new Error("ENXIO: no such device or address, read"), { code: "ENXIO" })),
    dispose: async () => {},
  };
}

async function ptyRig(): Promise<Rig> {
  const pair = await openPtyPair();
  const [hostPath, badgePath, stop] = [pair.host, pair.device, pair.close];
  const badge = new SerialPort({ path: badgePath, baudRate: 115200, autoOpen: false, lock: false });
  await new Promise<void>((resolve, reject) => badge.open((error) => (error ? reject(error) : resolve())));
  let heard = "";
  badge.on("data", (chunk: Buffer) => (heard += chunk.toString()));
  badge.on("error", () => {});
  return {
    path: hostPath,
    print: (bytes) => new Promise((resolve, reject) => badge.write(bytes, (error) => (error ? reject(error) : badge.drain(() => resolve())))),
    heard: () => heard,
    unplug: stop,
    dispose: async () => {
      if (badge.isOpen) await new Promise((resolve) => badge.close(resolve));
      await stop();
    },
  };
}

// The same tests on both ends of a cable: the mock binding and a real pty pair.
const RIGS: Array<[string, () => Promise<Rig> | Rig]> = [
  ["@serialport/binding-mock", mockRig],
  ["a socat pty pair", ptyRig],
];

describe.each(RIGS)("SerialConsole over %s", (_name, makeRig) => {
  let rig: Rig;
  const open = (options: Partial<SerialConsoleOptions> = {}) => openConsole({ port: rig.path, binding: rig.binding, ...options });
  beforeEach(async () => {
    const current = await makeRig();
    cleanups.push(() => current.dispose());
    rig = current;
  });

  it("sees both lines when two arrive in one read", async () => {
    const serial = await open();
    await rig.print("@bb state path=online.checking\r\n@bb state path=online.offered\r\n");
    expect(await serial.expectEvent("state")).toEqual({ kind: "state", path: "online.checking" });
    expect(await serial.expectEvent("state")).toEqual({ kind: "state", path: "online.offered" });
  });

  it("matches a UTF-8 character split across two reads", async () => {
    const serial = await open();
    const line = Buffer.from("I (1450) wifi: connected to “school-iot”\r\n");
    const cut = line.indexOf(0xe2) + 1;
    await rig.print(line.subarray(0, cut));
    await vi.waitFor(() => expect(serial.transcript.entries.filter((entry) => entry.kind === "received")).toHaveLength(1));
    await rig.print(line.subarray(cut));
    const [, network] = await serial.expect(/connected to “(.+)”/, { timeoutMs: 2000 });
    expect(network).toBe("school-iot");
    expect(serial.transcript.entries.filter((entry) => entry.kind === "received")).toHaveLength(2);
  });

  it("matches a prompt that has no newline, and consumes only up to the end of the match", async () => {
    const serial = await open();
    await rig.print("boot done\r\nbadge> ");
    await serial.expect(/badge> $/, { timeoutMs: 2000 });
    await rig.print("@bb state path=awake.idle\n");
    expect(await serial.expectEvent("state", { timeoutMs: 2000 })).toEqual({ kind: "state", path: "awake.idle" });
  });

  it("skips log noise and other events in expectEvent", async () => {
    const serial = await open();
    await rig.print(
      [
        "ets Jun  8 2016 00:22:57",
        "\u001b[0;32mI (312) cpu_start: Starting scheduler on PRO CPU.\u001b[0m",
        "@bb boot slot=ota_0 version=1.4.0 cause=power-on",
        "@bbq not an event",
        "@bb screen text=\"Badge 1.4.0 - ready\\nUpdated 1.4.0\"",
        "",
      ].join("\r\n"),
    );
    const screen = await serial.expectEvent((event) => event.kind === "screen", { timeoutMs: 2000 });
    expect(screen).toEqual({ kind: "screen", text: "Badge 1.4.0 - ready\nUpdated 1.4.0" });
  });

  it("on a timeout names what it waited for, shows the last lines, and releases the port", async () => {
    const serial = await open();
    await rig.print("I (100) badge: one\r\nI (200) badge: two\r\nbadge> ");
    await vi.waitFor(() => expect(serial.recentLines()).toEqual(["I (100) badge: one", "I (200) badge: two"]));
    const failure = await serial.expect(/Checking for update/, { timeoutMs: 150 }).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(ExpectTimeoutError);
    expect((failure as Error).message).toMatch(/^no match for \/Checking for update\/ on \S+ within 150 ms; the last byte came \d+ ms ago, 47 bytes in all/);
    expect((failure as Error).message).toContain('Last lines received:\n  "I (100) badge: one"\n  "I (200) badge: two"\n  "badge> " (no line end yet)');
    await expect(serial.expect(/x/)).rejects.toBe(failure);
    const again = await open();
    await again.close();
  });

  it("says when nothing at all was received, and when what came was not UTF-8", async () => {
    const silent = await open();
    await expect(silent.expectEvent("boot", { timeoutMs: 100 })).rejects.toThrow(/no "boot" console event .* nothing was received since the port opened.*\nNothing was received\./s);
    const noisy = await open();
    await rig.print(Buffer.from([0xff, 0x00, 0xfe, 0x8a, 0x0a]));
    await expect(noisy.expect(/boot/, { timeoutMs: 150 })).rejects.toThrow(/received sequences were not UTF-8: is 115200 baud right\?/);
  });

  it("fails on a malformed console line and releases the port", async () => {
    const serial = await open();
    await rig.print("@bb progress bytes=12 total=many\n");
    const failure = await serial.expectEvent("progress", { timeoutMs: 2000 }).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(ConsoleProtocolError);
    expect((failure as Error).message).toContain('broke the console contract: console line "@bb progress bytes=12 total=many": total="many" is not a whole number');
    await (await open()).close();
  });

  it("takes an event line that a power cut ended early as noise, and reads the boot after it", async () => {
    const serial = await open();
    await rig.print('@bb screen text="Downloading 19% (49 of 256 KiB)"');
    await rig.print("ets Jul 29 2019 12:21:46\r\n\r\nrst:0x1 (POWERON_RESET),boot:0x13 (SPI_FAST_FLASH_BOOT)\r\n@bb boot slot=ota_0 version=1.4.0 cause=power-on\r\n");
    expect(await serial.expectEvent((event) => event.kind === "screen" || event.kind === "boot", { timeoutMs: 2000 })).toEqual({
      kind: "boot",
      slot: "ota_0",
      version: "1.4.0",
      cause: "power-on",
    });
  });

  it("sends a command line, records it, and records what it received", async () => {
    const serial = await open();
    await serial.send({ name: "tap", uid: "04A1B2C3D0" });
    await vi.waitFor(() => expect(rig.heard()).toBe("tap 04A1B2C3D0\n"));
    await rig.print("@bb tap.queued n=1 uid=04A1B2C3D0 at=1795000000\n");
    expect(await serial.expectEvent("tap.queued", { timeoutMs: 2000 })).toMatchObject({ n: 1, uid: "04A1B2C3D0" });
    await serial.close();
    expect(serial.transcript.format()).toMatch(
      /^# badgebench serial transcript 1\n\+\d+\.\d{3} # opened \S+ at 115200 baud\n\+\d+\.\d{3} > tap 04A1B2C3D0\\n\n\+\d+\.\d{3} < @bb tap\.queued n=1 uid=04A1B2C3D0 at=1795000000\\n\n\+\d+\.\d{3} # closed\n$/,
    );
    await expect(serial.send({ name: "status" })).rejects.toThrow(/is closed/);
  });

  it("refuses a port another session holds, naming it as busy", async () => {
    const first = await open();
    await expect(open()).rejects.toThrow(PortBusyError);
    await expect(open()).rejects.toThrow(/serial port \S+ is in use by another program/);
    await rig.print("@bb state path=awake.idle\n");
    expect(await first.expectEvent("state", { timeoutMs: 2000 })).toMatchObject({ path: "awake.idle" });
  });

  it("fails a waiting expect when the device goes away, keeping the transcript", async () => {
    const transcriptPath = join(scratch(), "session.txt");
    const serial = await open({ transcriptPath });
    await rig.print("@bb state path=online.downloading\n");
    await serial.expectEvent("state", { timeoutMs: 2000 });
    const waiting = serial.expectEvent("md5", { timeoutMs: 5000 }).catch((error: unknown) => error);
    await rig.unplug();
    const failure = await waiting;
    expect(failure).toBeInstanceOf(PortVanishedError);
    expect((failure as Error).message).toMatch(/^serial port \S+ went away mid-session \(.+\) after 34 bytes; was the badge unplugged/);
    expect((failure as Error).message).toContain(`Transcript: ${transcriptPath}`);
    const saved = readFileSync(transcriptPath, "utf8");
    expect(saved).toContain("< @bb state path=online.downloading\\n");
    expect(saved).toMatch(/# failed: serial port \S+ went away mid-session/);
  });

  it("names a port that does not exist, and saves the transcript saying so", async () => {
    const transcriptPath = join(scratch(), "missing.txt");
    const missing = `${rig.path}-missing`;
    const failure = await SerialConsole.open({ port: missing, binding: rig.binding, transcriptPath }).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(PortNotFoundError);
    expect((failure as Error).message).toMatch(new RegExp(`^serial port ${missing} does not exist \\(.+\\); is the badge plugged in`));
    expect(readFileSync(transcriptPath, "utf8")).toContain(`# not opened: serial port ${missing} does not exist`);
  });
});

describe("SerialConsole finding its port (over @serialport/binding-mock)", () => {
  it("finds the badge by USB serial number or by VID:PID", async () => {
    const rig = mockRig();
    const { serialNumber } = (await MockBinding.list()).find((port) => port.path === rig.path)!;
    const bySerial = await openConsole({ port: { serialNumber: serialNumber! }, binding: rig.binding });
    expect(bySerial.path).toBe(rig.path);
    await bySerial.close();
    const other = mockRig();
    const both = await SerialConsole.open({ port: { vid: 0x303a, pid: "1001" }, binding: other.binding }).catch((error: unknown) => error);
    expect(both).toBeInstanceOf(SerialConsoleError);
    expect((both as Error).message).toMatch(/^\d+ serial ports have USB id 303a:1001: .*ttyMOCK.*; pick one by serial number or path/);
    await expect(SerialConsole.open({ port: { vid: "0x1A86", pid: "7523" }, binding: rig.binding })).rejects.toThrow(
      /^no serial port has USB id 1a86:7523; the system lists only \/dev\/ttyMOCK/,
    );
  });

  it("finds a port by VID:PID written in any of the usual ways", async () => {
    const path = "/dev/ttyUSBCP2102";
    MockBinding.createPort(path, { vendorId: "10C4", productId: "EA60" });
    const serial = await openConsole({ port: { vid: "0x10c4", pid: 0xea60 }, binding: MockBinding });
    expect(serial.path).toBe(path);
  });

  it("tells the user to pass --port PATH when the ports cannot be listed", async () => {
    const noUdevadm: SerialBinding = { list: () => Promise.reject(new Error("spawn udevadm ENOENT")), open: (options) => MockBinding.open(options) };
    const failure = await SerialConsole.open({ port: { serialNumber: "A1B2" }, binding: noUdevadm }).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(PortListError);
    expect((failure as Error).message).toBe(
      "could not list serial ports to find the one with serial number A1B2 (spawn udevadm ENOENT); name the port by its path instead, e.g. --port /dev/ttyUSB0",
    );
  });

  it.each([
    [{ port: "" }, "port must be a path"],
    [{ port: { serialNumber: "" } }, "port.serialNumber must be a non-empty string"],
    [{ port: { vid: "xyz", pid: 1 } }, 'port.vid "xyz" must be a USB id'],
    [{ port: { vid: 1, pid: 0x10000 } }, "port.pid 65536 must be a USB id"],
    [{ port: "/dev/x", baudRate: 0 }, "baudRate 0 must be a positive whole number"],
  ] as Array<[SerialConsoleOptions, string]>)("refuses options %j", async (options, message) => {
    await expect(SerialConsole.open(options)).rejects.toThrow(TypeError);
    await expect(SerialConsole.open(options)).rejects.toThrow(message);
  });
});

describe("Transcript", () => {
  it("writes any bytes as readable text and reads them back exactly", () => {
    let now = 1000;
    const transcript = new Transcript(() => now);
    transcript.note("opened /dev/ttyUSB0 at 115200 baud");
    now = 1312.4;
    transcript.received(Buffer.concat([Buffer.from("I (312) boot: “ok” \\ \t\r\n\u001b[0m"), Buffer.from([0xff, 0xe2, 0x80])]));
    now = 2000.6;
    transcript.sent(Buffer.from("check\n"));
    transcript.received(Buffer.from("badge> "));
    transcript.note("failed: no /x/\nLast lines received:");
    const text = transcript.format();
    expect(text).toBe(
      [
        "# badgebench serial transcript 1",
        "+0.000 # opened /dev/ttyUSB0 at 115200 baud",
        "+0.312 < I (312) boot: “ok” \\\\ \\t\\r\\n\\x1b[0m\\xff\\xe2\\x80",
        "+1.001 > check\\n",
        "+1.001 < badge>\\x20",
        "+1.001 # failed: no /x/\\nLast lines received:",
        "",
      ].join("\n"),
    );
    expect(Transcript.parse(text).entries).toEqual(transcript.entries);
  });

  it("saves and loads a file, and reads hand-written times and comments", () => {
    const path = join(scratch(), "deep/session.txt");
    const transcript = Transcript.parse("# badgebench serial transcript 1\n\n# a comment\n+1 < a\\n\r\n+1.5 > b\\n\n");
    expect(transcript.entries).toEqual([
      { t: 1000, kind: "received", bytes: Buffer.from("a\n") },
      { t: 1500, kind: "sent", bytes: Buffer.from("b\n") },
    ]);
    transcript.save(path);
    expect(Transcript.load(path).entries).toEqual(transcript.entries);
  });

  it.each([
    ["", 'line 1 is ""; a transcript starts with "# badgebench serial transcript 1"'],
    ["# badgebench serial transcript 1\n0.5 < a", 'line 2: expected "+<seconds> <mark> <bytes>"'],
    ["# badgebench serial transcript 1\n+0.5 ! a", "line 2: expected"],
    ["# badgebench serial transcript 1\n+2 < a\n+1 < b", "line 3: time +1 is earlier than the entry before it (+2)"],
    ["# badgebench serial transcript 1\n+1 < a\\q", 'line 2: unknown escape "\\\\q" at character 2'],
    ["# badgebench serial transcript 1\n+1 < a\\x4", 'line 2: unknown escape "\\\\x"'],
  ])("refuses %j", (text, message) => {
    expect(() => Transcript.parse(text)).toThrow(TranscriptFormatError);
    expect(() => Transcript.parse(text)).toThrow(message);
  });

  it("names the file when a saved transcript is malformed", () => {
    expect(() => Transcript.load(join(import.meta.dirname, "serial-console.test.ts"))).toThrow(/serial-console\.test\.ts: line 1 is /);
  });
});

describe("replaying a transcript", () => {
  it("plays what the badge printed before the host's first command, then waits for that command", async () => {
    const replay = createReplayTarget(Transcript.load(FIXTURE), { speed: 20 });
    const serial = await openConsole({ port: replay.path, binding: replay.binding });
    expect(await serial.expectEvent("boot", { timeoutMs: 2000 })).toEqual({ kind: "boot", slot: "ota_0", version: "1.4.0", cause: "power-on" });
    await serial.expect(/connected to “school-iot”/, { timeoutMs: 2000 });
    await serial.expectEvent((event) => event.kind === "screen" && event.text === "Badge 1.4.0 - ready", { timeoutMs: 2000 });
    // Nothing more comes until the host presses Check for Update, as on the bench.
    await expect(serial.expectEvent("state", { timeoutMs: 300 })).rejects.toThrow(ExpectTimeoutError);
    expect(await replay.finished).toEqual({ played: 9, total: 22 });
  });

  it("plays on when the host sends the recorded command", async () => {
    const replay = createReplayTarget(Transcript.load(FIXTURE), { speed: 20 });
    const serial = await openConsole({ port: replay.path, binding: replay.binding });
    await serial.expectEvent((event) => event.kind === "screen" && event.text === "Badge 1.4.0 - ready", { timeoutMs: 2000 });
    await serial.send({ name: "check" });
    expect(await serial.expectEvent("md5", { timeoutMs: 2000 })).toMatchObject({ result: "ok" });
    expect(await serial.expectEvent("switch", { timeoutMs: 2000 })).toEqual({ kind: "switch", slot: "ota_1" });
    expect(await serial.expectEvent("boot", { timeoutMs: 2000 })).toEqual({ kind: "boot", slot: "ota_1", version: "1.5.0", cause: "restart" });
    expect(await serial.expectEvent("report.cleared", { timeoutMs: 2000 })).toEqual({ kind: "report.cleared", report: "ok|1.5.0" });
    expect(await replay.finished).toEqual({ played: 22, total: 22 });
  });

  it("fails the session when the host sends something the recording does not have", async () => {
    const replay = createReplayTarget(Transcript.load(FIXTURE), { speed: Infinity });
    const serial = await openConsole({ port: replay.path, binding: replay.binding });
    await serial.expectEvent((event) => event.kind === "screen" && event.text === "Badge 1.4.0 - ready", { timeoutMs: 2000 });
    await expect(serial.send({ name: "sync" })).rejects.toThrow('replay: the host sent "sync\\n" where the transcript has "check\\n"');
    expect(await replay.finished).toMatchObject({ played: 9 });
  });

  it("replays a recorded session into the same events", async () => {
    const rig = mockRig();
    const recording = await openConsole({ port: rig.path, binding: rig.binding });
    const printed = [
      "ets Jun  8 2016 00:22:57\r\n@bb boot slot=ota_0 version=1.4.0 cause=wake\r\n",
      "@bb state path=awake.idle\r\n@bb tap.queued n=1 uid=04A1B2",
      Buffer.from("C3D0 at=17\r\n@bb screen text=\"Caf\xc3", "latin1"),
      Buffer.from("\xa9 ok\"\r\n@bb sta", "latin1"),
      "tus version=1.4.0 slot=ota_0 state=awake.idle mv=3810 power=battery token=yes taps=1\r\n",
    ];
    const collect = async (serial: SerialConsole, count: number) => {
      const events: ConsoleEvent[] = [];
      while (events.length < count) events.push(await serial.expectEvent(() => true, { timeoutMs: 2000 }));
      return events;
    };
    for (const [index, bytes] of printed.entries()) {
      await rig.print(bytes);
      await vi.waitFor(() => expect(recording.transcript.entries.filter((entry) => entry.kind === "received")).toHaveLength(index + 1));
    }
    await recording.send({ name: "status" });
    const live = await collect(recording, 5);
    expect(live.at(3)).toEqual({ kind: "screen", text: "Café ok" });
    await recording.close();

    const replay = createReplayTarget(Transcript.parse(recording.transcript.format()), { speed: Infinity });
    const replayed = await openConsole({ port: replay.path, binding: replay.binding });
    await replayed.send({ name: "status" });
    expect(await collect(replayed, 5)).toEqual(live);
    expect(await replay.finished).toEqual({ played: 6, total: 6 });
  });

  it("refuses a speed that is not more than 0", () => {
    expect(() => createReplayTarget(new Transcript(), { speed: 0 })).toThrow(new TypeError("speed 0 must be more than 0 (Infinity plays without waiting)"));
  });
});

describe("closing a port that is already closing", () => {
  it("close() returns once a close the port began on its own (a disconnect) has ended: until then the port is still held", async () => {
    const path = `/dev/ttyMOCK${++mockPorts}`;
    MockBinding.createPort(path, {});
    let unplug!: (error: Error) => void;
    const unplugged = new Promise<never>((_, reject) => (unplug = reject));
    unplugged.catch(() => {});
    // the binding's close waits for the test, as bindings-cpp's waits for the kernel on a busy machine
    let letCloseEnd!: () => void;
    const closeMayEnd = new Promise<void>((resolve) => (letCloseEnd = resolve));
    const binding: SerialBinding = {
      list: () => MockBinding.list(),
      async open(options) {
        const port = await MockBinding.open(options);
        const [read, close] = [port.read.bind(port), port.close.bind(port)];
        port.read = (...args) => Promise.race([read(...args), unplugged]);
        port.close = async () => {
          await closeMayEnd;
          await close();
        };
        return port;
      },
    };
    const serial = await SerialConsole.open({ port: path, binding });
    unplug(Object.assign(new Error("EIO: i/o error, read"), { code: "EIO" }));
    let closed = false;
    // the stream began closing when the read failed; close() is called while that close is under way
    await new Promise((resolve) => setImmediate(resolve));
    const closing = serial.close().then(() => (closed = true));
    await new Promise((resolve) => setImmediate(resolve));
    expect(closed).toBe(false);
    letCloseEnd();
    await closing;
    // the port is free again: the next session opens it
    const next = await SerialConsole.open({ port: path, binding: MockBinding });
    await next.close();
  });
});
