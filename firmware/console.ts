// The badge test console (issue 5): the lines a badge prints on its USB serial console for a
// test rig to follow, and the commands it accepts there. The firmware prints these beside its
// ordinary ESP-IDF log and whatever the boot ROM says, so an event line starts with `@bb ` and
// every other line is noise. Fields are `key=value` pairs (logfmt), a value quoted with C escapes
// when it holds a space, a quote, a backslash or a control character: a C printf can write them,
// and a screen text with newlines stays on one line.
import { hasControlCharacter, quote } from "./line-codec.ts";
import { parseVersion } from "./version.ts";

export const CONSOLE_PREFIX = "@bb";

/**
 * The boot ROM's first line ending a line: `ets Jul 29 2019 12:21:46` on the ESP32,
 * `ESP-ROM:esp32s3-20210327` on later chips. It ends the line it lands on, so an event whose
 * quoted text merely mentions it (it ends in its closing quote) is still read.
 */
const BOOT_ROM_BANNER = /(ets [A-Z][a-z]{2} [ \d]\d \d{4} \d\d:\d\d:\d\d|ESP-ROM:[\w.-]+)$/;

/** esp_reset_reason() as the badge reports it; firmware/README.md maps the ESP-IDF values. */
export const BOOT_CAUSES = ["power-on", "restart", "wake", "brownout", "panic", "watchdog", "other"] as const;
export type BootCause = (typeof BOOT_CAUSES)[number];
export const OTA_SLOTS = ["ota_0", "ota_1"] as const;
export type OtaSlot = (typeof OTA_SLOTS)[number];
/** battery only; on USB power with the charger paused; on USB power and charging */
export const POWER_SOURCES = ["battery", "external", "charging"] as const;
export type PowerSource = (typeof POWER_SOURCES)[number];
/** the request whose HTTP 401 made the badge forget its device token */
export const TOKEN_REQUESTS = ["check", "sync", "download"] as const;
export type TokenRequest = (typeof TOKEN_REQUESTS)[number];

export type ConsoleEvent =
  | { kind: "boot"; slot: OtaSlot; version: string; cause: BootCause }
  | { kind: "state"; path: string }
  | { kind: "screen"; text: string }
  | { kind: "progress"; bytes: number; total: number }
  | { kind: "md5"; result: "ok" | "mismatch"; got: string; want: string }
  | { kind: "switch"; slot: OtaSlot }
  | { kind: "report.stored"; report: string }
  | { kind: "report.sent"; report: string }
  | { kind: "report.cleared"; report: string }
  | { kind: "token.cleared"; request: TokenRequest }
  | { kind: "tap.queued"; n: number; uid: string; at: number }
  | {
      kind: "status";
      version: string;
      slot: OtaSlot;
      state: string;
      mv: number;
      power: PowerSource;
      token: boolean;
      report: string | null;
      taps: number;
    }
  | { kind: "refused"; command: string; reason: string };

export type ConsoleEventKind = ConsoleEvent["kind"];
export type ConsoleEventOf<K extends ConsoleEventKind> = Extract<ConsoleEvent, { kind: K }>;

/**
 * `plug` and `unplug` move the simulated badge's USB power; a real badge answers them with
 * `refused`. So do the simulator-only `wait`, `brownout` and `rest`, which stand in for what
 * the world does to a real badge (time passing, a relay cutting the power): `wait <seconds>`
 * lets that much simulated time pass, `brownout <percent>` / `brownout switch` arms a power
 * cut at that point of the next download or during the partition switch, and `rest` /
 * `rest powered` runs the simulated badge until it rests (with `powered`: with power).
 * `setup <version> <mv> <battery|external|charging> [token]` stands in for the bench a rig
 * sets up before a scenario (esptool writing the app and NVS, a bench supply): the simulated
 * badge has no ROM to flash, so it starts over as a new badge running `version` from ota_0,
 * its battery at `mv` on that power, with `token` (default: the one it was served with).
 */
export type ConsoleCommand =
  | { name: "check" }
  | { name: "sync" }
  | { name: "tap"; uid: string }
  | { name: "reboot" }
  | { name: "status" }
  | { name: "plug" }
  | { name: "unplug" }
  | { name: "wait"; seconds: number }
  | { name: "brownout"; at: number | "switch" }
  | { name: "rest"; powered: boolean }
  | { name: "setup"; version: string; mv: number; power: PowerSource; token?: string };

/** What `setup` sets up: the simulated badge's flash, supply and token before a scenario. */
export type BenchSetup = Omit<Extract<ConsoleCommand, { name: "setup" }>, "name">;

export type ConsoleLineParse = { ok: true; event: ConsoleEvent } | { ok: false; message: string };
export type ConsoleCommandParse = { ok: true; command: ConsoleCommand } | { ok: false; message: string };

/** Thrown by the formatters when asked to write something the parsers would refuse. */
export class ConsoleFormatError extends Error {
  override name = "ConsoleFormatError";
}

interface Field<T> {
  /** what a value must be, for error messages */
  rule: string;
  read(raw: string): T | undefined;
  write(value: T): string;
  /** what a missing key stands for; a field without it is required */
  absent?: T;
}

const identity = (text: string) => text;
const text: Field<string> = { rule: "text", read: identity, write: identity };
// Reports travel on as an `ota=` request line, which refuses control characters.
const singleLine: Field<string> = { rule: "text without control characters", read: (raw) => (hasControlCharacter(raw) ? undefined : raw), write: identity };
const count: Field<number> = { rule: "a whole number", read: readCount, write: String };
const yesNo: Field<boolean> = { rule: "yes or no", read: (raw) => (raw === "yes" ? true : raw === "no" ? false : undefined), write: (value) => (value ? "yes" : "no") };
const version: Field<string> = { rule: "a version such as 1.4.0", read: (raw) => (parseVersion(raw) ? raw : undefined), write: identity };
const md5: Field<string> = matching(/^[0-9a-f]{32}$/, "32 lowercase hex digits");
// The machine's dotted state paths: online.downloading, awake.plugInPrompt, updateFailed.
const statePath: Field<string> = matching(/^[a-z][A-Za-z]*(\.[a-z][A-Za-z]*)*$/, "a dotted state path such as online.downloading");
// Card UIDs (4, 7 or 10 bytes) in upper-case hex, as the school import takes them.
const CARD_UID = /^[0-9A-F]{8,20}$/;
const cardUid: Field<string> = matching(CARD_UID, "a card UID of 8 to 20 upper-case hex digits");

function readCount(raw: string): number | undefined {
  const value = Number(raw);
  return /^(0|[1-9][0-9]*)$/.test(raw) && Number.isSafeInteger(value) ? value : undefined;
}

function matching(pattern: RegExp, rule: string): Field<string> {
  return { rule, read: (raw) => (pattern.test(raw) ? raw : undefined), write: identity };
}

function oneOf<T extends string>(values: readonly T[]): Field<T> {
  return { rule: `one of ${values.join(", ")}`, read: (raw) => values.find((value) => value === raw), write: identity };
}

function optional<T>(field: Field<T>): Field<T | null> {
  return { rule: field.rule, read: field.read, write: (value) => field.write(value as T), absent: null };
}

type FieldsOf<E> = { [K in Exclude<keyof E, "kind">]-?: Field<E[K]> };

// The order here is the order the fields are printed in.
const EVENT_FIELDS: { [K in ConsoleEventKind]: FieldsOf<ConsoleEventOf<K>> } = {
  boot: { slot: oneOf(OTA_SLOTS), version, cause: oneOf(BOOT_CAUSES) },
  state: { path: statePath },
  screen: { text },
  progress: { bytes: count, total: count },
  md5: { result: oneOf(["ok", "mismatch"] as const), got: md5, want: md5 },
  switch: { slot: oneOf(OTA_SLOTS) },
  "report.stored": { report: singleLine },
  "report.sent": { report: singleLine },
  "report.cleared": { report: singleLine },
  "token.cleared": { request: oneOf(TOKEN_REQUESTS) },
  "tap.queued": { n: count, uid: cardUid, at: count },
  status: {
    version,
    slot: oneOf(OTA_SLOTS),
    state: statePath,
    mv: count,
    power: oneOf(POWER_SOURCES),
    token: yesNo,
    report: optional(singleLine),
    taps: count,
  },
  refused: { command: text, reason: text },
};

const KINDS = Object.keys(EVENT_FIELDS).join(", ");
const COMMAND_NAMES = ["check", "sync", "tap", "reboot", "status", "plug", "unplug", "wait", "brownout", "rest", "setup"] as const;
const SETUP_USAGE = "setup takes a version, millivolts and battery, external or charging, and may take a device token, such as setup 1.4.0 3950 charging";
const DEVICE_TOKEN = /^dtk_(test|live)_[A-Za-z0-9_-]+$/;
/** seconds or percent: a plain decimal such as 30, 0.5 or 40 */
const DECIMAL = /^(0|[1-9][0-9]*)(\.[0-9]+)?$/;

function fieldsOf(kind: string): Record<string, Field<unknown>> | undefined {
  return Object.hasOwn(EVENT_FIELDS, kind) ? (EVENT_FIELDS[kind as ConsoleEventKind] as Record<string, Field<unknown>>) : undefined;
}

/** Quotes (and shortens) input for an error message, every control character escaped. */
const show = (text: string): string => quote(text, 60);

const BARE_VALUE = /^[^\p{Cc} "\\]+$/u;
const TO_ESCAPE = /[\p{Cc}"\\]/gu;
const ESCAPE_OF: Record<string, string> = { "\n": "n", "\r": "r", "\t": "t", '"': '"', "\\": "\\" };
const UNESCAPED: Record<string, string> = { n: "\n", r: "\r", t: "\t", '"': '"', "\\": "\\" };

function quoteValue(raw: string): string {
  if (BARE_VALUE.test(raw)) return raw;
  const escaped = raw.replace(TO_ESCAPE, (char) => {
    const named = ESCAPE_OF[char];
    return named ? `\\${named}` : `\\x${char.charCodeAt(0).toString(16).padStart(2, "0")}`;
  });
  return `"${escaped}"`;
}

/** Writes one console line, without its line end: `@bb progress bytes=65536 total=262144`. */
export function formatConsoleEvent(event: ConsoleEvent): string {
  const fields = fieldsOf(event.kind);
  if (!fields) throw new ConsoleFormatError(`unknown console event kind ${show(String(event.kind))}; the kinds are ${KINDS}`);
  let line = `${CONSOLE_PREFIX} ${event.kind}`;
  for (const [key, field] of Object.entries(fields)) {
    const value = (event as Record<string, unknown>)[key];
    if ("absent" in field && value === field.absent) continue;
    const raw = field.write(value);
    if (field.read(raw) !== value) throw new ConsoleFormatError(`${event.kind} ${key}=${show(String(value))} is not ${field.rule}`);
    line += ` ${key}=${quoteValue(raw)}`;
  }
  return line;
}

type Scan = { ok: true; kind: string; values: Map<string, string> } | { ok: false; message: string };

// Reads `kind key=value key="quoted"` from `start`; positions in messages count from 1 over the whole line.
function scanEvent(line: string, start: number): Scan {
  let at = start;
  const take = (pattern: RegExp): string | null => {
    pattern.lastIndex = at;
    const found = pattern.exec(line);
    if (found) at += found[0].length;
    return found ? found[0] : null;
  };
  const fail = (message: string): Scan => ({ ok: false, message: `${message} (character ${at + 1})` });

  const kind = take(/[a-z][a-z0-9]*(?:\.[a-z][a-z0-9]*)*/y);
  if (kind === null) return fail("expected an event kind such as boot or report.sent");
  const values = new Map<string, string>();
  while (at < line.length) {
    if (line[at] !== " ") return fail(`expected a space before the next key=value, got ${show(line[at]!)}`);
    at++;
    const key = take(/[a-z][a-z0-9_]*/y);
    if (key === null || line[at] !== "=") return fail("expected key=value with a lowercase key");
    at++;
    let value: string | null;
    if (line[at] === '"') {
      const quoted = readQuoted(line, at);
      if (typeof quoted === "string") return { ok: false, message: quoted };
      ({ value, end: at } = quoted);
    } else {
      value = take(/[^\p{Cc} "\\]+/uy);
      if (value === null) return fail(`${key}= has no value; an empty one is written ""`);
    }
    if (values.has(key)) return fail(`${key} appears twice`);
    values.set(key, value);
  }
  return { ok: true, kind, values };
}

function readQuoted(line: string, open: number): { value: string; end: number } | string {
  let value = "";
  let at = open + 1;
  while (at < line.length) {
    const char = line[at]!;
    if (char === '"') return { value, end: at + 1 };
    if (char === "\\") {
      const next = line[at + 1] ?? "";
      const hex = /^x[0-9a-fA-F]{2}$/.test(line.slice(at + 1, at + 4)) ? line.slice(at + 2, at + 4) : null;
      if (UNESCAPED[next] !== undefined) {
        value += UNESCAPED[next];
        at += 2;
      } else if (hex !== null) {
        value += String.fromCharCode(parseInt(hex, 16));
        at += 4;
      } else {
        return `unknown escape \\${next} (character ${at + 1}); the escapes are \\n \\r \\t \\" \\\\ and \\xHH`;
      }
      continue;
    }
    if (hasControlCharacter(char)) return `a raw control character inside quotes (character ${at + 1}); it must be escaped`;
    value += char;
    at++;
  }
  return `the quoted value opened at character ${open + 1} is never closed`;
}

/**
 * Reads one console line (its `\n` removed; a trailing `\r` is accepted). Null for noise: any
 * line that does not start with `@bb ` (an ESP-IDF log line, boot ROM output), and an event line
 * that a reset cut (the boot ROM's banner follows on the same line). Any other `@bb ` line that
 * is malformed is a failure naming what is wrong, since it means the firmware broke the contract.
 */
export function parseConsoleLine(line: string): ConsoleLineParse | null {
  const text = line.endsWith("\r") ? line.slice(0, -1) : line;
  if (text !== CONSOLE_PREFIX && !text.startsWith(`${CONSOLE_PREFIX} `)) return null;
  // A reset in the middle of a line (a power cut, a brownout) leaves its start without a line
  // end, and the boot ROM's banner follows on the same line: the event's end never came, so the
  // line is noise, not a broken contract.
  if (BOOT_ROM_BANNER.test(text)) return null;
  const fail = (message: string): ConsoleLineParse => ({ ok: false, message: `console line ${show(text)}: ${message}` });

  const scan = scanEvent(text, CONSOLE_PREFIX.length + 1);
  if (!scan.ok) return fail(scan.message);
  const fields = fieldsOf(scan.kind);
  if (!fields) return fail(`unknown event kind ${show(scan.kind)}; the kinds are ${KINDS}`);

  const event: Record<string, unknown> = { kind: scan.kind };
  for (const [key, field] of Object.entries(fields)) {
    const raw = scan.values.get(key);
    if (raw === undefined) {
      if (!("absent" in field)) return fail(`${scan.kind} needs ${key}=`);
      event[key] = field.absent;
      continue;
    }
    const value = field.read(raw);
    if (value === undefined) return fail(`${key}=${show(raw)} is not ${field.rule}`);
    event[key] = value;
  }
  const unknown = [...scan.values.keys()].filter((key) => !Object.hasOwn(fields, key));
  if (unknown.length > 0) return fail(`${scan.kind} has no field ${unknown.join(", ")}; its fields are ${Object.keys(fields).join(", ")}`);
  return { ok: true, event: event as ConsoleEvent };
}

/** Writes a command line without its line end: `check`, `tap 04A1B2C3D0`. */
export function formatConsoleCommand(command: ConsoleCommand): string {
  if (command.name === "tap") {
    if (!CARD_UID.test(command.uid)) throw new ConsoleFormatError(`tap uid ${show(command.uid)} is not ${cardUid.rule}`);
    return `tap ${command.uid}`;
  }
  if (command.name === "wait") {
    if (!(Number.isFinite(command.seconds) && command.seconds > 0) || !DECIMAL.test(String(command.seconds))) {
      throw new ConsoleFormatError(`wait seconds ${show(String(command.seconds))} is not a positive decimal number`);
    }
    return `wait ${command.seconds}`;
  }
  if (command.name === "brownout") {
    if (command.at === "switch") return "brownout switch";
    if (!(command.at >= 0 && command.at < 100) || !DECIMAL.test(String(command.at))) {
      throw new ConsoleFormatError(`brownout percent ${show(String(command.at))} is not a decimal from 0 to below 100`);
    }
    return `brownout ${command.at}`;
  }
  if (command.name === "rest") return command.powered ? "rest powered" : "rest";
  if (command.name === "setup") {
    const words = [command.version, String(command.mv), command.power, ...(command.token === undefined ? [] : [command.token])];
    if (parseSetup(words) === null) throw new ConsoleFormatError(`${show(`setup ${words.join(" ")}`)}: ${SETUP_USAGE}`);
    return `setup ${words.join(" ")}`;
  }
  if (!COMMAND_NAMES.includes(command.name)) {
    throw new ConsoleFormatError(`unknown console command ${show(String(command.name))}; the commands are ${COMMAND_NAMES.join(", ")}`);
  }
  return command.name;
}

/**
 * The badge's side: reads a command line. Spaces around and between words and a trailing `\r`
 * are accepted, since a person may type these in a terminal. Null for an empty line.
 */
export function parseConsoleCommand(line: string): ConsoleCommandParse | null {
  const words = line.trim().split(/\s+/);
  const [name, ...args] = words;
  if (name === "") return null;
  const known = COMMAND_NAMES.find((command) => command === name);
  if (!known) return { ok: false, message: `unknown command ${show(name!)}; the commands are ${COMMAND_NAMES.join(", ")}` };
  if (known === "tap") {
    if (args.length !== 1 || !CARD_UID.test(args[0]!)) return { ok: false, message: `tap takes one card UID, ${cardUid.rule}, such as tap 04A1B2C3D0` };
    return { ok: true, command: { name: "tap", uid: args[0]! } };
  }
  if (known === "wait") {
    const seconds = args.length === 1 && DECIMAL.test(args[0]!) ? Number(args[0]) : NaN;
    if (!(seconds > 0)) return { ok: false, message: "wait takes a number of seconds above 0, such as wait 30" };
    return { ok: true, command: { name: "wait", seconds } };
  }
  if (known === "brownout") {
    if (args.length === 1 && args[0] === "switch") return { ok: true, command: { name: "brownout", at: "switch" } };
    const percent = args.length === 1 && DECIMAL.test(args[0]!) ? Number(args[0]) : NaN;
    if (!(percent >= 0 && percent < 100)) return { ok: false, message: "brownout takes a download percent from 0 to below 100, or switch, such as brownout 40" };
    return { ok: true, command: { name: "brownout", at: percent } };
  }
  if (known === "rest") {
    if (args.length === 0) return { ok: true, command: { name: "rest", powered: false } };
    if (args.length === 1 && args[0] === "powered") return { ok: true, command: { name: "rest", powered: true } };
    return { ok: false, message: `rest takes nothing or powered (got ${show(args.join(" "))})` };
  }
  if (known === "setup") {
    const command = parseSetup(args);
    return command ? { ok: true, command } : { ok: false, message: SETUP_USAGE };
  }
  if (args.length > 0) return { ok: false, message: `${known} takes no arguments (got ${show(args.join(" "))})` };
  return { ok: true, command: { name: known } };
}

function parseSetup(args: string[]): Extract<ConsoleCommand, { name: "setup" }> | null {
  const [version, mv, power, token, ...rest] = args;
  if (rest.length > 0 || !version || !parseVersion(version) || !mv || !/^[1-9][0-9]{0,4}$/.test(mv)) return null;
  if (!POWER_SOURCES.includes(power as PowerSource) || (token !== undefined && !DEVICE_TOKEN.test(token))) return null;
  return { name: "setup", version, mv: Number(mv), power: power as PowerSource, ...(token === undefined ? {} : { token }) };
}
