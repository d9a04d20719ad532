// Badges: issuing and revoking device tokens, authenticating badge requests, and each badge's
// firmware state as the fleet view shows it. Device tokens (`dtk_test_...`, `dtk_live_...`) are
// stored hashed like API keys (secrets.ts); they open the badge endpoints only, and API keys
// open /v1 only.
import type { Kysely } from "kysely";
import { compareVersions, hasControlCharacter, parseVersion, type BadgeStatus, type Manifest } from "../../firmware/index.ts";
import { filterFingerprint, toPage, type CursorCodec } from "../cursor.ts";
import { ApiError, notFound } from "../errors.ts";
import { newId } from "../ids.ts";
import { findRelease, targetFor } from "../releases/release-store.ts";
import type { ChangeFeed } from "../store/change-feed.ts";
import * as devicesStore from "../store/devices-store.ts";
import { latestFetch, latestFetchPerDevice, latestReport, latestReportPerDevice } from "../store/ota-store.ts";
import type { Database, Db, DeviceTapsTable, Livemode, OtaFetchesTable, OtaReportsTable } from "../store/schema.ts";
import { listTaps } from "../store/taps-store.ts";
import type { Mode } from "./api-keys.ts";
import { cachedLookup } from "./feed-cache.ts";
import { lookupOf, newSecret, secretMatches } from "./secrets.ts";

export type DeviceRow = devicesStore.DeviceRow;

/** A badge that fetched an image and has not reported within this bound is "no_report". */
export const NO_REPORT_AFTER_MS = 60 * 60 * 1000;

export const FIRMWARE_STATES = ["current", "outdated", "unreleased", "updating", "failed", "no_report", "unknown", "revoked"] as const;
export type FirmwareState = (typeof FIRMWARE_STATES)[number];

export class DeviceError extends Error {
  override name = "DeviceError";
}

/** The room a new badge names does not exist in its mode. */
export class RoomUnknownError extends DeviceError {
  override name = "RoomUnknownError";
}

export const DEVICE_TEXT_MAX = 40;

function checkText(field: string, value: string) {
  if (value.trim().length === 0 || value.length > DEVICE_TEXT_MAX || hasControlCharacter(value)) {
    throw new DeviceError(`--${field} must be 1 to ${DEVICE_TEXT_MAX} printable characters`);
  }
}

export interface DeviceView {
  id: string;
  object: "device";
  livemode: boolean;
  name: string;
  room: string;
  model: string;
  token_hint: string | null;
  created_at: string;
  revoked_at: string | null;
}

function toView(row: DeviceRow): DeviceView {
  return {
    id: row.id,
    object: "device",
    livemode: row.livemode === 1,
    name: row.name,
    room: row.room,
    model: row.model,
    token_hint: row.token_hint,
    created_at: row.created_at,
    revoked_at: row.revoked_at,
  };
}

export async function createDevice(
  db: Kysely<Database>,
  input: { mode: Mode; room: string; model: string; name?: string },
): Promise<DeviceView & { token: string }> {
  const [device] = await createDevices(db, { ...input, names: [input.name] });
  return device!;
}

/**
 * Devices of one room and model, one per name (undefined: the default name), inserted in one
 * transaction a few hundred rows per statement: a simulated district's 50,000 badges are
 * provisioned in seconds, not the half hour one insert each took. Each gets its own token.
 */
export async function createDevices(
  db: Kysely<Database>,
  input: { mode: Mode; room: string; model: string; names: Array<string | undefined> },
): Promise<Array<DeviceView & { token: string }>> {
  checkText("room", input.room);
  checkText("model", input.model);
  for (const name of input.names) if (name !== undefined) checkText("name", name);
  const livemode: Livemode = input.mode === "live" ? 1 : 0;
  if (!(await devicesStore.roomExists(db, livemode, input.room))) {
    throw new RoomUnknownError(`no room ${input.room} in ${input.mode} mode; import the school first (badgebench import)`);
  }
  const createdAt = new Date().toISOString();
  const made = input.names.map((name) => {
    const token = newSecret(`dtk_${input.mode}_`);
    const row: DeviceRow = {
      id: newId("dev"),
      livemode,
      room: input.room,
      model: input.model,
      name: name ?? `${input.model} in ${input.room}`,
      created_at: createdAt,
      token_lookup: token.lookup,
      token_hash: token.hash,
      token_hint: token.hint,
      revoked_at: null,
      installed_version: null,
      installed_display: null,
      battery_volts: null,
      charging: null,
      last_check_at: null,
      last_sync_at: null,
      offered_version: null,
      offered_at: null,
    };
    return { row, token: token.secret };
  });
  await devicesStore.insertDevices(db, made.map(({ row }) => row));
  return made.map(({ row, token }) => ({ ...toView(row), token }));
}

export async function revokeDevice(db: Kysely<Database>, id: string): Promise<DeviceView> {
  const row = await devicesStore.revokeDevice(db, id, new Date().toISOString());
  if (!row) throw new DeviceError(`no device with id ${id}`);
  return toView(row);
}

/** POST /v1/devices: a badge added in the key's mode; a room the mode does not have is a 400 naming it. */
export async function addDevice(db: Kysely<Database>, livemode: Livemode, input: { room: string; model: string; name?: string }) {
  try {
    return await createDevice(db, { mode: livemode ? "live" : "test", ...input });
  } catch (error) {
    if (!(error instanceof RoomUnknownError)) throw error;
    throw new ApiError(400, "invalid_request_error", "room_unknown", `No room '${input.room}' in ${livemode ? "live" : "test"} mode; import it first.`, { param: "room" });
  }
}

/** POST /v1/devices/{id}/revoke: only a device of the key's own mode; another is not found. */
export async function withdrawDevice(db: Kysely<Database>, livemode: Livemode, id: string): Promise<DeviceView> {
  if (!(await devicesStore.findDevice(db, id, livemode))) throw notFound("device", id);
  return revokeDevice(db, id);
}

/**
 * Who a badge request comes from: the columns of its devices row that never change while its
 * token is valid (its check-in columns move with every request, so they are not part of it).
 */
export type DevicePrincipal = Pick<DeviceRow, "id" | "livemode" | "name" | "room" | "model">;

/** The badge a device token stands for, or undefined for an unknown or revoked token. */
export async function authenticateDevice(db: Db, token: string): Promise<DevicePrincipal | undefined> {
  const match = /^dtk_(test|live)_/.exec(token);
  if (!match) return undefined;
  const row = await devicesStore.findDeviceByTokenLookup(db, lookupOf(match[0], token));
  if (!row || row.revoked_at !== null || row.token_hash === null) return undefined;
  if (!secretMatches(token, row.token_hash)) return undefined;
  return { id: row.id, livemode: row.livemode, name: row.name, room: row.room, model: row.model };
}

export type AuthenticateDevice = (token: string) => Promise<DevicePrincipal | undefined>;

/** `authenticateDevice` with recent tokens' badges kept in memory until a revocation anywhere (feed-cache.ts). */
export function cachedDeviceAuthenticator(db: Db, changes: ChangeFeed): AuthenticateDevice {
  return cachedLookup(changes, (token) => authenticateDevice(db, token));
}

export interface FirmwareStatus {
  state: FirmwareState;
  installed: { version: string; display: string | null } | null;
  target_version: string | null;
  last_fetch: { version: string; outcome: string; bytes_sent: number; size: number; started_at: string; ended_at: string | null } | null;
  last_report: { version: string; outcome: "ok" | "err"; message: string | null; received_at: string } | null;
}

/**
 * A badge's firmware state, first match wins:
 * - revoked: its device token was revoked, so it can neither check nor update (whatever it ran);
 * - updating / no_report: it fetched an image and has not reported since (no_report once the
 *   fetch ended more than NO_REPORT_AFTER_MS ago);
 * - failed: its last report is `ota=err` and it still runs something older than what failed;
 * - unknown: it never checked in; unreleased: it runs a version never published (a USB flash);
 * - outdated: it runs something older than its target release; current otherwise.
 */
export function firmwareStateOf(
  device: DeviceRow,
  manifest: Manifest,
  fetch: OtaFetchesTable | undefined,
  report: OtaReportsTable | undefined,
  now: Date,
): FirmwareStatus {
  const target = targetFor(manifest, device.id);
  const installed = device.installed_version === null ? null : parseVersion(device.installed_version);
  const state = ((): FirmwareState => {
    if (device.revoked_at !== null) return "revoked";
    if (fetch && (!report || report.received_at < fetch.started_at)) {
      const since = Date.parse(fetch.ended_at ?? fetch.started_at);
      return fetch.outcome === "sending" || now.getTime() - since <= NO_REPORT_AFTER_MS ? "updating" : "no_report";
    }
    const failed = report?.outcome === "err" ? parseVersion(report.version) : null;
    if (failed && (!installed || compareVersions(installed, failed) < 0)) return "failed";
    if (!installed) return "unknown";
    if (!findRelease(manifest, installed.text)) return "unreleased";
    const targetVersion = target && parseVersion(target.version);
    if (targetVersion && compareVersions(installed, targetVersion) < 0) return "outdated";
    return "current";
  })();
  return {
    state,
    installed: device.installed_version === null ? null : { version: device.installed_version, display: device.installed_display },
    target_version: target?.version ?? null,
    last_fetch: fetch
      ? { version: fetch.version, outcome: fetch.outcome, bytes_sent: fetch.bytes_sent, size: fetch.size, started_at: fetch.started_at, ended_at: fetch.ended_at }
      : null,
    last_report: report
      ? { version: report.version, outcome: report.outcome, message: report.message, received_at: report.received_at }
      : null,
  };
}

export interface FleetDeviceView extends DeviceView {
  firmware: FirmwareStatus;
  battery: { volts: number | null; charging: boolean | null };
  last_check_at: string | null;
  last_sync_at: string | null;
}

function toFleetView(device: DeviceRow, firmware: FirmwareStatus): FleetDeviceView {
  return {
    ...toView(device),
    firmware,
    battery: { volts: device.battery_volts, charging: device.charging === null ? null : device.charging === 1 },
    last_check_at: device.last_check_at,
    last_sync_at: device.last_sync_at,
  };
}

export async function fleetViewOf(db: Db, device: DeviceRow, manifest: Manifest, now: Date): Promise<FleetDeviceView> {
  const [fetch, report] = await Promise.all([latestFetch(db, device.id), latestReport(db, device.id)]);
  return toFleetView(device, firmwareStateOf(device, manifest, fetch, report, now));
}

export const FLEET_SORTS = ["created", "name", "room", "model", "state", "installed_version", "battery", "last_seen"] as const;
export type FleetSort = (typeof FLEET_SORTS)[number];

/** `sort=state` puts what needs a person first. */
const STATE_RANK: Record<FirmwareState, number> = {
  failed: 0,
  no_report: 1,
  updating: 2,
  outdated: 3,
  unreleased: 4,
  unknown: 5,
  current: 6,
  // Out of service: nothing to do for it on the fleet page, so last.
  revoked: 7,
};

export interface FleetQuery {
  livemode: Livemode;
  state?: FirmwareState;
  room?: string;
  model?: string;
  sort: FleetSort;
  order: "asc" | "desc";
  /** keyset position of the last item of the previous page: its sort key and id */
  after?: [string, string];
  limit: number;
}

export interface FleetPage {
  devices: FleetDeviceView[];
  /** the keyset position of each device returned, for the next page's cursor */
  keys: [string, string][];
  has_more: boolean;
  /** devices matching every filter */
  total_count: number;
  /** devices per state, over the room and model filters only (so the counts read as a choice of state) */
  state_counts: Record<FirmwareState, number>;
}

const pad = (n: number, width: number) => String(n).padStart(width, "0");

/** A string that orders devices as the sort asks, compared by code points; ties go by id. */
function sortKeyOf(row: DeviceRow, state: FirmwareState, sort: FleetSort): string {
  switch (sort) {
    case "created":
      return row.created_at;
    case "name":
    case "room":
    case "model":
      return row[sort].toLowerCase();
    case "state":
      return String(STATE_RANK[state]);
    case "installed_version": {
      const version = row.installed_version === null ? null : parseVersion(row.installed_version);
      return version ? [version.major, version.minor, version.patch].map((n) => pad(n, 6)).join(".") : "";
    }
    case "battery":
      return row.battery_volts === null ? "" : pad(Math.round(row.battery_volts * 1000), 6);
    case "last_seen":
      return lastSeenOf(row) ?? "";
  }
}

function lastSeenOf(view: { last_check_at: string | null; last_sync_at: string | null }): string | null {
  const { last_check_at: check, last_sync_at: sync } = view;
  if (check === null || sync === null) return check ?? sync;
  return check > sync ? check : sync;
}

const compareKeys = (a: [string, string], b: [string, string]) =>
  a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0;

/**
 * One page of the fleet, filtered by state, room and model and sorted by any column. The state is
 * worked out per request (it moves with time: `updating` becomes `no_report`), so every badge of
 * the mode is read with its latest fetch and report in three queries and the page is cut in memory;
 * for 10,000 badges that is one pass, not 20,000 queries.
 */
export async function listFleet(db: Db, manifest: Manifest, now: Date, query: FleetQuery): Promise<FleetPage> {
  const [rows, fetches, reports] = await Promise.all([
    devicesStore.listDevices(db, { livemode: query.livemode, room: query.room, model: query.model }),
    latestFetchPerDevice(db, query.livemode),
    latestReportPerDevice(db, query.livemode),
  ]);
  const fetchOf = new Map(fetches.map((f) => [f.device_id, f]));
  const reportOf = new Map(reports.map((r) => [r.device_id, r]));
  const state_counts = Object.fromEntries(FIRMWARE_STATES.map((s) => [s, 0])) as Record<FirmwareState, number>;
  const direction = query.order === "asc" ? 1 : -1;
  // Views are built for the page only; every badge needs its state, for the counts and the filter.
  const matching: { row: DeviceRow; firmware: FirmwareStatus; key: [string, string] }[] = [];
  for (const row of rows) {
    const firmware = firmwareStateOf(row, manifest, fetchOf.get(row.id), reportOf.get(row.id), now);
    state_counts[firmware.state] += 1;
    if (query.state !== undefined && firmware.state !== query.state) continue;
    matching.push({ row, firmware, key: [sortKeyOf(row, firmware.state, query.sort), row.id] });
  }
  matching.sort((a, b) => direction * compareKeys(a.key, b.key));
  const after = query.after;
  const start = after === undefined ? 0 : matching.findIndex((m) => direction * compareKeys(m.key, after) > 0);
  const page = start === -1 ? [] : matching.slice(start, start + query.limit);
  return {
    devices: page.map((m) => toFleetView(m.row, m.firmware)),
    keys: page.map((m) => m.key),
    has_more: start !== -1 && start + query.limit < matching.length,
    total_count: matching.length,
    state_counts,
  };
}

/** What the devices row keeps of a badge's status, from its last check or sync. */
export const deviceReportOf = (status: BadgeStatus) => ({
  installed_version: status.version,
  installed_display: status.display,
  battery_volts: status.volts,
  charging: status.charging ? (1 as const) : (0 as const),
});

/** GET /v1/devices/:id: the device of this mode, as the fleet list shows it; 404 when there is none. */
export async function deviceView(db: Kysely<Database>, livemode: Livemode, id: string, manifest: Manifest, now: Date) {
  const device = await devicesStore.findDevice(db, id, livemode);
  if (!device) throw notFound("device", id);
  return fleetViewOf(db, device, manifest, now);
}

function tapView(row: DeviceTapsTable) {
  return {
    id: row.id,
    object: "device_tap",
    livemode: row.livemode === 1,
    device: { id: row.device_id },
    card_uid: row.card_uid,
    tapped_at: row.tapped_at,
    received_at: row.received_at,
    result: row.result,
    reason: row.reason,
    session: row.session_id === null ? null : { id: row.session_id },
    student: row.student_id === null ? null : { id: row.student_id },
    record: row.record_id === null ? null : { id: row.record_id },
  };
}

/** GET /v1/device_taps: the taps badges sent, newest received first, with their verdicts. */
export async function listDeviceTaps(
  db: Kysely<Database>,
  codec: CursorCodec,
  livemode: Livemode,
  query: { result?: "accepted" | "rejected"; device_id?: string; limit: number; cursor?: string },
) {
  const { limit, cursor, ...filterParams } = query;
  const filters = filterFingerprint("device_taps", filterParams);
  const position = cursor === undefined ? undefined : codec.decode(cursor, filters);
  const rows = await listTaps(db, { livemode, ...filterParams, after: position?.after, limit: limit + 1 });
  return toPage(rows, limit, { codec, filters, keyOf: (row) => [row.received_at, row.id], view: tapView });
}
