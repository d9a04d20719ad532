// `badgebench hil ports`, `hil monitor` and the port argument of `hil flash`: the serial ports the
// system lists, and a live view of a badge's console (hil/serial-console.ts) that decodes its
// `@bb` events, checks them against the model (hil/model-oracle.ts), sends what is typed as
// console commands, and saves the session's transcript however it ends.
import path from "node:path";
import { stripVTControlCharacters } from "node:util";
import { createInterface, type Interface } from "node:readline";
import { listSerialPorts, type PortInfo } from "../../hil/port-list.ts";
import { parseConsoleCommand, parseConsoleLine, type ConsoleEvent } from "../../firmware/index.ts";
import { describeEvent, ModelOracle } from "../../hil/model-oracle.ts";
import {
  PortBusyError,
  PortListError,
  PortNotFoundError,
  resolvePortPath,
  SerialConsole,
  SerialConsoleError,
  DEFAULT_BAUD_RATE,
  type PortSelector,
  type SerialBinding,
  usbId,
} from "../../hil/serial-console.ts";
import { runHilFlash, type HilFlashOptions } from "./hil-flash.ts";

/** A mistake in the command's arguments: exit 2, nothing was opened. */
export class HilArgumentError extends Error {
  override name = "HilArgumentError";
}

/** `/dev/ttyUSB0`, `serial:<serialNumber>` or `usb:<vid>:<pid>` (hex, e.g. usb:303a:1001). */
export function parsePortArg(text: string): PortSelector {
  if (text === "") throw new HilArgumentError("--port is empty: give a path such as /dev/ttyUSB0, serial:<serial number> or usb:<vid>:<pid>");
  if (text.startsWith("serial:")) {
    const serialNumber = text.slice("serial:".length);
    if (serialNumber === "") throw new HilArgumentError(`--port ${text} names no serial number: write serial:A1B2C3 (see badgebench hil ports)`);
    return { serialNumber };
  }
  if (text.startsWith("usb:")) {
    const ids = /^usb:(?:0x)?([0-9a-fA-F]{1,4}):(?:0x)?([0-9a-fA-F]{1,4})$/.exec(text);
    if (!ids) throw new HilArgumentError(`--port ${text} is not usb:<vid>:<pid> with hex USB ids, e.g. usb:303a:1001`);
    return { vid: ids[1]!.toLowerCase(), pid: ids[2]!.toLowerCase() };
  }
  return text;
}

/** Why listing failed, in one line that says what to do instead. */
function listFailure(error: unknown, purpose: string): string {
  const text = error instanceof Error ? error.message : String(error);
  const missing = /udevadm/.test(text) && /ENOENT/.test(text);
  return missing
    ? `could not ${purpose}: udevadm is not installed (${text}); pass the badge's port by its path, e.g. --port /dev/ttyUSB0`
    : `could not ${purpose} (${text}); pass the badge's port by its path, e.g. --port /dev/ttyUSB0`;
}

/** A port that could not be found or opened, in one line; a failed list says why (udevadm missing). */
function portFailure(error: Error, port: string): string {
  return error instanceof PortListError ? listFailure(error.cause, `find the port ${port}`) : firstLine(error.message);
}

function errorCode(error: Error): string {
  if (error instanceof HilArgumentError) return "bad_arguments";
  if (error instanceof PortNotFoundError) return "no_such_port";
  if (error instanceof PortBusyError) return "port_busy";
  if (error instanceof PortListError) return "port_list_failed";
  return "port_error";
}

function reportError(json: boolean, code: string, message: string, extra: Record<string, unknown> = {}): void {
  if (json) process.stdout.write(`${JSON.stringify({ error: { code, message, ...extra } })}\n`);
  else process.stderr.write(`badgebench: ${message}\n`);
}

// ---------------------------------------------------------------------------------------------
// hil ports

export interface HilPortsOptions {
  json: boolean;
  /** what lists the ports (default serialport's SerialPort.list; sysfs when that fails on Linux) */
  list?: () => Promise<PortInfo[]>;
}

/** Exit status: 0 listed (maybe none; without udevadm, from sysfs), 1 the system could not list its ports. */
export async function runHilPorts(options: HilPortsOptions): Promise<number> {
  let ports: PortInfo[];
  try {
    ports = await listSerialPorts(options.list);
  } catch (error) {
    reportError(options.json, "port_list_failed", listFailure(error, "list serial ports"));
    return 1;
  }
  if (options.json) {
    const data = ports.map((port) => ({
      path: port.path,
      manufacturer: port.manufacturer ?? null,
      serial_number: port.serialNumber ?? null,
      vendor_id: usbId(port.vendorId),
      product_id: usbId(port.productId),
    }));
    process.stdout.write(`${JSON.stringify({ object: "list", data })}\n`);
    return 0;
  }
  const lines = ports.map((port) => {
    const id = port.vendorId && port.productId ? `usb:${usbId(port.vendorId)}:${usbId(port.productId)}` : "-";
    return [port.path, id, port.serialNumber ? `serial:${port.serialNumber}` : "-", port.manufacturer ?? ""].join("  ").trimEnd();
  });
  process.stdout.write(`${lines.join("\n") || "no serial ports"}\n`);
  return 0;
}

// ---------------------------------------------------------------------------------------------
// hil flash: the port may be given as serial: or usb: too

/** runHilFlash with `port` as `hil monitor` takes it (a path, serial:<n> or usb:<vid>:<pid>). */
export async function runHilFlashCommand(options: HilFlashOptions): Promise<number> {
  let port: string;
  try {
    port = await resolvePortPath(parsePortArg(options.port));
  } catch (error) {
    if (!(error instanceof HilArgumentError || error instanceof SerialConsoleError)) throw error;
    reportError(options.json, errorCode(error), portFailure(error, options.port));
    return error instanceof HilArgumentError ? 2 : 1;
  }
  return runHilFlash({ ...options, port });
}

// ---------------------------------------------------------------------------------------------
// hil monitor

export interface HilMonitorOptions {
  /** a path, `serial:<serialNumber>` or `usb:<vid>:<pid>` */
  port: string;
  baudRate?: number;
  /** where the transcript is saved (default ./var/transcripts/<timestamp>.txt) */
  transcript?: string;
  /** one JSON object per line received, then one for the session */
  json: boolean;
  /** a regex: exit 0 once a received line matches it */
  until?: string;
  /** with `until`: exit 1 if nothing matched by then; without: end the session then (exit 0) */
  timeoutMs?: number;
  /** tests: node-serialport's binding */
  binding?: SerialBinding;
  /** where typed commands come from (default process.stdin; null: none) */
  input?: NodeJS.ReadableStream | null;
  /** decode and colour events (default: stdout is a terminal and not --json) */
  color?: boolean;
}

const RECENT_LINES = 20;
/** setTimeout's longest delay: the line wait never times out in practice */
const FOREVER_MS = 2_147_483_647;
const ANSI = { reset: "\x1b[0m", dim: "\x1b[2m", red: "\x1b[31m", yellow: "\x1b[33m", event: "\x1b[1;36m" };

export function defaultTranscriptPath(now = new Date()): string {
  return path.join("var", "transcripts", `${now.toISOString().replace(/[:.]/g, "-")}.txt`);
}

/**
 * Exit status: 0 the session ended as asked (--until matched, --timeout without --until),
 * 1 the port could not be opened or failed, or --until did not match within --timeout,
 * 2 bad arguments, 130/143 ended by SIGINT/SIGTERM. The transcript is saved in every case.
 */
export async function runHilMonitor(options: HilMonitorOptions): Promise<number> {
  const { json } = options;
  let checked: { selector: PortSelector; until: RegExp | undefined };
  try {
    checked = checkMonitorArguments(options);
  } catch (error) {
    if (!(error instanceof HilArgumentError)) throw error;
    reportError(json, "bad_arguments", error.message);
    return 2;
  }
  const { selector, until } = checked;
  const transcriptPath = path.resolve(options.transcript ?? defaultTranscriptPath());
  const color = options.color ?? (!json && process.stdout.isTTY === true);

  let serial: SerialConsole;
  try {
    serial = await SerialConsole.open({ port: selector, baudRate: options.baudRate, binding: options.binding, transcriptPath });
  } catch (error) {
    if (!(error instanceof SerialConsoleError)) throw error;
    reportError(json, errorCode(error), portFailure(error, options.port));
    return 1;
  }
  // on stderr, with --json too: stdout carries only the lines (or their objects)
  process.stderr.write(`${color ? ANSI.dim : ""}monitoring ${serial.path}; type console commands (check, sync, tap <UID>, reboot, status), Ctrl-C to end${color ? ANSI.reset : ""}\n`);

  const session = new MonitorSession(json, color, until);
  const input = options.input === undefined ? process.stdin : options.input;
  const reader = input ? sendTypedCommands(input, serial) : null;
  const onSignal = (signal: NodeJS.Signals) => session.finish(signal === "SIGINT" ? 130 : 143);
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  const timer = options.timeoutMs === undefined ? undefined : setTimeout(() => session.timedOut(serial.path, options.timeoutMs!), options.timeoutMs);
  void readLines(serial, session);

  const outcome = await session.finished;
  clearTimeout(timer);
  process.removeListener("SIGINT", onSignal);
  process.removeListener("SIGTERM", onSignal);
  reader?.close();
  if (input === process.stdin) process.stdin.destroy();
  return endMonitor(serial, session, outcome, transcriptPath);
}

/** The arguments `runHilMonitor` takes from the user, checked before the port is opened; a HilArgumentError names the bad one. */
function checkMonitorArguments(options: HilMonitorOptions): { selector: PortSelector; until: RegExp | undefined } {
  const selector = parsePortArg(options.port);
  if (options.baudRate !== undefined && !(Number.isInteger(options.baudRate) && options.baudRate > 0)) {
    throw new HilArgumentError(`--baud ${options.baudRate} is not a positive whole number (the badge's console runs at ${DEFAULT_BAUD_RATE})`);
  }
  if (options.timeoutMs !== undefined && !(Number.isFinite(options.timeoutMs) && options.timeoutMs > 0 && options.timeoutMs <= FOREVER_MS)) {
    throw new HilArgumentError(`--timeout ${options.timeoutMs} is not a number of milliseconds above 0`);
  }
  if (options.transcript === "") throw new HilArgumentError("--transcript is empty: give a file path");
  if (options.until === undefined) return { selector, until: undefined };
  try {
    return { selector, until: new RegExp(options.until) };
  } catch (error) {
    throw new HilArgumentError(`--until ${JSON.stringify(options.until)} is not a regular expression: ${(error as Error).message}`);
  }
}

interface MonitorOutcome {
  code: number;
  failure?: { code: string; message: string };
}

/** One monitor session: each line shown as asked, the model watching the events, and how it ends. */
class MonitorSession {
  readonly started = performance.now();
  readonly download = new DownloadQuarters();
  readonly oracle = new ModelOracle();
  readonly recent: string[] = [];
  lines = 0;
  events = 0;
  matched: string | null = null;
  /** set at the first ending (a match, the timeout, a signal, a failure); no line is shown after it */
  done = false;
  readonly finished: Promise<MonitorOutcome>;
  #resolve!: (outcome: MonitorOutcome) => void;

  constructor(
    readonly json: boolean,
    readonly color: boolean,
    readonly until: RegExp | undefined,
  ) {
    this.finished = new Promise((resolve) => (this.#resolve = resolve));
  }

  finish(code: number, failure?: MonitorOutcome["failure"]): void {
    if (this.done) return;
    this.done = true;
    this.#resolve({ code, failure });
  }

  /** --timeout passed: the end asked for without --until, a failure naming the last lines with it. */
  timedOut(portPath: string, timeoutMs: number): void {
    if (!this.until) return this.finish(0);
    const seen = this.recent.length === 0 ? "nothing was received" : `last lines received:\n${this.recent.map((line) => `  ${JSON.stringify(line)}`).join("\n")}`;
    this.finish(1, { code: "timeout", message: `no line matched ${String(this.until)} on ${portPath} within ${timeoutMs} ms; ${seen}` });
  }

  onLine(raw: string): void {
    const text = raw.replace(/\r?\n$/, "");
    this.lines++;
    this.recent.push(text);
    if (this.recent.length > RECENT_LINES) this.recent.shift();
    const parsed = parseConsoleLine(text);
    let event: ConsoleEvent | null = null;
    let protocolError: string | undefined;
    let deviation: string | undefined;
    if (parsed?.ok) {
      event = parsed.event;
      this.events++;
      deviation = this.oracle.observe(event)?.message;
    } else if (parsed) {
      protocolError = parsed.message;
    }
    this.show(text, event, protocolError, deviation);
    if (this.until && this.matched === null && this.until.test(text)) {
      this.matched = text;
      this.finish(0);
    }
  }

  show(text: string, event: ConsoleEvent | null, protocolError: string | undefined, deviation: string | undefined): void {
    if (this.json) {
      const t = Math.round(performance.now() - this.started);
      writeLine(JSON.stringify({ t, line: text, event, ...(protocolError ? { error: protocolError } : {}), ...(deviation ? { deviation } : {}) }));
    } else if (!this.color) {
      // a log (`| tee log`): plain text, and a download's progress a few lines long
      if (!event || this.download.shows(event)) writeLine(stripVTControlCharacters(text));
    } else if (event) {
      const [kind, ...fields] = describeEvent(event).split(" ");
      writeLine(`${ANSI.event}@bb ${kind}${ANSI.reset} ${fields.join(" ")}`);
      if (deviation) writeLine(`${ANSI.yellow}  ! model: ${deviation}${ANSI.reset}`);
    } else if (protocolError) {
      writeLine(`${ANSI.red}${text}${ANSI.reset}\n${ANSI.red}  ! ${protocolError}${ANSI.reset}`);
    } else {
      writeLine(`${ANSI.dim}${text}${ANSI.reset}`);
    }
  }
}

const writeLine = (text: string) => process.stdout.write(`${text}\n`);

/** Typed lines go to the badge as console commands; a line the console would refuse is not sent. */
function sendTypedCommands(input: NodeJS.ReadableStream, serial: SerialConsole): Interface {
  const reader = createInterface({ input, terminal: false });
  reader.on("line", (line) => {
    const command = parseConsoleCommand(line);
    if (command === null) return;
    if (!command.ok) {
      process.stderr.write(`not sent: ${command.message}\n`);
      return;
    }
    // a failed send ends the session, which the line loop reports
    serial.send(command.command).catch(() => {});
  });
  return reader;
}

/** Every line the badge prints, to the session until it ends; a port that fails ends it. */
async function readLines(serial: SerialConsole, session: MonitorSession): Promise<void> {
  while (!session.done) {
    let match: RegExpExecArray;
    try {
      match = await serial.expect(/[^\n]*\n/, { timeoutMs: FOREVER_MS });
    } catch (error) {
      session.finish(1, { code: errorCode(error as Error), message: firstLine((error as Error).message) });
      return;
    }
    if (!session.done) session.onLine(match[0]);
  }
}

/** Closes the port (saving the transcript) and reports how the session ended; the exit status. */
async function endMonitor(serial: SerialConsole, session: MonitorSession, outcome: MonitorOutcome, transcriptPath: string): Promise<number> {
  const { json } = session;
  let saveProblem: string | null = null;
  try {
    await serial.close();
  } catch (error) {
    saveProblem = (error as Error).message;
  }
  if (outcome.failure) {
    const { code, message } = outcome.failure;
    reportError(json, code, json ? message : `${message}\ntranscript: ${transcriptPath}`, { transcript: transcriptPath });
  }
  if (json && !outcome.failure) {
    const { lines, events, matched } = session;
    writeLine(JSON.stringify({ object: "hil_monitor", port: serial.path, transcript: transcriptPath, lines, events, deviations: session.oracle.deviations.length, matched, exit: outcome.code }));
  } else if (!json && !outcome.failure) {
    process.stderr.write(`${session.matched !== null ? `matched ${String(session.until)}; ` : ""}transcript saved to ${transcriptPath}\n`);
  }
  if (saveProblem) {
    process.stderr.write(`badgebench: ${saveProblem}\n`);
    return outcome.code === 0 ? 1 : outcome.code;
  }
  return outcome.code;
}

/**
 * Which of a download's progress events (`progress`, and the `Downloading N%` screens) a log
 * shows: the first, each that reaches another quarter, and the last; the transcript keeps all.
 */
class DownloadQuarters {
  #shown = { progress: -1, screen: -1 };

  shows(event: ConsoleEvent): boolean {
    const kind = event.kind === "progress" ? "progress" : event.kind === "screen" && DOWNLOADING.test(event.text) ? "screen" : null;
    if (kind === null) {
      if (event.kind === "state" && event.path === "online.downloading") this.#shown = { progress: -1, screen: -1 };
      return true;
    }
    const percent = event.kind === "progress" ? (100 * event.bytes) / event.total : Number(DOWNLOADING.exec((event as { text: string }).text)![1]);
    const quarter = Math.floor(percent / 25);
    if (quarter === this.#shown[kind]) return false;
    this.#shown[kind] = quarter;
    return true;
  }
}

const DOWNLOADING = /Downloading (\d+)%/;

function firstLine(text: string): string {
  return text.split("\n")[0]!;
}
