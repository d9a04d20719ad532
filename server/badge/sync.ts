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
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Transaction } from "kysely";
import { parseVersion, type ResponseLine } from "../../firmware/index.ts";
import { newId } from "../ids.ts";
import { captureFromDevices, writeEvent, type CaptureInput } from "../services/attendance.ts";
import type { DeviceRow } from "../services/devices.ts";
import { findEnrolments, findStudentsByCards } from "../store/attendance-store.ts";
import { recordSync } from "../store/devices-store.ts";
import { findTaps, insertTaps, sessionsInRoom } from "../store/taps-store.ts";
import { insertReport, latestFetch, latestReport } from "../store/ota-store.ts";
import type { Database, DeviceTapsTable } from "../store/schema.ts";
import { lockKeys, type WriteBatcher } from "../store/write-batcher.ts";
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

const rejected = (reason: string, ids: Partial<TapVerdict> = {}): TapVerdict => ({
  result: "rejected",
  reason,
  session_id: null,
  student_id: null,
  record_id: null,
  ...ids,
});

type Session = Awaited<ReturnType<typeof sessionsInRoom>>["rows"][number];

/** A session with its start and end in milliseconds, parsed once for all of a sync's taps. */
interface TimedSession {
  session: Session;
  startsAt: number;
  endsAt: number;
}

/** Of the room's sessions (latest start first), the one a tap at `at` belongs to. */
function sessionFor(sessions: TimedSession[], at: number): TimedSession | undefined {
  return sessions.find((s) => s.startsAt <= at + EARLY_TAP_MS && s.endsAt >= at);
}

/**
 * The verdicts of new taps (none stored before), judged as a set: one lookup of the cards, one
 * of the room's sessions over the taps' span, one of the enrolments, then the captures.
 */
async function judgeTaps(trx: Transaction<Database>, device: DeviceRow, taps: Tap[], now: Date): Promise<TapVerdict[]> {
  const verdicts: (TapVerdict | undefined)[] = taps.map((tap) => {
    const at = tap.at.getTime();
    if (at < CLOCK_SET_AFTER) return rejected("clock_unset");
    if (at > now.getTime() + CLOCK_SKEW_MS) return rejected("clock_ahead");
    return undefined;
  });
  const open = taps.filter((_, i) => verdicts[i] === undefined);
  if (open.length === 0) return verdicts as TapVerdict[];
  const cards = await findStudentsByCards(trx, device.livemode, [...new Set(open.map((t) => t.cardUid))]);
  const studentOf = new Map(cards.rows.map((s) => [s.card_uid!, s]));
  const times = open.map((t) => t.at.getTime());
  const { rows: roomSessions } = await sessionsInRoom(
    trx,
    device.livemode,
    device.room,
    new Date(Math.max(...times) + EARLY_TAP_MS).toISOString(),
    new Date(Math.min(...times)).toISOString(),
  );
  const sessions = roomSessions.map((session) => ({ session, startsAt: Date.parse(session.starts_at), endsAt: Date.parse(session.ends_at) }));
  const matched = taps.map((tap, i) => {
    if (verdicts[i]) return undefined;
    const student = studentOf.get(tap.cardUid);
    if (!student) {
      verdicts[i] = rejected("unknown_card");
      return undefined;
    }
    const timed = sessionFor(sessions, tap.at.getTime());
    if (!timed) {
      verdicts[i] = rejected("no_session", { student_id: student.id });
      return undefined;
    }
    const { session } = timed;
    if (session.status !== "open") {
      verdicts[i] = rejected(`session_${session.status}`, { student_id: student.id, session_id: session.id });
      return undefined;
    }
    return { student, session, startsAt: timed.startsAt };
  });
  const candidates = matched.filter((m) => m !== undefined);
  const enrolled = new Set<string>();
  if (candidates.length > 0) {
    const { rows } = await findEnrolments(
      trx,
      device.livemode,
      [...new Set(candidates.map((m) => m.session.course_code))],
      [...new Set(candidates.map((m) => m.student.id))],
    );
    for (const row of rows) enrolled.add(`${row.course_code} ${row.student_id}`);
  }
  const captures: { index: number; input: CaptureInput }[] = [];
  matched.forEach((match, i) => {
    if (!match) return;
    const { student, session, startsAt } = match;
    if (!enrolled.has(`${session.course_code} ${student.id}`)) {
      verdicts[i] = rejected("not_enrolled", { student_id: student.id, session_id: session.id });
      return;
    }
    const tap = taps[i]!;
    const status = tap.at.getTime() <= startsAt + LATE_AFTER_MS ? "present" : "late";
    captures.push({ index: i, input: { device, session, student, status, at: tap.at } });
  });
  const outcomes = await captureFromDevices(trx, captures.map((c) => c.input));
  captures.forEach(({ index, input }, k) => {
    const { recordId, effect } = outcomes[k]!;
    verdicts[index] = {
      result: "accepted",
      reason: effect === "created" ? null : effect,
      student_id: input.student.id,
      session_id: input.session.id,
      record_id: recordId,
    };
  });
  return verdicts as TapVerdict[];
}

/**
 * Every tap's verdict: a tap stored before (a replay, or the same tap twice in this sync) keeps
 * the verdict it got; the new ones are judged as a set and stored in one insert.
 */
async function answerTaps(trx: Transaction<Database>, device: DeviceRow, taps: Tap[], now: Date): Promise<TapVerdict[]> {
  if (taps.length === 0) return [];
  const keyOf = (cardUid: string, tappedAt: string) => `${cardUid} ${tappedAt}`;
  const tappedAts = taps.map((tap) => tap.at.toISOString());
  const stored = new Map<string, TapVerdict>();
  const found = await findTaps(trx, device.id, [...new Set(taps.map((t) => t.cardUid))], [...new Set(tappedAts)]);
  for (const { card_uid, tapped_at, ...verdict } of found.rows) stored.set(keyOf(card_uid, tapped_at), verdict);
  const fresh: Tap[] = [];
  const firstOfKey = new Map<string, number>();
  taps.forEach((tap, i) => {
    const key = keyOf(tap.cardUid, tappedAts[i]!);
    if (stored.has(key) || firstOfKey.has(key)) return;
    firstOfKey.set(key, fresh.length);
    fresh.push(tap);
  });
  const verdicts = await judgeTaps(trx, device, fresh, now);
  if (fresh.length > 0) {
    const receivedAt = now.toISOString();
    await insertTaps(
      trx,
      fresh.map((tap, i) => {
        const verdict = verdicts[i]!;
        return {
          id: newId("tap", now.getTime()),
          livemode: device.livemode,
          device_id: device.id,
          card_uid: tap.cardUid,
          tapped_at: tap.at.toISOString(),
          received_at: receivedAt,
          result: verdict.result,
          reason: verdict.reason,
          session_id: verdict.session_id,
          student_id: verdict.student_id,
          record_id: verdict.record_id,
        };
      }),
    );
  }
  return taps.map((tap, i) => {
    const key = keyOf(tap.cardUid, tappedAts[i]!);
    return stored.get(key) ?? verdicts[firstOfKey.get(key)!]!;
  });
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
  return async (req: IncomingMessage, res: ServerResponse) => {
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
      const verdicts = await answerTaps(trx, device, taps, now);
      return taps.map((tap, i): ResponseLine => {
        const verdict = verdicts[i]!;
        return verdict.result === "accepted" ? { letter: "A", value: tap.n } : { letter: "R", value: `${tap.n} ${verdict.reason}` };
      });
    }, { lockKey: lockKeys.device(device.id) });
    sendLines(res, 200, RECHECK_AFTER_S.sync, [
      { letter: "T", value: String(Math.floor(now.getTime() / 1000)) },
      ...(report ? [{ letter: "O", value: report.raw }] : []),
      ...answers,
    ]);
  };
}
