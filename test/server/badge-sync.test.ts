// POST /api/badge/sync: card taps become device captures, outcome reports are recorded, and a
// replayed sync (the badge lost the response and sends the same lines again) marks nothing twice.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { lines, startBadgeHarness, type BadgeHarness } from "./badge-harness.ts";

let h: BadgeHarness;
beforeAll(async () => {
  h = await startBadgeHarness();
});
afterAll(() => h.close());

const unix = (date: Date) => Math.floor(date.getTime() / 1000);
const minutesAfter = (date: Date, minutes: number) => new Date(date.getTime() + minutes * 60_000);
const status = (sv = "1.4.0") => [`v=1`, `sv=${sv}`, "fw=Badge", "bat=3.91", "chg=0"];
const tap = (n: number, card: string, at: Date) => `tap=${n}|${card}|${unix(at)}`;

async function recordOf(sessionId: string, externalId: string) {
  const list = await h.api(`/v1/attendance?session_id=${sessionId}&external_id=${externalId}&from=2000-01-01&to=2100-01-01`, h.keys.read);
  const item = list.body.data[0];
  return item ? (await h.api(`/v1/attendance/${item.id}`, h.keys.read)).body : undefined;
}

const counts = async () => ({
  records: await h.count("records"),
  events: await h.count("events"),
  history: await h.count("record_history"),
  taps: await h.count("device_taps"),
  reports: await h.count("ota_reports"),
});

describe("card taps", () => {
  it("become device captures in the open session of the badge's room: present early, late after 5 minutes", async () => {
    const { mathStartsAt } = h.sessions;
    const answer = await h.sync(
      h.devices.r1.token,
      lines(...status(), tap(1, h.cards[0]!, minutesAfter(mathStartsAt, -3)), tap(2, h.cards[1]!, minutesAfter(mathStartsAt, 5)), tap(3, h.cards[2]!, minutesAfter(mathStartsAt, 6))),
    );
    expect(answer.status).toBe(200);
    expect(answer.all("A")).toEqual(["1", "2", "3"]);
    expect(Math.abs(Number(answer.get("T")) - Date.now() / 1000)).toBeLessThan(5);
    const s1 = await recordOf(h.sessions.mathOpen, "S1");
    expect(s1).toMatchObject({
      status: "present",
      method: "device",
      recorded_at: minutesAfter(mathStartsAt, -3).toISOString().replace(/\.\d{3}Z$/, ".000Z"),
      device: { id: h.devices.r1.id, model: "badge-v2" },
      session: { id: h.sessions.mathOpen, room: "R1" },
      history: [],
    });
    expect((await recordOf(h.sessions.mathOpen, "S2")).status).toBe("present");
    expect((await recordOf(h.sessions.mathOpen, "S3")).status).toBe("late");
  });

  it("writes an attendance.recorded event whose actor is the device", async () => {
    const events = await h.server.store.db.selectFrom("events").selectAll().where("type", "=", "attendance.recorded").execute();
    const payloads = events.map((e) => JSON.parse(e.payload));
    expect(payloads.some((p) => p.data.actor.type === "device" && p.data.actor.id === h.devices.r1.id && p.data.object.method === "device")).toBe(true);
  });

  it("the event carries the record exactly as the API shows it", async () => {
    const s1 = await recordOf(h.sessions.mathOpen, "S1");
    const events = await h.server.store.db.selectFrom("events").select("payload").where("type", "=", "attendance.recorded").execute();
    const event = events.map((e) => JSON.parse(e.payload)).find((p) => p.data.object.id === s1.id);
    expect(event.data.object).toEqual(s1);
    expect(event.data.actor).toEqual({ type: "device", id: h.devices.r1.id, name: expect.any(String) });
  });

  it("a replayed sync answers the same and marks nothing twice", async () => {
    const body = lines(...status(), tap(7, h.cards[3]!, minutesAfter(h.sessions.mathStartsAt, 1)), tap(8, "0000DEADBEEF", minutesAfter(h.sessions.mathStartsAt, 1)));
    const first = await h.sync(h.devices.r1.token, body);
    const before = await counts();
    const replay = await h.sync(h.devices.r1.token, body);
    expect(replay.all("A")).toEqual(first.all("A"));
    expect(replay.all("R")).toEqual(first.all("R"));
    expect(first.all("A")).toEqual(["7"]);
    expect(first.all("R")).toEqual(["8 unknown_card"]);
    expect(await counts()).toEqual(before);
  });

  it("concurrent replays of one sync still mark once", async () => {
    const body = lines(...status(), tap(9, h.cards[4]!, minutesAfter(h.sessions.mathStartsAt, 2)));
    const before = await counts();
    const answers = await Promise.all(Array.from({ length: 8 }, () => h.sync(h.devices.r1b.token, body)));
    expect(answers.map((a) => a.all("A"))).toEqual(Array.from({ length: 8 }, () => ["9"]));
    const after = await counts();
    expect(after.records - before.records).toBe(1);
    expect(after.taps - before.taps).toBe(1);
  });

  it("a second capture for a student keeps the first (badge r1b tapping S1 later)", async () => {
    const answer = await h.sync(h.devices.r1b.token, lines(...status(), tap(1, h.cards[0]!, minutesAfter(h.sessions.mathStartsAt, 20))));
    expect(answer.all("A")).toEqual(["1"]);
    const s1 = await recordOf(h.sessions.mathOpen, "S1");
    expect(s1).toMatchObject({ status: "present", device: { id: h.devices.r1.id } });
    const stored = await h.server.store.db.selectFrom("device_taps").selectAll().where("device_id", "=", h.devices.r1b.id).where("card_uid", "=", h.cards[0]!).executeTakeFirstOrThrow();
    expect(stored).toMatchObject({ result: "accepted", reason: "already_marked", record_id: s1.id });
  });

  it.each([
    ["a badge clock that was never set", () => new Date(1000 * 1000), "clock_unset"],
    ["a badge clock an hour ahead", () => new Date(Date.now() + 3600_000), "clock_ahead"],
    ["a time when no session runs in the room", () => minutesAfter(h.sessions.mathStartsAt, -60), "no_session"],
    ["a card no student holds", () => minutesAfter(h.sessions.mathStartsAt, 1), "unknown_card"],
  ])("rejects a tap with %s, answers R with the reason, and keeps it for review", async (_name, at, reason) => {
    const card = reason === "unknown_card" ? "04FFFFFFFF" : h.cards[1]!;
    // Read the clock once: the review below must look for the very time that was sent.
    const when = at();
    const before = await counts();
    const answer = await h.sync(h.devices.r1.token, lines(...status(), tap(40, card, when)));
    expect(answer.status).toBe(200);
    expect(answer.all("R")).toEqual([`40 ${reason}`]);
    const after = await counts();
    expect(after.taps - before.taps).toBe(1);
    expect(after.records).toBe(before.records);
    const review = await h.api(`/v1/device_taps?result=rejected&device_id=${h.devices.r1.id}&limit=200`, h.keys.admin);
    expect(review.status).toBe(200);
    expect(review.body.data.some((t: any) => t.card_uid === card && t.reason === reason && t.tapped_at === new Date(unix(when) * 1000).toISOString())).toBe(true);
  });
});

describe("only an open session accepts captures", () => {
  const s6 = () => h.cards[5]!;

  it("a tap in a scheduled session is rejected and kept", async () => {
    const answer = await h.sync(h.devices.r2.token, lines(...status(), tap(1, s6(), minutesAfter(h.sessions.artStartsAt, 1))));
    expect(answer.all("R")).toEqual(["1 session_scheduled"]);
    const review = await h.api(`/v1/device_taps?result=rejected&device_id=${h.devices.r2.id}`, h.keys.admin);
    expect(review.body.data).toMatchObject([{ card_uid: s6(), reason: "session_scheduled", session: { id: h.sessions.artScheduled }, record: null }]);
    expect(await recordOf(h.sessions.artScheduled, "S6")).toBeUndefined();
  });

  it("once open, a capture takes over the API's mark, with a history entry whose actor is the device", async () => {
    const opened = await fetch(`${h.url}/v1/sessions/${h.sessions.artScheduled}/open`, {
      method: "POST",
      headers: { authorization: `Bearer ${h.keys.sessions}`, "idempotency-key": "open-art" },
    });
    expect(opened.status).toBe(200);
    const created = await fetch(`${h.url}/v1/attendance`, {
      method: "POST",
      headers: { authorization: `Bearer ${h.keys.write}`, "content-type": "application/json", "idempotency-key": "api-mark-s6" },
      body: JSON.stringify({ session_id: h.sessions.artScheduled, external_id: "S6", status: "absent" }),
    });
    expect(created.status).toBe(201);
    const answer = await h.sync(h.devices.r2.token, lines(...status(), tap(2, s6(), minutesAfter(h.sessions.artStartsAt, 7))));
    expect(answer.all("A")).toEqual(["2"]);
    const record = await recordOf(h.sessions.artScheduled, "S6");
    expect(record).toMatchObject({ status: "late", method: "device", device: { id: h.devices.r2.id } });
    expect(record.history).toHaveLength(1);
    expect(record.history[0]).toMatchObject({ from: "absent", to: "late", actor: { type: "device", id: h.devices.r2.id } });
    expect(record.history[0].reason).toMatch(/replaces the api mark/);
    const events = await h.server.store.db.selectFrom("events").select("payload").where("type", "=", "attendance.updated").execute();
    expect(JSON.parse(events.at(-1)!.payload).data).toMatchObject({
      object: { id: record.id, status: "late" },
      from: "absent",
      to: "late",
      previous_attributes: { status: "absent", method: "api" },
      actor: { type: "device", id: h.devices.r2.id },
    });
  });

  it("a student not enrolled in the session's course is rejected", async () => {
    const answer = await h.sync(h.devices.r2.token, lines(...status(), tap(3, h.cards[0]!, minutesAfter(h.sessions.artStartsAt, 2))));
    expect(answer.all("R")).toEqual(["3 not_enrolled"]);
  });
});

describe("outcome reports", () => {
  const reports = () => h.server.store.db.selectFrom("ota_reports").selectAll().where("device_id", "=", h.devices.r2.id).orderBy("received_at").execute();

  it("stores ota=err with its message, echoes it on an O line and writes a badge.ota_reported event", async () => {
    const answer = await h.sync(h.devices.r2.token, lines(...status("1.3.0"), "ota=err|1.4.0|download cut at 51% (1002 of 1966 KiB)"));
    expect(answer.status).toBe(200);
    expect(answer.get("O")).toBe("err|1.4.0|download cut at 51% (1002 of 1966 KiB)");
    expect(await reports()).toMatchObject([{ version: "1.4.0", outcome: "err", message: "download cut at 51% (1002 of 1966 KiB)" }]);
    const events = await h.server.store.db.selectFrom("events").selectAll().where("type", "=", "badge.ota_reported").execute();
    expect(JSON.parse(events.at(-1)!.payload).data.object).toMatchObject({ device: { id: h.devices.r2.id }, version: "1.4.0", outcome: "err" });
  });

  it("a replayed report is not stored twice", async () => {
    const answer = await h.sync(h.devices.r2.token, lines(...status("1.3.0"), "ota=err|1.4.0|download cut at 51% (1002 of 1966 KiB)"));
    expect(answer.get("O")).toBe("err|1.4.0|download cut at 51% (1002 of 1966 KiB)");
    expect(await reports()).toHaveLength(1);
  });

  it("stores ota=ok", async () => {
    await h.sync(h.devices.r2.token, lines(...status("1.4.0"), "ota=ok|1.4.0"));
    expect((await reports()).map((r) => r.outcome)).toEqual(["err", "ok"]);
  });
});

describe("bad syncs get a 400 with an X line and change nothing", () => {
  const at = () => minutesAfter(h.sessions.mathStartsAt, 1);
  const cases: [string, () => string, string][] = [
    ["a tap that is not n|uid|seconds", () => lines(...status(), "tap=1|04A1B2C3D0"), "malformed_tap"],
    ["a tap with a time that is not a number", () => lines(...status(), "tap=1|04A1B2C3D0|yesterday"), "malformed_tap"],
    ["a tap number given twice", () => lines(...status(), tap(1, h.cards[0]!, at()), tap(1, h.cards[1]!, at())), "malformed_tap"],
    ["101 taps", () => lines(...status(), ...Array.from({ length: 101 }, (_, i) => tap(i, h.cards[0]!, new Date(at().getTime() + i * 1000)))), "too_many_taps"],
    ["an ota report of an unknown form", () => lines(...status(), "ota=maybe|1.4.0"), "malformed_ota"],
    ["ota=ok with a message", () => lines(...status(), "ota=ok|1.4.0|fine"), "malformed_ota"],
    ["ota=err without a message", () => lines(...status(), "ota=err|1.4.0"), "malformed_ota"],
    ["an ota report with a bad version", () => lines(...status(), "ota=ok|1.4"), "malformed_ota"],
    ["two ota reports", () => lines(...status(), "ota=ok|1.4.0", "ota=ok|1.4.0"), "malformed_request"],
    ["a malformed sv, with good taps", () => lines("v=1", "sv=1.4", "bat=3.9", tap(1, h.cards[0]!, at())), "malformed_sv"],
  ];
  it.each(cases)("%s", async (_name, body, code) => {
    const before = await counts();
    const device = await h.server.store.db.selectFrom("devices").selectAll().where("id", "=", h.devices.r1.id).executeTakeFirstOrThrow();
    const answer = await h.sync(h.devices.r1.token, body());
    expect(answer.status).toBe(400);
    expect(answer.get("X")?.split(" ")[0]).toBe(code);
    expect(await counts()).toEqual(before);
    expect(await h.server.store.db.selectFrom("devices").selectAll().where("id", "=", h.devices.r1.id).executeTakeFirstOrThrow()).toEqual(device);
  });
});

describe("the taps of one sync are judged as a set", () => {
  let fresh: BadgeHarness;
  beforeAll(async () => {
    fresh = await startBadgeHarness();
  });
  afterAll(() => fresh.close());

  it("the same tap twice and one student twice in one sync: the first makes the record, the repeat is answered as the first", async () => {
    const { mathStartsAt } = fresh.sessions;
    const [s1, s2] = [fresh.cards[0]!, fresh.cards[1]!];
    const answer = await fresh.sync(
      fresh.devices.r1.token,
      lines(...status(), tap(1, s1, minutesAfter(mathStartsAt, 1)), tap(2, s1, minutesAfter(mathStartsAt, 1)), tap(3, s1, minutesAfter(mathStartsAt, 8)), tap(4, s2, minutesAfter(mathStartsAt, 9))),
    );
    expect(answer.all("A")).toEqual(["1", "2", "3", "4"]);
    expect(await fresh.count("records")).toBe(2);
    expect(await fresh.count("events")).toBe(2);
    const taps = await fresh.server.store.db.selectFrom("device_taps").selectAll().orderBy("tapped_at").execute();
    expect(taps.map((t) => [t.card_uid, t.reason])).toEqual([
      [s1, null],
      [s1, "already_marked"],
      [s2, null],
    ]);
    const records = await fresh.server.store.db.selectFrom("records").selectAll().orderBy("recorded_at").execute();
    expect(records.map((r) => [r.id, r.status, r.recorded_at])).toEqual([
      [taps[0]!.record_id, "present", new Date(unix(minutesAfter(mathStartsAt, 1)) * 1000).toISOString()],
      [taps[2]!.record_id, "late", new Date(unix(minutesAfter(mathStartsAt, 9)) * 1000).toISOString()],
    ]);
    expect(taps[1]!.record_id).toBe(taps[0]!.record_id);
  });
});

// A sync's events go to PostgreSQL as one JSON array parameter (store/taps-store.ts), each
// element handed back as written; on SQLite one insert per event. Text a school may hold:
// quotes, a backslash, a tab, a line separator, accents and an emoji.
describe("an event of a capture whose student's name holds JSON's special characters", () => {
  let own: BadgeHarness;
  beforeAll(async () => {
    own = await startBadgeHarness();
  });
  afterAll(() => own.close());

  it("carries the record exactly as the API shows it", async () => {
    const name = 'Zoë "Z" O\'Brien \\ back\tslash \u2028 😀';
    await own.server.store.db.updateTable("students").set({ name }).where("card_uid", "=", own.cards[0]!).execute();
    const answer = await own.sync(own.devices.r1.token, lines(...status(), tap(1, own.cards[0]!, minutesAfter(own.sessions.mathStartsAt, 1))));
    expect(answer.all("A")).toEqual(["1"]);
    const list = await own.api(`/v1/attendance?session_id=${own.sessions.mathOpen}&external_id=S1&from=2000-01-01&to=2100-01-01`, own.keys.read);
    const record = (await own.api(`/v1/attendance/${list.body.data[0].id}`, own.keys.read)).body;
    expect(record.student.name).toBe(name);
    const events = await own.server.store.db.selectFrom("events").select("payload").where("type", "=", "attendance.recorded").execute();
    expect(events.map((e) => JSON.parse(e.payload).data.object)).toEqual([record]);
  });
});
