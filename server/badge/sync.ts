// POST /api/badge/sync: the badge's periodic report, in the check's text format.
//
// Request lines: v, sv, fw, bat, chg as in the check; at most one `ota=` outcome report
// (`ok|<version>` or `err|<version>|<message>`, SPEC 2.7); any number (up to MAX_TAPS) of
// `tap=<n>|<card UID>|<unix seconds>`, where n is the tap's number in the badge's queue.
//
// Response lines after `V1` and `S <seconds to the next sync>`: `T <server unix time>` (the
// badge sets its clock from it); `O <report>` when the outcome report is stored, so the badge
// can clear it; one `A <n>` (accepted) or `R <n> <reason>` (rejected, kept for review) per tap,
// so the badge can clear its queue either way.
//
// A replayed sync (the response was lost and the badge sends the same lines again) changes
// nothing: a tap is identified by badge, card and second and answered as it was the first
// time; a report equal to the badge's last one, with no download since, is not stored again.
import type { Request, Response } from "express";
import type { Transaction } from "kysely";
import { parseVersion, type ResponseLine } from "../../firmware/index.ts";
import { newId } from "../ids.ts";
import { captureFromDevice, writeEvent } from "../services/attendance.ts";
import type { DeviceRow } from "../services/devices.ts";
import { findStudentByCard, isEnrolled } from "../store/attendance-store.ts";
import { recordSync } from "../store/devices-store.ts";
import { findTap, insertTap, sessionAt } from "../store/taps-store.ts";
import { insertReport, latestFetch, latestReport } from "../store/ota-store.ts";
import type { Database, DeviceTapsTable } from "../store/schema.ts";
import type { WriteBatcher } from "../store/write-batcher.ts";
import { BadgeError, deviceOf, RECHECK_AFTER_S, sendLines } from "./badge-http.ts";
import { parseBadgeRequest } from "./badge-request.ts";

export const MAX_TAPS = 100;
/** A tap this long before a session starts counts for it (students arrive early). */
export const EARLY_TAP_MS = 15 * 60 * 1000;
/** A tap up to this long after the start is present; later, until the session ends, late. */
export const LATE_AFTER_MS = 5 * 60 * 1000;
/** A tap stamped further ahead than this is a badge whose clock is wrong. */
const CLOCK_SKEW_MS = 5 * 60 * 1000;
/** Taps stamped before this come from a badge whose clock was never set. */
const CLOCK_SET_AFTER = Date.parse("2020-01-01T00:00:00Z");

export interface Tap {
  n: string;
  cardUid: string;
  at: Date;
}

export interface OtaReport {
  raw: string;
  outcome: "ok" | "err";
  version: string;
  message: string | null;
}

const malformed = (code: string, message: string) => new BadgeError(400, code, message);

function parseTaps(lines: { line: number; value: string }[]): Tap[] {
  if (lines.length > MAX_TAPS) throw malformed("too_many_taps", `${lines.length} taps in one sync; send at most ${MAX_TAPS} at a time`);
  const seen = new Set<string>();
  return lines.map(({ line, value }) => {
    const match = /^(\d{1,9})\|([0-9A-Fa-f]{8,20})\|(\d{1,12})$/.exec(value);
    if (!match) throw malformed("malformed_tap", `line ${line}: tap '${value.slice(0, 60)}' is not <n>|<card UID hex>|<unix seconds>`);
    const [, n, uid, seconds] = match as unknown as [string, string, string, string];
    if (seen.has(n)) throw malformed("malformed_tap", `line ${line}: tap number ${n} is given twice`);
    seen.add(n);
    return { n, cardUid: uid.toUpperCase(), at: new Date(Number(seconds) * 1000) };
  });
}

function parseReport(value: string | undefined): OtaReport | null {
  if (value === undefined) return null;
  const [outcome, version, ...rest] = value.split("|");
  const bad = () => malformed("malformed_ota", `ota '${value.slice(0, 60)}' is not ok|<version> or err|<version>|<message>`);
  if (!version || !parseVersion(version)) throw bad();
  if (outcome === "ok" && rest.length === 0) return { raw: value, outcome, version, message: null };
  if (outcome === "err" && rest.length > 0) return { raw: value, outcome, version, message: rest.join("|").slice(0, 200) };
  throw bad();
}

type TapVerdict = Pick<DeviceTapsTable, "result" | "reason" | "session_id" | "student_id" | "record_id">;

async function judgeTap(trx: Transaction<Database>, device: DeviceRow, tap: Tap, now: Date): Promise<TapVerdict> {
  const rejected = (reason: string, ids: Partial<TapVerdict> = {}): TapVerdict => ({
    result: "rejected",
    reason,
    session_id: null,
    student_id: null,
    record_id: null,
    ...ids,
  });
  const at = tap.at.getTime();
  if (at < CLOCK_SET_AFTER) return rejected("clock_unset");
  if (at > now.getTime() + CLOCK_SKEW_MS) return rejected("clock_ahead");
  const student = await findStudentByCard(trx, device.livemode, tap.cardUid);
  if (!student) return rejected("unknown_card");
  const session = await sessionAt(trx, device.livemode, device.room, tap.at, EARLY_TAP_MS);
  if (!session) return rejected("no_session", { student_id: student.id });
  const ids = { student_id: student.id, session_id: session.id };
  if (session.status !== "open") return rejected(`session_${session.status}`, ids);
  if (!(await isEnrolled(trx, device.livemode, session.course_code, student.id))) return rejected("not_enrolled", ids);
  const status = at <= Date.parse(session.starts_at) + LATE_AFTER_MS ? "present" : "late";
  const { recordId, effect } = await captureFromDevice(trx, { device, session, student, status, at: tap.at });
  return { result: "accepted", reason: effect === "created" ? null : effect, ...ids, record_id: recordId };
}

async function storeReport(trx: Transaction<Database>, device: DeviceRow, report: OtaReport, now: Date): Promise<void> {
  const [last, fetch] = await Promise.all([latestReport(trx, device.id), latestFetch(trx, device.id)]);
  const replay = last?.report === report.raw && (!fetch || fetch.started_at <= last.received_at);
  if (replay) return;
  const row = {
    id: newId("rpt", now.getTime()),
    device_id: device.id,
    version: report.version,
    outcome: report.outcome,
    message: report.message,
    report: report.raw,
    received_at: now.toISOString(),
  };
  await insertReport(trx, row);
  await writeEvent(trx, device.livemode, "badge.ota_reported", {
    object: { id: row.id, object: "ota_report", device: { id: device.id, name: device.name, room: device.room }, version: row.version, outcome: row.outcome, message: row.message, received_at: row.received_at },
  }, now);
}

export function badgeSync(writes: WriteBatcher) {
  return async (req: Request, res: Response) => {
    const device = deviceOf(req);
    const request = parseBadgeRequest(req.body, ["tap"]);
    const taps = parseTaps(request.repeated.get("tap") ?? []);
    const report = parseReport(request.single.get("ota"));
    const now = new Date();
    const answers = await writes.run(async (trx) => {
      await recordSync(
        trx,
        device.id,
        {
          installed_version: request.status.version.text,
          installed_display: request.status.display,
          battery_volts: request.status.battery,
          charging: request.status.charging ? 1 : 0,
        },
        now.toISOString(),
      );
      if (report) await storeReport(trx, device, report, now);
      const lines: ResponseLine[] = [];
      for (const tap of taps) {
        const tappedAt = tap.at.toISOString();
        let verdict: TapVerdict | undefined = await findTap(trx, device.id, tap.cardUid, tappedAt);
        if (!verdict) {
          verdict = await judgeTap(trx, device, tap, now);
          await insertTap(trx, {
            id: newId("tap", now.getTime()),
            livemode: device.livemode,
            device_id: device.id,
            card_uid: tap.cardUid,
            tapped_at: tappedAt,
            received_at: now.toISOString(),
            ...verdict,
          });
        }
        lines.push(verdict.result === "accepted" ? { letter: "A", value: tap.n } : { letter: "R", value: `${tap.n} ${verdict.reason}` });
      }
      return lines;
    });
    sendLines(res, 200, RECHECK_AFTER_S.sync, [
      { letter: "T", value: String(Math.floor(now.getTime() / 1000)) },
      ...(report ? [{ letter: "O", value: report.raw }] : []),
      ...answers,
    ]);
  };
}
