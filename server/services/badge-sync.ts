// The badge sync's rules (SPEC 2.7, 3.4, server/README.md "The badge protocol"): taps and an
// outcome report in, one verdict per tap out. `syncBadge` is the service the route calls; the
// parsing is firmware/badge-protocol.ts's and the answer's letter lines are the route's.
//
// A replayed sync (the response was lost and the badge sends the same lines again) changes
// nothing: a tap is identified by badge, card and second and answered as it was the first
// time; a report equal to the badge's last one, with no download since, is not stored again.
import type { Transaction } from "kysely";
import type { BadgeStatus, OtaReport, Tap } from "../../firmware/index.ts";
import { newId } from "../ids.ts";
import { findStudentsByCards } from "../store/attendance-store.ts";
import { recordSync } from "../store/devices-store.ts";
import { insertReport, latestFetch, latestReport } from "../store/ota-store.ts";
import type { Database, DeviceTapsTable, EventsTable, RecordsTable } from "../store/schema.ts";
import { enrolmentsInWindow, findTaps, insertCaptures, recordsInWindow, sessionsInRoom, type TapWindow, type WindowRecord } from "../store/taps-store.ts";
import { lockKeys, together, type WriteBatcher } from "../store/write-batcher.ts";
import { captureFromDevices, type CaptureInput } from "./attendance.ts";
import { deviceReportOf, type DevicePrincipal } from "./devices.ts";
import { writeEvent } from "./outbox.ts";
import type { RolloutEvaluator } from "./rollouts.ts";

/** A tap this long before a session starts counts for it (students arrive early). */
export const EARLY_TAP_MS = 15 * 60 * 1000;
/** A tap up to this long after the start is present; later, until the session ends, late. */
export const LATE_AFTER_MS = 5 * 60 * 1000;
/** A tap stamped further ahead than this is a badge whose clock is wrong. */
const CLOCK_SKEW_MS = 5 * 60 * 1000;
/** Taps stamped before this come from a badge whose clock was never set. */
const CLOCK_SET_AFTER = Date.parse("2020-01-01T00:00:00Z");

export type TapVerdict = Pick<DeviceTapsTable, "result" | "reason" | "session_id" | "student_id" | "record_id">;

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

/** What a sync reads before judging its taps, in one round trip (see answerTaps). */
interface TapLookups {
  cards: Awaited<ReturnType<typeof findStudentsByCards>>["rows"];
  roomSessions: Session[];
  enrolments: Awaited<ReturnType<typeof enrolmentsInWindow>>["rows"];
  /** locked */
  records: WindowRecord[];
}

/**
 * The verdicts of new taps (none stored before), judged as a set from the cards, the room's
 * sessions, the enrolments and the records read with the stored taps (answerTaps), then the
 * captures, whose records and events come back to be inserted with the taps.
 */
async function judgeTaps(
  trx: Transaction<Database>,
  device: DevicePrincipal,
  taps: Tap[],
  verdicts: (TapVerdict | undefined)[],
  { cards, roomSessions, enrolments, records }: TapLookups,
): Promise<{ verdicts: TapVerdict[]; records: RecordsTable[]; events: EventsTable[] }> {
  const studentOf = new Map(cards.map((s) => [s.card_uid!, s]));
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
  if (candidates.length === 0) return { verdicts: verdicts as TapVerdict[], records: [], events: [] };
  const enrolled = new Set(enrolments.map((row) => `${row.course_code} ${row.student_id}`));
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
  const { outcomes, records: newRecords, events } = await captureFromDevices(trx, captures.map((c) => c.input), records);
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
  return { verdicts: verdicts as TapVerdict[], records: newRecords, events };
}

/** A tap stamped before the badge's clock was set, or too far ahead: its verdict without reading anything. */
function clockVerdict(tap: Tap, now: Date): TapVerdict | undefined {
  const at = tap.at.getTime();
  if (at < CLOCK_SET_AFTER) return rejected("clock_unset");
  if (at > now.getTime() + CLOCK_SKEW_MS) return rejected("clock_ahead");
  return undefined;
}

/**
 * Every tap's verdict: a tap stored before (a replay, or the same tap twice in this sync) keeps
 * the verdict it got; the new ones are judged as a set and stored in one insert. The stored
 * taps, the cards, the room's sessions, the enrolments of the cards' students in the sessions'
 * courses and their records in the sessions (locked) are read in one round trip (pipelined on
 * PostgreSQL), those of every tap whose clock is plausible. What a replayed tap or one that
 * matches no open session reads is read for nothing, and its records are locked for nothing
 * until the group commits (a row lock on PostgreSQL also writes the row): a replayed sync, or a
 * badge back after a day offline, locks its students' records in every session of its window.
 * Measured on the benchmark's syncs of new taps, the round trip saved is worth more; a replay
 * phase was not measured.
 */
async function answerTaps(trx: Transaction<Database>, device: DevicePrincipal, taps: Tap[], now: Date): Promise<TapVerdict[]> {
  if (taps.length === 0) return [];
  const keyOf = (cardUid: string, tappedAt: string) => `${cardUid} ${tappedAt}`;
  const tappedAts = taps.map((tap) => tap.at.toISOString());
  const timely = taps.filter((tap) => clockVerdict(tap, now) === undefined);
  const times = timely.map((t) => t.at.getTime());
  const window: TapWindow | undefined =
    timely.length === 0
      ? undefined
      : { livemode: device.livemode, room: device.room, startsBy: new Date(Math.max(...times) + EARLY_TAP_MS).toISOString(), endsFrom: new Date(Math.min(...times)).toISOString() };
  const cardUids = [...new Set(timely.map((t) => t.cardUid))];
  const none = Promise.resolve(undefined);
  const [found, cards, roomSessions, enrolments, roomRecords] = await together(
    findTaps(trx, device.id, taps.map((tap, i) => ({ cardUid: tap.cardUid, tappedAt: tappedAts[i]! }))),
    window === undefined ? none : findStudentsByCards(trx, device.livemode, cardUids),
    window === undefined ? none : sessionsInRoom(trx, window),
    window === undefined ? none : enrolmentsInWindow(trx, window, cardUids),
    window === undefined ? none : recordsInWindow(trx, window, cardUids),
  );
  const stored = new Map<string, TapVerdict>();
  for (const { card_uid, tapped_at, ...verdict } of found.rows) stored.set(keyOf(card_uid, tapped_at), verdict);
  const fresh: Tap[] = [];
  const firstOfKey = new Map<string, number>();
  taps.forEach((tap, i) => {
    const key = keyOf(tap.cardUid, tappedAts[i]!);
    if (stored.has(key) || firstOfKey.has(key)) return;
    firstOfKey.set(key, fresh.length);
    fresh.push(tap);
  });
  const { verdicts, records, events } = await judgeTaps(trx, device, fresh, fresh.map((tap) => clockVerdict(tap, now)), {
    cards: cards?.rows ?? [],
    roomSessions: roomSessions?.rows ?? [],
    enrolments: enrolments?.rows ?? [],
    records: roomRecords?.rows ?? [],
  });
  if (fresh.length > 0) {
    const receivedAt = now.toISOString();
    const rows = fresh.map((tap, i) => {
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
    });
    await insertCaptures(trx, records, events, rows);
  }
  return taps.map((tap, i) => {
    const key = keyOf(tap.cardUid, tappedAts[i]!);
    return stored.get(key) ?? verdicts[firstOfKey.get(key)!]!;
  });
}

async function storeReport(trx: Transaction<Database>, device: DevicePrincipal, report: OtaReport, now: Date): Promise<void> {
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

/**
 * Records the badge's status, stores its report (unless it is a replay) and judges its taps, in
 * one transaction under the badge's lock; the verdicts are in the taps' order. After a report
 * commits, the staged rollout of its version (if one is open) is evaluated, so a failure halts it
 * before the badge hears back.
 */
export async function syncBadge(
  writes: WriteBatcher,
  device: DevicePrincipal,
  sync: { status: BadgeStatus; report: OtaReport | null; taps: Tap[] },
  now: Date,
  rollouts: Pick<RolloutEvaluator, "afterReport">,
): Promise<TapVerdict[]> {
  const verdicts = await writes.run(async (trx) => {
    // Sent together: the badge's row (the lock it takes first) with the report's and the taps' reads.
    const [, , answered] = await together(
      recordSync(trx, device.id, deviceReportOf(sync.status), now.toISOString()),
      sync.report ? storeReport(trx, device, sync.report, now) : Promise.resolve(),
      answerTaps(trx, device, sync.taps, now),
    );
    return answered;
  }, { lockKey: lockKeys.device(device.id) });
  if (sync.report) await rollouts.afterReport(device.livemode, sync.report.version);
  return verdicts;
}
