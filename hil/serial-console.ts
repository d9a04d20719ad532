// The host's end of a badge's USB serial console, in the manner of pytest-embedded's DUT: tests
// expect() what the badge prints and send() it console commands (firmware/console.ts), and the
// whole session is recorded as a transcript.
//
// expect() searches everything received and not yet consumed, decoded as a stream, so two lines
// in one read, a UTF-8 character split across two reads and a prompt without a newline all match
// (each is an expect race or a dead reader in other rigs). A session that fails in any way (the
// port missing or busy, a timeout, the device gone, a malformed console line) is over: the port is
// released and the transcript saved before the error reaches the caller, so a failed test never
// leaves a locked port behind, and the error names what failed and shows the last lines seen.
import { once } from "node:events";
import { existsSync } from "node:fs";
import { ReadlineParser } from "@serialport/parser-readline";
import { SerialPortStream, type OpenOptions } from "@serialport/stream";
import { SerialPort } from "serialport";
import {
  formatConsoleCommand,
  parseConsoleLine,
  type ConsoleCommand,
  type ConsoleEvent,
  type ConsoleEventKind,
  type ConsoleEventOf,
} from "../firmware/index.ts";
import { describeCrash, PanicWatcher, type Crash } from "./panic-decoder.ts";
import { listSerialPorts, type PortInfo } from "./port-list.ts";
import { Transcript } from "./transcript.ts";

/** node-serialport's binding: how the stream reaches the hardware (or a mock of it) */
export type SerialBinding = OpenOptions["binding"];

export const DEFAULT_BAUD_RATE = 115_200;
export const DEFAULT_EXPECT_TIMEOUT_MS = 10_000;
/** how many received lines an error shows */
const RECENT_LINES = 20;
// Text received and not yet consumed is kept up to this size (pexpect's search window), so a
// badge that logs for hours between two expects cannot grow it without bound.
const MAX_PENDING_CHARS = 1 << 20;
/** how often the port's device file is checked for having gone */
const PRESENCE_CHECK_MS = 250;

/** A path such as /dev/ttyUSB0, or how to find the badge among the ports the system lists. */
export type PortSelector = string | { serialNumber: string } | { vid: string | number; pid: string | number };

export interface SerialConsoleOptions {
  port: PortSelector;
  baudRate?: number;
  /** node-serialport's binding; default the platform's own (tests pass @serialport/binding-mock) */
  binding?: SerialBinding;
  /** where the transcript is written when the session ends, however it ends */
  transcriptPath?: string;
  /**
   * Says what a crash the console saw was (hil/panic-decoder.ts: the backtrace decoded from the
   * release's ELF); default: the crash as printed. The session then fails with BadgeCrashError.
   */
  describeCrash?: (crash: Crash) => Promise<string>;
}

export interface ExpectOptions {
  timeoutMs?: number;
}

export class SerialConsoleError extends Error {
  override name = "SerialConsoleError";
}
/** The system could not list its serial ports (on Linux: no udevadm), so none can be found by serial number or VID:PID. */
export class PortListError extends SerialConsoleError {
  override name = "PortListError";
}
export class PortNotFoundError extends SerialConsoleError {
  override name = "PortNotFoundError";
}
export class PortBusyError extends SerialConsoleError {
  override name = "PortBusyError";
}
export class ExpectTimeoutError extends SerialConsoleError {
  override name = "ExpectTimeoutError";
}
/** The port closed under the session: the badge was unplugged, reset or went into deep sleep. */
export class PortVanishedError extends SerialConsoleError {
  override name = "PortVanishedError";
}
/** The badge panicked (an ESP-IDF panic report on its console); the message is the crash decoded. */
export class BadgeCrashError extends SerialConsoleError {
  override name = "BadgeCrashError";
  constructor(
    message: string,
    readonly crash: Crash,
  ) {
    super(message);
  }

  /** The scenario runner fails a scenario with this check (badge-sim/runners/scenario-runner.ts). */
  get failedCheck() {
    return { field: "crash", expected: "no crash", observed: this.message, passed: false };
  }
}
/** The badge printed a console line (`@bb ...`) that breaks the contract. */
export class ConsoleProtocolError extends SerialConsoleError {
  override name = "ConsoleProtocolError";
}

interface Waiter {
  what: string;
  poll(): void;
  reject(error: Error): void;
}

export class SerialConsole {
  readonly path: string;
  readonly transcript: Transcript;
  readonly #port: SerialPortStream;
  readonly #lines: ReadlineParser;
  readonly #transcriptPath: string | undefined;
  readonly #recent: string[] = [];
  readonly #decoder = new TextDecoder("utf-8");
  #pending = "";
  #receivedBytes = 0;
  #lastByteAt: number | null = null;
  #undecodable = 0;
  #waiter: Waiter | null = null;
  #failure: Error | null = null;
  #releasing = false;
  #released: Promise<void> | null = null;
  #saveError: unknown = null;
  #presence: NodeJS.Timeout | undefined;
  readonly #panics = new PanicWatcher();
  #unwatched = "";
  #crashing = false;
  #describeCrash: (crash: Crash) => Promise<string> = async (crash) => describeCrash(crash, null);

  /** Finds and opens the port; on failure the transcript (one note saying why) is still saved. */
  static async open(options: SerialConsoleOptions): Promise<SerialConsole> {
    checkOptions(options);
    const binding = options.binding ?? SerialPort.binding;
    const baudRate = options.baudRate ?? DEFAULT_BAUD_RATE;
    const transcript = new Transcript();
    try {
      // A binding of the caller's (a test's, a replay's) lists its own ports.
      const path = await resolvePortPath(options.port, options.binding ? () => binding.list() : undefined);
      const port = new SerialPortStream({ binding, path, baudRate, autoOpen: false });
      await new Promise<void>((resolve, reject) => port.open((error) => (error ? reject(openError(path, error)) : resolve())));
      transcript.note(`opened ${path} at ${baudRate} baud`);
      const serial = new SerialConsole(path, port, transcript, options.transcriptPath);
      if (options.describeCrash) serial.#describeCrash = options.describeCrash;
      return serial;
    } catch (error) {
      transcript.note(`not opened: ${errorText(error)}`);
      if (options.transcriptPath !== undefined) transcript.save(options.transcriptPath);
      throw error;
    }
  }

  private constructor(path: string, port: SerialPortStream, transcript: Transcript, transcriptPath: string | undefined) {
    this.path = path;
    this.#port = port;
    this.transcript = transcript;
    this.#transcriptPath = transcriptPath;
    port.on("data", (chunk: Buffer) => this.#receive(chunk));
    // The line view only feeds error messages; expect() works on the bytes.
    this.#lines = port.pipe(new ReadlineParser());
    this.#lines.on("data", (line: string) => {
      this.#recent.push(line.endsWith("\r") ? line.slice(0, -1) : line);
      if (this.#recent.length > RECENT_LINES) this.#recent.shift();
    });
    port.on("close", (disconnect: Error | null) => {
      if (!this.#releasing) void this.#fail(this.#vanished(disconnect?.message ?? "closed"));
    });
    port.on("error", (error: Error) => {
      void this.#fail(new SerialConsoleError(`serial port ${this.path} failed: ${error.message}\n${this.#seen()}`, { cause: error }));
    });
    // Not every way a device goes fails the read: bindings-cpp takes a pty whose other end closed
    // as an endless run of empty reads. The device file going (udev removes /dev/ttyACM0, socat its
    // link) tells in every case. A path that is no file (a mock port, COM3) is not watched.
    if (existsSync(path)) {
      const check = () => {
        if (!existsSync(path)) void this.#fail(this.#vanished("its device file is gone"));
      };
      this.#presence = setInterval(check, PRESENCE_CHECK_MS).unref();
    }
  }

  /** Waits for `pattern` in what was received and not yet consumed, and consumes up to the end of the match. */
  expect(pattern: RegExp, options: ExpectOptions = {}): Promise<RegExpExecArray> {
    const search = new RegExp(pattern.source, pattern.flags.replace(/[gy]/g, ""));
    return this.#waitFor(`match for ${String(pattern)}`, options, () => {
      const match = search.exec(this.#pending);
      if (match) this.#pending = this.#pending.slice(match.index + match[0].length);
      return match ?? undefined;
    });
  }

  /**
   * Consumes whole lines until one is a console event of `kind` or one `predicate` accepts; noise
   * and other events are skipped. A malformed `@bb` line fails the session (ConsoleProtocolError).
   */
  expectEvent<K extends ConsoleEventKind>(kind: K, options?: ExpectOptions): Promise<ConsoleEventOf<K>>;
  expectEvent(predicate: (event: ConsoleEvent) => boolean, options?: ExpectOptions): Promise<ConsoleEvent>;
  expectEvent(wanted: ConsoleEventKind | ((event: ConsoleEvent) => boolean), options: ExpectOptions = {}): Promise<ConsoleEvent> {
    const accepts = typeof wanted === "string" ? (event: ConsoleEvent) => event.kind === wanted : wanted;
    const what = typeof wanted === "string" ? `"${wanted}" console event` : `console event matching ${String(wanted).slice(0, 120)}`;
    return this.#waitFor(what, options, () => this.#consumeLines(accepts));
  }

  /**
   * The console events of the whole lines received so far, consumed, without waiting (noise is
   * skipped); for catching up after the host looked away, as during a long wait.
   */
  takeEvents(): ConsoleEvent[] {
    this.#checkUsable();
    // the crash being decoded fails the next wait
    if (this.#crashing) return [];
    if (this.#waiter) throw new Error(`already waiting for ${this.#waiter.what} on ${this.path}; wait for one thing at a time`);
    const events: ConsoleEvent[] = [];
    try {
      this.#consumeLines((event) => (events.push(event), false));
    } catch (error) {
      void this.#fail(error as Error);
      throw error;
    }
    return events;
  }

  /**
   * Consumes whole received lines up to the first console event `accepts` takes, and returns it
   * (undefined when the lines ran out first). A malformed `@bb` line throws ConsoleProtocolError.
   */
  #consumeLines(accepts: (event: ConsoleEvent) => boolean): ConsoleEvent | undefined {
    for (let end = this.#pending.indexOf("\n"); end !== -1; end = this.#pending.indexOf("\n")) {
      const line = this.#pending.slice(0, end);
      this.#pending = this.#pending.slice(end + 1);
      const parsed = parseConsoleLine(line);
      if (parsed === null) continue;
      if (!parsed.ok) throw new ConsoleProtocolError(`${this.path} broke the console contract: ${parsed.message}\n${this.#seen()}`);
      if (accepts(parsed.event)) return parsed.event;
    }
    return undefined;
  }

  /** Sends one command line and waits until the system has written it to the port. */
  async send(command: ConsoleCommand): Promise<void> {
    this.#checkUsable();
    const bytes = Buffer.from(`${formatConsoleCommand(command)}\n`);
    this.transcript.sent(bytes);
    try {
      await new Promise<void>((resolve, reject) => {
        this.#port.write(bytes, (error) => (error ? reject(error) : this.#port.drain((drained) => (drained ? reject(drained) : resolve()))));
      });
    } catch (error) {
      await this.#fail(new SerialConsoleError(`could not send ${JSON.stringify(bytes.toString())} to ${this.path}: ${errorText(error)}`, { cause: error }));
      throw this.#failure;
    }
  }

  /** The last lines received (up to 20), line ends removed. */
  recentLines(): string[] {
    return [...this.#recent];
  }

  /** Releases the port and saves the transcript; a pending expect fails. Safe to call twice. */
  async close(): Promise<void> {
    const waiter = this.#waiter;
    this.#waiter = null;
    await this.#release("closed");
    waiter?.reject(new SerialConsoleError(`the console on ${this.path} was closed while waiting: no ${waiter.what} yet`));
    if (this.#saveError !== null) throw new SerialConsoleError(`could not save the transcript to ${this.#transcriptPath}: ${errorText(this.#saveError)}`, { cause: this.#saveError });
  }

  #receive(chunk: Buffer): void {
    this.transcript.received(chunk);
    this.#receivedBytes += chunk.length;
    this.#lastByteAt = performance.now();
    const text = this.#decoder.decode(chunk, { stream: true });
    this.#undecodable += text.split("\uFFFD").length - 1;
    this.#pending = (this.#pending + text).slice(-MAX_PENDING_CHARS);
    this.#watchPanics(text);
    // once a panic report is complete, nothing the badge prints after it (its reboot) answers a wait
    if (!this.#crashing) this.#waiter?.poll();
  }

  /** Feeds whole lines to the panic watcher as they arrive, before any wait can consume them. */
  #watchPanics(text: string): void {
    const lines = (this.#unwatched + text).split("\n");
    this.#unwatched = lines.pop()!.slice(-MAX_PENDING_CHARS);
    for (const line of lines) {
      const crash = this.#panics.line(line);
      if (crash && !this.#crashing) {
        this.#crashing = true;
        void this.#crashed(crash);
      }
    }
  }

  #checkUsable(): void {
    if (this.#failure) throw this.#failure;
    if (this.#released) throw new SerialConsoleError(`the console on ${this.path} is closed`);
  }

  async #waitFor<T>(what: string, options: ExpectOptions, match: () => T | undefined): Promise<T> {
    this.#checkUsable();
    if (this.#waiter) throw new Error(`already waiting for ${this.#waiter.what} on ${this.path}; wait for one thing at a time`);
    const timeoutMs = options.timeoutMs ?? DEFAULT_EXPECT_TIMEOUT_MS;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => void this.#fail(this.#timeoutError(what, timeoutMs)), timeoutMs);
      const settle = () => {
        clearTimeout(timer);
        this.#waiter = null;
      };
      const waiter: Waiter = {
        what,
        poll: () => {
          let found: T | undefined;
          try {
            found = match();
          } catch (error) {
            void this.#fail(error as Error);
            return;
          }
          if (found === undefined) return;
          settle();
          resolve(found);
        },
        reject: (error) => {
          settle();
          reject(error);
        },
      };
      this.#waiter = waiter;
      waiter.poll();
    });
  }

  /** A panic ends the session at once: whoever waits hears why, not a timeout later. */
  async #crashed(crash: Crash): Promise<void> {
    let message: string;
    try {
      message = await this.#describeCrash(crash);
    } catch (error) {
      message = `${describeCrash(crash, null)}\n(the backtrace could not be decoded: ${errorText(error)})`;
    }
    await this.#fail(new BadgeCrashError(`${this.path}: ${message}`, crash));
  }

  /** Ends the session on its first failure: releases the port, then fails whoever is waiting. */
  async #fail(error: Error): Promise<void> {
    this.#failure ??= error;
    const waiter = this.#waiter;
    this.#waiter = null;
    await this.#release(`failed: ${error.message}`);
    if (this.#transcriptPath !== undefined && this.#failure === error) {
      error.message += this.#saveError === null ? `\nTranscript: ${this.#transcriptPath}` : `\nThe transcript could not be saved: ${errorText(this.#saveError)}`;
    }
    waiter?.reject(this.#failure);
  }

  #release(why: string): Promise<void> {
    this.#released ??= (async () => {
      this.#releasing = true;
      clearInterval(this.#presence);
      // Closing can fail only for a port that is already gone, which is what we want anyway.
      if (this.#port.isOpen) await new Promise<void>((resolve) => this.#port.close(() => resolve()));
      // A port that began closing on its own (a disconnect) says it is not open, yet holds its
      // descriptor and lock until that close ends: the next session's open would find it busy.
      else if (this.#port.closing) await closeEnded(this.#port);
      this.transcript.note(why);
      if (this.#transcriptPath === undefined) return;
      try {
        this.transcript.save(this.#transcriptPath);
      } catch (error) {
        this.#saveError = error;
      }
    })();
    return this.#released;
  }

  #vanished(why: string): PortVanishedError {
    return new PortVanishedError(
      `serial port ${this.path} went away mid-session (${why}) after ${this.#receivedBytes} bytes; was the badge unplugged, reset or put into deep sleep?\n${this.#seen()}`,
    );
  }

  #timeoutError(what: string, timeoutMs: number): ExpectTimeoutError {
    const quiet =
      this.#lastByteAt === null ? "nothing was received since the port opened" : `the last byte came ${Math.round(performance.now() - this.#lastByteAt)} ms ago`;
    const garbage =
      this.#undecodable > 0
        ? `\n${this.#undecodable} received sequences were not UTF-8: is ${this.#port.baudRate} baud right? (The ESP32 boot ROM prints at 74880.)`
        : "";
    return new ExpectTimeoutError(`no ${what} on ${this.path} within ${timeoutMs} ms; ${quiet}, ${this.#receivedBytes} bytes in all.${garbage}\n${this.#seen()}`);
  }

  /** The last lines received and an unfinished one, escaped, for error messages. */
  #seen(): string {
    const unfinished = this.#lines.buffer.toString("utf8");
    const lines = [...this.#recent.map((line) => `  ${JSON.stringify(line)}`), ...(unfinished ? [`  ${JSON.stringify(unfinished)} (no line end yet)`] : [])];
    return lines.length === 0 ? "Nothing was received." : `Last lines received:\n${lines.join("\n")}`;
  }
}

/** Resolves when a close under way ends, whether it ended well or with an error (events.once rejects on 'error'). */
function closeEnded(port: SerialPortStream): Promise<void> {
  return once(port, "close").then(
    () => undefined,
    () => undefined,
  );
}

function checkOptions(options: SerialConsoleOptions): void {
  const { port, baudRate, transcriptPath } = options;
  if (typeof port === "string") {
    if (port === "") throw new TypeError("port must be a path such as /dev/ttyUSB0, { serialNumber } or { vid, pid }");
  } else if (typeof port !== "object" || port === null) {
    throw new TypeError("port must be a path such as /dev/ttyUSB0, { serialNumber } or { vid, pid }");
  } else if ("serialNumber" in port) {
    if (typeof port.serialNumber !== "string" || port.serialNumber === "") throw new TypeError("port.serialNumber must be a non-empty string");
  } else {
    for (const key of ["vid", "pid"] as const) {
      if (usbId(port[key]) === null) throw new TypeError(`port.${key} ${JSON.stringify(port[key])} must be a USB id: 0x303a, "303a" or 12346`);
    }
  }
  if (baudRate !== undefined && !(Number.isInteger(baudRate) && baudRate > 0)) throw new TypeError(`baudRate ${baudRate} must be a positive whole number`);
  if (transcriptPath !== undefined && (typeof transcriptPath !== "string" || transcriptPath === "")) throw new TypeError("transcriptPath must be a file path");
}

/** `0x303A`, `"303a"`, `"0x303a"` and 12346 are the same id: four lowercase hex digits. */
export function usbId(id: unknown): string | null {
  const hex = typeof id === "number" ? (Number.isInteger(id) && id >= 0 && id <= 0xffff ? id.toString(16) : "") : typeof id === "string" ? id.toLowerCase().replace(/^0x/, "") : "";
  return /^[0-9a-f]{1,4}$/.test(hex) ? hex.padStart(4, "0") : null;
}

function describeSelector(selector: Exclude<PortSelector, string>): string {
  return "serialNumber" in selector ? `serial number ${selector.serialNumber}` : `USB id ${usbId(selector.vid)}:${usbId(selector.pid)}`;
}

function describePort(port: PortInfo): string {
  const id = port.vendorId && port.productId ? ` ${usbId(port.vendorId)}:${usbId(port.productId)}` : "";
  return `${port.path}${id}${port.serialNumber ? ` serial ${port.serialNumber}` : ""}`;
}

/**
 * The one path the system lists for a `serial:` or `usb:` selector (a path is returned as it is).
 * `list` lists the ports: by default node-serialport's list, or sysfs where it fails for want of
 * udevadm (port-list.ts), as `hil ports` shows them.
 */
export async function resolvePortPath(selector: PortSelector, list: () => Promise<PortInfo[]> = listSerialPorts): Promise<string> {
  if (typeof selector === "string") return selector;
  let ports: PortInfo[];
  try {
    ports = await list();
  } catch (error) {
    throw new PortListError(
      `could not list serial ports to find the one with ${describeSelector(selector)} (${errorText(error)}); name the port by its path instead, e.g. --port /dev/ttyUSB0`,
      { cause: error },
    );
  }
  const matches = ports.filter((port) =>
    "serialNumber" in selector
      ? port.serialNumber === selector.serialNumber
      : usbId(port.vendorId) === usbId(selector.vid) && usbId(port.productId) === usbId(selector.pid),
  );
  const seen = ports.length === 0 ? "no serial ports at all" : `only ${ports.map(describePort).join(", ")}`;
  if (matches.length === 0) throw new PortNotFoundError(`no serial port has ${describeSelector(selector)}; the system lists ${seen}`);
  if (matches.length > 1) {
    throw new SerialConsoleError(`${matches.length} serial ports have ${describeSelector(selector)}: ${matches.map(describePort).join(", ")}; pick one by serial number or path`);
  }
  return matches[0]!.path;
}

// Bindings report open failures as text only: bindings-cpp "Error: No such file or directory,
// cannot open /dev/x" and "Error Resource temporarily unavailable Cannot lock port", binding-mock
// "Port does not exist" and "Port is locked cannot open".
function openError(path: string, error: Error): SerialConsoleError {
  const text = error.message;
  if (/no such file|does not exist|ENOENT|ENODEV/i.test(text)) {
    return new PortNotFoundError(`serial port ${path} does not exist (${text}); is the badge plugged in, and is that its path?`, { cause: error });
  }
  if (/lock|busy|EBUSY|EAGAIN|temporarily unavailable/i.test(text)) {
    return new PortBusyError(`serial port ${path} is in use by another program (${text}); close the other monitor (idf.py monitor, screen, minicom) or test run`, {
      cause: error,
    });
  }
  if (/permission denied|EACCES/i.test(text)) {
    return new SerialConsoleError(`no permission to open serial port ${path} (${text}); add your user to the dialout group`, { cause: error });
  }
  return new SerialConsoleError(`could not open serial port ${path}: ${text}`, { cause: error });
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
