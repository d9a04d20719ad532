// The badge endpoints' wire contract (SPEC 4.8, server/README.md "The badge protocol"), once for
// both sides: the paths, the limits and timings, the status every check and sync carries (its
// request format and parser), and the `tap=` and `ota=` codecs. The server reads with these
// parsers; the simulated badge, the fault proxy and the benchmarks write with these formatters.
// The C badge's `badge.h` holds the same limits; test/firmware/badge-protocol.test.ts checks it.
import { parseRequest } from "./line-codec.ts";
import { SIGNATURE_REQUEST_KEY, SIGNATURE_SCHEME } from "./signature.ts";
import { parseVersion } from "./version.ts";

export const BADGE_PREFIX = "/api/badge";
export const BADGE_PATHS = {
  check: `${BADGE_PREFIX}/ota/check`,
  sync: `${BADGE_PREFIX}/sync`,
  download: `${BADGE_PREFIX}/ota/download`,
} as const;

/** The `P` line of an offer: where the badge downloads `version`. */
export const downloadPath = (version: string) => `${BADGE_PATHS.download}?v=${encodeURIComponent(version)}`;

/** The `v=` line: the request format this contract describes. */
export const REQUEST_FORMAT = "1";
/** The badge refuses to start an install below this unless it is charging, and the server does not offer one (SPEC 3.4). */
export const MIN_INSTALL_VOLTS = 3.85;
/** Card taps in one sync (the badge's queue holds as many). */
export const MAX_TAPS = 100;
/** The `fw=` display string, in characters. */
export const DISPLAY_MAX = 64;
/** A `bat=` above this is not a battery voltage. */
export const MAX_VOLTS = 6;
/** The message of an `ota=err` report is kept to this many characters. */
export const REPORT_MESSAGE_MAX = 200;
/** A card UID is 4 to 10 bytes, written in hex. */
export const CARD_UID_MIN_HEX = 8;
export const CARD_UID_MAX_HEX = 20;

/** The `S` line: seconds before the badge should contact the server again on its own. */
export const RECHECK_AFTER_S = {
  offer: 3600,
  current: 6 * 3600,
  noRelease: 6 * 3600,
  batteryLow: 15 * 60,
  sync: 15 * 60,
  /** a request the server cannot read is a firmware bug: retrying soon only repeats it */
  malformed: 24 * 3600,
  serverTrouble: 5 * 60,
  unauthorized: 0,
} as const;

/** A request that breaks the contract: `code` is the `X` line's code, `message` says which line and what to send. */
export class BadgeRequestError extends Error {
  override name = "BadgeRequestError";
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** What the badge says about itself in every check and sync (the `v sv fw bat chg` keys). */
export interface BadgeStatus {
  /** the installed version, as the badge writes it */
  version: string;
  /** the `fw=` display string; null when the badge sent none */
  display: string | null;
  volts: number;
  charging: boolean;
}

/** The status as request pairs, `v=1` first; volts with three decimals, as the badge prints them. */
export function formatStatusPairs(status: BadgeStatus): Array<[string, string]> {
  return [
    ["v", REQUEST_FORMAT],
    ["sv", status.version],
    ...(status.display === null ? [] : [["fw", status.display] as [string, string]]),
    ["bat", status.volts.toFixed(3)],
    ["chg", status.charging ? "1" : "0"],
  ];
}

export interface BadgeRequest {
  status: BadgeStatus;
  /** values of the keys the endpoint allows more than once, in order, with their line numbers */
  repeated: Map<string, { line: number; value: string }[]>;
  single: Map<string, string>;
}

/**
 * Reads the key=value request both badge endpoints share: `v=1`, `sv`, `fw`, `bat`, plus `chg`
 * (1 while on external power, our addition). Unknown keys are ignored so newer firmware can add
 * keys; a key given twice is an error unless the endpoint repeats it (taps). Throws BadgeRequestError.
 */
export function parseBadgeRequest(body: unknown, repeatable: readonly string[] = []): BadgeRequest {
  if (typeof body !== "string" || body.length === 0) throw new BadgeRequestError("malformed_request", "the body is empty; send key=value lines");
  const parsed = parseRequest(body);
  if (!parsed.ok) throw new BadgeRequestError("malformed_request", parsed.message);
  const single = new Map<string, string>();
  const repeated = new Map<string, { line: number; value: string }[]>(repeatable.map((key) => [key, []]));
  parsed.pairs.forEach(([key, value], index) => {
    const list = repeated.get(key);
    if (list) list.push({ line: index + 1, value });
    else if (single.has(key)) throw new BadgeRequestError("malformed_request", `line ${index + 1}: key '${key}' is given twice`);
    else single.set(key, value);
  });
  return { status: readStatus(single), repeated, single };
}

function readStatus(single: Map<string, string>): BadgeStatus {
  const format = single.get("v");
  if (format !== REQUEST_FORMAT) {
    throw new BadgeRequestError(
      "unsupported_request",
      format === undefined ? "the request has no v line; this server reads v=1" : `request format v=${format.slice(0, 8)} is not supported; this server reads v=1`,
    );
  }
  const sv = single.get("sv");
  if (sv === undefined) throw new BadgeRequestError("malformed_sv", "sv is missing; send the installed version as three dotted numbers");
  if (!parseVersion(sv)) throw new BadgeRequestError("malformed_sv", `sv '${sv.slice(0, 40)}' is not three dotted numbers (like 1.4.0)`);
  const display = single.get("fw") ?? null;
  if (display !== null && display.length > DISPLAY_MAX) throw new BadgeRequestError("malformed_fw", `fw is longer than ${DISPLAY_MAX} characters`);
  const bat = single.get("bat");
  if (bat === undefined) throw new BadgeRequestError("malformed_bat", "bat is missing; send the battery voltage in volts (like 3.92)");
  if (!/^\d{1,3}(\.\d{1,4})?$/.test(bat) || Number(bat) > MAX_VOLTS) {
    throw new BadgeRequestError("malformed_bat", `bat '${bat.slice(0, 20)}' is not a battery voltage in volts (like 3.92)`);
  }
  const chg = single.get("chg") ?? "0";
  if (chg !== "0" && chg !== "1") throw new BadgeRequestError("malformed_chg", `chg '${chg.slice(0, 20)}' is not 0 or 1`);
  return { version: sv, display, volts: Number(bat), charging: chg === "1" };
}

/** A `tap=<n>|<card UID hex>|<unix seconds>` line as read: n as the badge wrote it, the UID upper-case. */
export interface Tap {
  n: string;
  cardUid: string;
  at: Date;
}

/** The value of one `tap=` line; n is the tap's number in the badge's queue. */
export const formatTap = (n: number, cardUid: string, unixS: number) => `${n}|${cardUid}|${unixS}`;

const TAP_PATTERN = new RegExp(`^(\\d{1,9})\\|([0-9A-Fa-f]{${CARD_UID_MIN_HEX},${CARD_UID_MAX_HEX}})\\|(\\d{1,12})$`);

/** Reads a sync's `tap=` lines; throws BadgeRequestError for more than MAX_TAPS, a malformed line or a number given twice. */
export function parseTaps(lines: { line: number; value: string }[]): Tap[] {
  if (lines.length > MAX_TAPS) throw new BadgeRequestError("too_many_taps", `${lines.length} taps in one sync; send at most ${MAX_TAPS} at a time`);
  const seen = new Set<string>();
  return lines.map(({ line, value }) => {
    const match = TAP_PATTERN.exec(value);
    if (!match) throw new BadgeRequestError("malformed_tap", `line ${line}: tap '${value.slice(0, 60)}' is not <n>|<card UID hex>|<unix seconds>`);
    const [, n, uid, seconds] = match as unknown as [string, string, string, string];
    if (seen.has(n)) throw new BadgeRequestError("malformed_tap", `line ${line}: tap number ${n} is given twice`);
    seen.add(n);
    return { n, cardUid: uid.toUpperCase(), at: new Date(Number(seconds) * 1000) };
  });
}

/** An `ota=` outcome report (SPEC 2.7): `ok|<version>` or `err|<version>|<message>`; `raw` as sent. */
export interface OtaReport {
  raw: string;
  outcome: "ok" | "err";
  version: string;
  message: string | null;
}

export const okReport = (version: string) => `ok|${version}`;
export const errorReport = (version: string, message: string) => `err|${version}|${message}`;

/** Reads a sync's `ota=` value (undefined: none sent); throws BadgeRequestError when it is neither form. */
export function parseReport(value: string | undefined): OtaReport | null {
  if (value === undefined) return null;
  const [outcome, version, ...rest] = value.split("|");
  const bad = () => new BadgeRequestError("malformed_ota", `ota '${value.slice(0, 60)}' is not ok|<version> or err|<version>|<message>`);
  if (!version || !parseVersion(version)) throw bad();
  if (outcome === "ok" && rest.length === 0) return { raw: value, outcome, version, message: null };
  if (outcome === "err" && rest.length > 0) return { raw: value, outcome, version, message: rest.join("|").slice(0, REPORT_MESSAGE_MAX) };
  throw bad();
}

// ---- signed releases (issue 24; the formats are signature.ts's) ----
// A badge that verifies release signatures adds `sig=ed25519` to its check request; the offer it
// is answered with then carries `G <key id> <base64 signature>` after `P`, when the release is
// signed. A badge without the line (all firmware before it) is answered exactly as before; a
// `sig=` naming a scheme this server does not sign with is answered as if it were absent.

/** The request pair a verifying badge adds to its check. */
export const SIGNATURE_ANNOUNCEMENT: [string, string] = [SIGNATURE_REQUEST_KEY, SIGNATURE_SCHEME];

/** Whether the check request announced that the badge verifies Ed25519 signatures. */
export const announcesSignatures = (request: BadgeRequest) => request.single.get(SIGNATURE_REQUEST_KEY) === SIGNATURE_SCHEME;
/**
 * A 206's `Content-Range: bytes FIRST-LAST/TOTAL` (issue 23), strictly: digits only (at most 10),
 * FIRST <= LAST < TOTAL; null for anything else (an unknown total `*`, the 416 form with no range,
 * garbage). A badge that resumes checks FIRST against its checkpoint and TOTAL against the offer.
 */
export function parseContentRange(value: string | null | undefined): { first: number; last: number; total: number } | null {
  const match = /^bytes (\d{1,10})-(\d{1,10})\/(\d{1,10})$/.exec(value?.trim() ?? "");
  if (!match) return null;
  const [first, last, total] = [Number(match[1]), Number(match[2]), Number(match[3])];
  return first <= last && last < total ? { first, last, total } : null;
}

/** The `If-Range` (and ETag) a badge resumes with: the offer's MD5, quoted, the server's strong ETag. */
export const imageEtag = (md5: string) => `"${md5}"`;
