// The wire contract (firmware/badge-protocol.ts) against the C reference badge, which a firmware
// team builds from `badge.h`: every limit the header defines is either the TypeScript value
// both sides of the wire import, or named here as the C badge's own (a buffer size). A header
// that changes a limit, or adds one nobody classified, fails here; so do the paths and the
// request format the C sources send. Then the codecs read back what they write.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  BADGE_PATHS,
  CARD_UID_MAX_HEX,
  DISPLAY_MAX,
  errorReport,
  formatRequest,
  formatStatusPairs,
  formatTap,
  KEY_ID_HEX,
  MAX_TAPS,
  MAX_TRUSTED_KEYS,
  PUBLIC_KEY_BYTES,
  SIGNATURE_BASE64_CHARS,
  SIGNATURE_ANNOUNCEMENT,
  SIGNATURE_BYTES,
  MIN_INSTALL_VOLTS,
  NOTE_MAX_CHARS,
  okReport,
  OTA_SLOT_BYTES,
  parseBadgeRequest,
  parseReport,
  parseTaps,
  REPORT_MESSAGE_MAX,
  REQUEST_FORMAT,
  VERSION_MAX_LENGTH,
  parseContentRange,
} from "../../firmware/index.ts";
import { FAILURE_SCREEN_MS, SLEEP_AFTER_MS } from "../../badge-sim/model/badge-machine.ts";
import { CHECKPOINT_BYTES } from "../../badge-sim/model/badge-storage.ts";

const DIR = join(import.meta.dirname, "../../firmware/reference-badge");
const read = (file: string) => readFileSync(join(DIR, file), "utf8");

/** The header's limits and the TypeScript values they must equal. */
const SHARED: Record<string, number> = {
  BB_SLOT_BYTES: OTA_SLOT_BYTES,
  BB_MIN_INSTALL_MV: Math.round(MIN_INSTALL_VOLTS * 1000),
  BB_MAX_TAPS: MAX_TAPS,
  BB_VERSION_MAX: VERSION_MAX_LENGTH,
  BB_DISPLAY_MAX: DISPLAY_MAX,
  BB_NOTE_MAX: NOTE_MAX_CHARS,
  BB_TEXT_MAX: REPORT_MESSAGE_MAX,
  BB_UID_MAX: CARD_UID_MAX_HEX,
  BB_SLEEP_AFTER_MS: SLEEP_AFTER_MS,
  BB_FAILURE_SCREEN_MS: FAILURE_SCREEN_MS,
  BB_CHECKPOINT_BYTES: CHECKPOINT_BYTES,
  BB_KEY_ID_HEX: KEY_ID_HEX,
  BB_PUBLIC_KEY_BYTES: PUBLIC_KEY_BYTES,
  BB_SIGNATURE_BYTES: SIGNATURE_BYTES,
  BB_SIGNATURE_BASE64: SIGNATURE_BASE64_CHARS,
  BB_TRUSTED_KEYS: MAX_TRUSTED_KEYS,
};
/** The C badge's own buffers and chunk sizes: no TypeScript counterpart. */
const C_ONLY = new Set(["BB_WRITE_BYTES", "BB_ANSWER_MAX", "BB_REQUEST_MAX", "BB_LINE_MAX", "BB_PATH_MAX", "BB_REPORT_MAX", "BB_TOKEN_MAX", "BB_CONSOLE_LINE_MAX", "BB_EVENT_MAX"]);

/** Each numeric `#define BB_NAME <number>u` that differs from the contract or is not classified, as one line. */
function headerMismatches(header: string): string[] {
  const problems: string[] = [];
  const seen = new Set<string>();
  for (const [, name, value] of header.matchAll(/^#define (BB_[A-Z0-9_]+) (0x[0-9A-Fa-f]+|\d+)u?\b/gm)) {
    seen.add(name!);
    if (C_ONLY.has(name!)) continue;
    const expected = SHARED[name!];
    if (expected === undefined) problems.push(`${name} is in badge.h but neither shared with firmware/badge-protocol.ts nor listed as the C badge's own`);
    else if (Number(value) !== expected) problems.push(`${name} is ${Number(value)} in badge.h but ${expected} in TypeScript`);
  }
  for (const name of Object.keys(SHARED)) if (!seen.has(name)) problems.push(`${name} is missing from badge.h`);
  return problems;
}

describe("the C reference badge holds the wire contract's values", () => {
  it("defines every shared limit in badge.h as firmware/badge-protocol.ts (and the modules it names) does", () => {
    expect(headerMismatches(read("badge.h"))).toEqual([]);
  });

  it("reports a header whose limit differs, or that adds one nobody classified", () => {
    const header = read("badge.h");
    const changed = header.replace(/^#define BB_MAX_TAPS \d+u/m, "#define BB_MAX_TAPS 99u").replace(/^#define BB_MIN_INSTALL_MV \d+u/m, "#define BB_MIN_INSTALL_MV 3800u");
    expect(headerMismatches(`${changed}\n#define BB_NEW_LIMIT 5u\n`)).toEqual([
      `BB_MIN_INSTALL_MV is 3800 in badge.h but ${Math.round(MIN_INSTALL_VOLTS * 1000)} in TypeScript`,
      `BB_MAX_TAPS is 99 in badge.h but ${MAX_TAPS} in TypeScript`,
      "BB_NEW_LIMIT is in badge.h but neither shared with firmware/badge-protocol.ts nor listed as the C badge's own",
    ]);
  });

  it("posts to the contract's paths with its request format", () => {
    const source = ["badge.c", "badge-update.c"].map(read).join("\n");
    expect(source).toContain(`post(b, "${BADGE_PATHS.check}"`);
    expect(source).toContain(`post(b, "${BADGE_PATHS.sync}"`);
    expect(source).toContain(`bb_request_add(&b->request, "v", "${REQUEST_FORMAT}")`);    // a verifying badge announces it with the contract's key and scheme
    expect(source).toContain(`bb_request_add(&b->request, "${SIGNATURE_ANNOUNCEMENT[0]}", "${SIGNATURE_ANNOUNCEMENT[1]}")`);
  });
});

describe("the badge codecs read what they write", () => {
  it("reads back the status a badge sends, fw left out when it has none", () => {
    const status = { version: "1.4.0-rc1", display: "Badge 1.4.0", volts: 3.851, charging: true };
    expect(parseBadgeRequest(formatRequest(formatStatusPairs(status))).status).toEqual(status);
    expect(parseBadgeRequest(formatRequest(formatStatusPairs({ ...status, display: null }))).status).toEqual({ ...status, display: null });
  });

  it("reads back taps, the UID upper-cased, and refuses one over MAX_TAPS", () => {
    const line = (n: number) => ({ line: n, value: formatTap(n, "04a1b2c3d0", 1_795_000_000 + n) });
    expect(parseTaps([line(7)])).toEqual([{ n: "7", cardUid: "04A1B2C3D0", at: new Date(1_795_000_007_000) }]);
    const taps = Array.from({ length: MAX_TAPS + 1 }, (_, i) => line(i + 1));
    expect(parseTaps(taps.slice(0, MAX_TAPS))).toHaveLength(MAX_TAPS);
    expect(() => parseTaps(taps)).toThrow(`${MAX_TAPS + 1} taps in one sync; send at most ${MAX_TAPS} at a time`);
  });

  it("reads back both report forms, a message with | kept whole", () => {
    expect(parseReport(okReport("1.5.0"))).toEqual({ raw: "ok|1.5.0", outcome: "ok", version: "1.5.0", message: null });
    const raw = errorReport("1.5.0", "MD5 mismatch | retry");
    expect(parseReport(raw)).toEqual({ raw, outcome: "err", version: "1.5.0", message: "MD5 mismatch | retry" });
  });
});

describe("parseContentRange (a resume's 206, issue 23)", () => {
  it("reads exactly bytes FIRST-LAST/TOTAL and nothing else", () => {
    expect(parseContentRange("bytes 196608-262143/262144")).toEqual({ first: 196608, last: 262143, total: 262144 });
    for (const bad of [null, undefined, "", "bytes */262144", "bytes 5-2/10", "bytes 0-10/10", "bytes 0-9/*", "bytes=0-9/10", "items 0-9/10", "bytes -1-9/10", "bytes 0-9/10, 0-1"]) {
      expect(parseContentRange(bad)).toBeNull();
    }
  });

  it("fuzzed (fast-check): never throws; what it accepts is a range inside its total and prints back the same", () => {
    const header = fc.oneof(
      fc.string({ maxLength: 40 }),
      fc.string({ unit: fc.constantFrom(..."bytes 0123456789-/*, "), maxLength: 40 }),
      fc.tuple(fc.nat(), fc.nat(), fc.nat()).map(([a, b, c]) => `bytes ${a}-${b}/${c}`),
    );
    fc.assert(
      fc.property(header, (value) => {
        const range = parseContentRange(value);
        if (range === null) return;
        expect(range.first).toBeLessThanOrEqual(range.last);
        expect(range.last).toBeLessThan(range.total);
        expect(`bytes ${range.first}-${range.last}/${range.total}`).toBe(value.trim());
      }),
      { seed: 20261126, numRuns: 2000 },
    );
  });
});
