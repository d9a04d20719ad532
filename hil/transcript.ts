// A serial session as it happened, so a bug seen on a bench becomes a test (replay-target.ts):
// every chunk received as it was read (chunk boundaries kept, a UTF-8 character split across two
// reads kept split), every line the host sent, and notes (opened, closed, why it failed), each at
// whole ms since the session started.
//
// The file is text, one entry a line, readable and writable by hand:
//   # badgebench serial transcript 1
//   +0.312 < I (312) boot: ESP-IDF v5.1.2\r\n@bb boot slot=ota_0 version=1.4.0 cause=power-on\r\n
//   +2.000 > check\n
//   +9.100 # closed
// `+seconds.milliseconds`, then `<` from the badge, `>` to the badge or `#` a note, then the bytes.
// Printable UTF-8 is written as itself; `\n`, `\r`, `\t`, `\\` and `\xHH` stand for everything else
// (a trailing space too, so an editor that trims lines changes nothing). JSON lines were the other
// choice, but JSON cannot hold bytes that are not UTF-8, and boot ROM garbage is exactly that.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";

export const TRANSCRIPT_HEADER = "# badgebench serial transcript 1";

export type TranscriptEntry = { t: number; kind: "received" | "sent"; bytes: Buffer } | { t: number; kind: "note"; text: string };

export class TranscriptFormatError extends Error {
  override name = "TranscriptFormatError";
}

const MARK = { received: "<", sent: ">", note: "#" } as const;
const KIND_OF_MARK: Record<string, TranscriptEntry["kind"]> = { "<": "received", ">": "sent", "#": "note" };
const ESCAPE_OF_BYTE: Record<number, string> = { 0x0a: "\\n", 0x0d: "\\r", 0x09: "\\t", 0x5c: "\\\\" };
const BYTE_OF_ESCAPE: Record<string, number> = { n: 0x0a, r: 0x0d, t: 0x09, "\\": 0x5c };
const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

export class Transcript {
  readonly entries: TranscriptEntry[] = [];
  readonly #start: number;
  readonly #now: () => number;

  constructor(now: () => number = () => performance.now()) {
    this.#now = now;
    this.#start = now();
  }

  received(bytes: Uint8Array): void {
    this.entries.push({ t: this.#elapsed(), kind: "received", bytes: Buffer.from(bytes) });
  }

  sent(bytes: Uint8Array): void {
    this.entries.push({ t: this.#elapsed(), kind: "sent", bytes: Buffer.from(bytes) });
  }

  note(text: string): void {
    this.entries.push({ t: this.#elapsed(), kind: "note", text });
  }

  format(): string {
    const lines = this.entries.map((entry) => {
      const payload = entry.kind === "note" ? Buffer.from(entry.text) : entry.bytes;
      return `+${(entry.t / 1000).toFixed(3)} ${MARK[entry.kind]} ${escapeBytes(payload)}`;
    });
    return `${[TRANSCRIPT_HEADER, ...lines].join("\n")}\n`;
  }

  save(path: string): void {
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, this.format());
  }

  /** Reads a transcript file's text; blank lines and lines starting with `#` are comments. */
  static parse(text: string): Transcript {
    const lines = text.split("\n").map((line) => (line.endsWith("\r") ? line.slice(0, -1) : line));
    if (lines[0] !== TRANSCRIPT_HEADER) {
      throw new TranscriptFormatError(`line 1 is ${JSON.stringify(lines[0]!.slice(0, 40))}; a transcript starts with ${JSON.stringify(TRANSCRIPT_HEADER)}`);
    }
    const transcript = new Transcript();
    let previous = 0;
    for (const [index, line] of lines.entries()) {
      if (line === "" || line.startsWith("#")) continue;
      const fail = (message: string) => new TranscriptFormatError(`line ${index + 1}: ${message}`);
      const entry = /^\+([0-9]+)(?:\.([0-9]{1,3}))? ([<>#]) (.*)$/.exec(line);
      if (!entry) throw fail(`expected "+<seconds> <mark> <bytes>" with mark <, > or #, got ${JSON.stringify(line.slice(0, 40))}`);
      const t = Number(entry[1]) * 1000 + Number((entry[2] ?? "").padEnd(3, "0"));
      if (t < previous) throw fail(`time +${t / 1000} is earlier than the entry before it (+${previous / 1000})`);
      previous = t;
      const bytes = unescapeBytes(entry[4]!, fail);
      const kind = KIND_OF_MARK[entry[3]!]!;
      transcript.entries.push(kind === "note" ? { t, kind, text: bytes.toString("utf8") } : { t, kind, bytes });
    }
    return transcript;
  }

  static load(path: string): Transcript {
    try {
      return Transcript.parse(readFileSync(path, "utf8"));
    } catch (error) {
      if (error instanceof TranscriptFormatError) throw new TranscriptFormatError(`${path}: ${error.message}`);
      throw error;
    }
  }

  #elapsed(): number {
    return Math.round(this.#now() - this.#start);
  }
}

/** Bytes -> one line of text; see the format above. */
function escapeBytes(bytes: Buffer): string {
  let text = "";
  for (let at = 0; at < bytes.length; ) {
    const byte = bytes[at]!;
    if (byte >= 0x20 && byte < 0x7f && byte !== 0x5c) {
      text += String.fromCharCode(byte);
      at += 1;
      continue;
    }
    const width = byte >= 0xf0 && byte <= 0xf4 ? 4 : byte >= 0xe0 && byte <= 0xef ? 3 : byte >= 0xc2 && byte <= 0xdf ? 2 : 1;
    const char = width > 1 ? decodeWhole(bytes.subarray(at, at + width)) : null;
    if (char !== null && !/\p{Cc}/u.test(char)) {
      text += char;
      at += width;
      continue;
    }
    text += ESCAPE_OF_BYTE[byte] ?? `\\x${byte.toString(16).padStart(2, "0")}`;
    at += 1;
  }
  return text.endsWith(" ") ? `${text.slice(0, -1)}\\x20` : text;
}

function decodeWhole(bytes: Uint8Array): string | null {
  try {
    return strictUtf8.decode(bytes);
  } catch {
    return null;
  }
}

function unescapeBytes(text: string, fail: (message: string) => Error): Buffer {
  const parts: Buffer[] = [];
  let literal = "";
  for (let at = 0; at < text.length; ) {
    if (text[at] !== "\\") {
      literal += text[at];
      at += 1;
      continue;
    }
    parts.push(Buffer.from(literal));
    literal = "";
    const hex = /^x([0-9a-fA-F]{2})/.exec(text.slice(at + 1, at + 4));
    const named = BYTE_OF_ESCAPE[text[at + 1] ?? ""];
    if (named !== undefined) {
      parts.push(Buffer.of(named));
      at += 2;
    } else if (hex) {
      parts.push(Buffer.of(parseInt(hex[1]!, 16)));
      at += 4;
    } else {
      throw fail(`unknown escape ${JSON.stringify(text.slice(at, at + 2))} at character ${at + 1}; the escapes are \\n \\r \\t \\\\ and \\xHH`);
    }
  }
  parts.push(Buffer.from(literal));
  return Buffer.concat(parts);
}
