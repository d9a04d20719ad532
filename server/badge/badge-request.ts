// Reads the key=value request both badge endpoints share (SPEC 4.8): `v=1`, `sv`, `fw`, `bat`,
// plus `chg` (1 while on external power, our addition). Unknown keys are ignored so newer
// firmware can add keys; a key given twice is an error unless the endpoint repeats it (taps).
import { parseRequest, parseVersion, type Version } from "../../firmware/index.ts";
import { BadgeError } from "./badge-http.ts";

export const REQUEST_FORMAT = "1";
export const MIN_INSTALL_VOLTS = 3.85;
const DISPLAY_MAX = 64;
const MAX_VOLTS = 6;

export interface BadgeStatus {
  version: Version;
  display: string | null;
  /** volts */
  battery: number;
  charging: boolean;
}

export interface BadgeRequest {
  status: BadgeStatus;
  /** values of the keys the endpoint allows more than once, in order, with their line numbers */
  repeated: Map<string, { line: number; value: string }[]>;
  single: Map<string, string>;
}

const malformed = (code: string, message: string) => new BadgeError(400, code, message);

export function parseBadgeRequest(body: unknown, repeatable: readonly string[] = []): BadgeRequest {
  if (typeof body !== "string" || body.length === 0) throw malformed("malformed_request", "the body is empty; send key=value lines");
  const parsed = parseRequest(body);
  if (!parsed.ok) throw malformed("malformed_request", parsed.message);
  const single = new Map<string, string>();
  const repeated = new Map<string, { line: number; value: string }[]>(repeatable.map((key) => [key, []]));
  parsed.pairs.forEach(([key, value], index) => {
    const list = repeated.get(key);
    if (list) list.push({ line: index + 1, value });
    else if (single.has(key)) throw malformed("malformed_request", `line ${index + 1}: key '${key}' is given twice`);
    else single.set(key, value);
  });
  const format = single.get("v");
  if (format !== REQUEST_FORMAT) {
    throw malformed(
      "unsupported_request",
      format === undefined ? "the request has no v line; this server reads v=1" : `request format v=${format.slice(0, 8)} is not supported; this server reads v=1`,
    );
  }
  const sv = single.get("sv");
  if (sv === undefined) throw malformed("malformed_sv", "sv is missing; send the installed version as three dotted numbers");
  const version = parseVersion(sv);
  if (!version) throw malformed("malformed_sv", `sv '${sv.slice(0, 40)}' is not three dotted numbers (like 1.4.0)`);
  const display = single.get("fw") ?? null;
  if (display !== null && display.length > DISPLAY_MAX) throw malformed("malformed_fw", `fw is longer than ${DISPLAY_MAX} characters`);
  const bat = single.get("bat");
  if (bat === undefined) throw malformed("malformed_bat", "bat is missing; send the battery voltage in volts (like 3.92)");
  if (!/^\d{1,3}(\.\d{1,4})?$/.test(bat) || Number(bat) > MAX_VOLTS) {
    throw malformed("malformed_bat", `bat '${bat.slice(0, 20)}' is not a battery voltage in volts (like 3.92)`);
  }
  const chg = single.get("chg") ?? "0";
  if (chg !== "0" && chg !== "1") throw malformed("malformed_chg", `chg '${chg.slice(0, 20)}' is not 0 or 1`);
  return { status: { version, display, battery: Number(bat), charging: chg === "1" }, repeated, single };
}
