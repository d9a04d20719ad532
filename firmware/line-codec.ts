// The badge's text messages (SPEC 4.8), shared by the check and sync endpoints.
// Request: `key=value` lines. Response: `V1`, then `<LETTER> <value>` lines, then `.`.
// Both are plain lines so the badge firmware can read them with a line reader and no JSON
// parser; the final `.` lets it tell a complete answer from one cut by a dropped connection.
import { Buffer } from "node:buffer";

export const MAX_REQUEST_BYTES = 16 * 1024;

const KEY_PATTERN = /^[a-z][a-z0-9_]{0,15}$/;
const KEY_RULE = "a lowercase letter then up to 15 of a-z, 0-9 and _";
const RESPONSE_LINE_PATTERN = /^([A-Z])(?: (.*))?$/;
// C0 controls, DEL and C1 controls. The badge prints values on its screen and stores them in
// fixed C buffers; a tab or an escape there is never intended.
const CONTROL_CHARACTER = /\p{Cc}/u;

/** Whether text holds a control character; no badge text (a value, a note, a name) may. */
export function hasControlCharacter(text: string): boolean {
  return CONTROL_CHARACTER.test(text);
}

/** Thrown by the formatters when asked to write something the parsers would reject. */
export class LineFormatError extends Error {
  override name = "LineFormatError";
}

export type RequestParse = { ok: true; pairs: Array<[string, string]> } | { ok: false; line: number; message: string };

export interface ResponseLine {
  letter: string;
  value: string;
}

export type ResponseParse = { ok: true; version: number; lines: ResponseLine[] } | { ok: false; message: string };

/**
 * Quotes (and shortens) input for an error message, with every control character escaped: an
 * error message goes out in a response line, which may hold none. JSON.stringify alone leaves
 * DEL and the C1 controls (U+007F-U+009F) raw.
 */
export function quote(text: string, max = 20): string {
  const shown = JSON.stringify(text.length > max ? `${text.slice(0, max)}...` : text);
  return shown.replace(/\p{Cc}/gu, (control) => `\\u${control.codePointAt(0)!.toString(16).padStart(4, "0")}`);
}

function describeControl(text: string): string | null {
  const found = CONTROL_CHARACTER.exec(text);
  if (!found) return null;
  return `U+${found[0].codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}`;
}

/** Splits on `\n`, accepting `\r\n` and one trailing newline. */
function splitLines(text: string): string[] {
  const body = text.endsWith("\n") ? text.slice(0, -1) : text;
  return body.split("\n").map((line) => (line.endsWith("\r") ? line.slice(0, -1) : line));
}

/**
 * Parses a request body into its pairs, in order, repeated keys kept (sync sends one `tap=`
 * line per tap). `line` in a failure is 1-based, or 0 when the body as a whole is refused.
 */
export function parseRequest(body: string): RequestParse {
  const bytes = Buffer.byteLength(body, "utf8");
  if (bytes > MAX_REQUEST_BYTES) {
    return { ok: false, line: 0, message: `request body is ${bytes} bytes; at most ${MAX_REQUEST_BYTES} are accepted` };
  }
  const pairs: Array<[string, string]> = [];
  const lines = splitLines(body);
  for (const [index, text] of lines.entries()) {
    const line = index + 1;
    if (text === "") return { ok: false, line, message: `line ${line} is empty; expected key=value` };
    const equals = text.indexOf("=");
    if (equals === -1) return { ok: false, line, message: `line ${line} is not key=value (no '=')` };
    const key = text.slice(0, equals);
    const value = text.slice(equals + 1);
    if (!KEY_PATTERN.test(key)) {
      return { ok: false, line, message: `line ${line} has key ${quote(key)}; a key is ${KEY_RULE}` };
    }
    const control = describeControl(value);
    if (control) {
      return { ok: false, line, message: `line ${line}: the value of ${quote(key)} contains the control character ${control}` };
    }
    pairs.push([key, value]);
  }
  return { ok: true, pairs };
}

/** Writes pairs as `key=value\n` lines; throws LineFormatError for anything parseRequest would refuse. */
export function formatRequest(pairs: Array<[string, string]>): string {
  if (pairs.length === 0) throw new LineFormatError("a request needs at least one key=value pair");
  let body = "";
  for (const [key, value] of pairs) {
    if (!KEY_PATTERN.test(key)) throw new LineFormatError(`request key ${quote(key)} is not valid; a key is ${KEY_RULE}`);
    const control = describeControl(value);
    if (control) throw new LineFormatError(`the value of ${quote(key)} contains the control character ${control}`);
    body += `${key}=${value}\n`;
  }
  return body;
}

/** Writes `V1`, the lines (`U 1.4.0`, or just `N` for an empty value), then `.`; every line ends with `\n`. */
export function formatResponse(lines: ResponseLine[]): string {
  let text = "V1\n";
  for (const { letter, value } of lines) {
    if (!/^[A-Z]$/.test(letter)) throw new LineFormatError(`response letter ${quote(letter)} is not a single letter A-Z`);
    const control = describeControl(value);
    if (control) throw new LineFormatError(`the value of response line ${letter} contains the control character ${control}`);
    text += value === "" ? `${letter}\n` : `${letter} ${value}\n`;
  }
  return `${text}.\n`;
}

/** The badge's side: reads a response, telling a cut one (no final `.`) from a malformed one. */
export function parseResponse(text: string): ResponseParse {
  if (text === "") return { ok: false, message: "response is empty; expected V1 as the first line" };
  const lines = splitLines(text);
  const version = /^V([0-9]{1,9})$/.exec(lines[0]!);
  if (!version) return { ok: false, message: `line 1 is ${quote(lines[0]!)}; expected V<number> such as V1` };

  const end = lines.indexOf(".");
  if (end === -1) {
    return { ok: false, message: `response was cut: no final '.' line after ${lines.length} lines` };
  }
  if (end !== lines.length - 1) return { ok: false, message: `line ${end + 2} follows the final '.' line` };

  const parsed: ResponseLine[] = [];
  for (let index = 1; index < end; index++) {
    const line = lines[index]!;
    const match = RESPONSE_LINE_PATTERN.exec(line);
    if (!match) return { ok: false, message: `line ${index + 1} is not '<LETTER> <value>' (got ${quote(line)})` };
    const value = match[2] ?? "";
    const control = describeControl(value);
    if (control) return { ok: false, message: `line ${index + 1} contains the control character ${control}` };
    parsed.push({ letter: match[1]!, value });
  }
  return { ok: true, version: Number(version[1]), lines: parsed };
}
