import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mark, startHarness, TODAY, type Harness } from "./harness.ts";

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(() => h.close());

describe("sessions", () => {
  it("lists by start time with date and course filters and cursors", async () => {
    const all = await h.request("GET", "/v1/sessions", { key: h.keys.read });
    expect(all.status).toBe(200);
    expect(all.body).toMatchObject({ object: "list", has_more: false, next_cursor: null });
    expect(all.body.data.map((s: { id: string }) => s.id)).toEqual([h.sessions.math1, h.sessions.math2, h.sessions.art]);
    expect(all.body.data[0]).toEqual({
      id: h.sessions.math1,
      object: "session",
      livemode: false,
      course_code: "MATH",
      room: "R1",
      date: TODAY,
      starts_at: `${TODAY}T08:00:00.000Z`,
      ends_at: `${TODAY}T09:00:00.000Z`,
      status: "scheduled",
    });
    const math = await h.request("GET", "/v1/sessions?course_code=MATH", { key: h.keys.read });
    expect(math.body.data.map((s: { id: string }) => s.id)).toEqual([h.sessions.math1, h.sessions.math2]);
    const otherDay = await h.request("GET", "/v1/sessions?date=2001-01-01", { key: h.keys.read });
    expect(otherDay.body.data).toEqual([]);
    const today = await h.request("GET", `/v1/sessions?date=${TODAY}&limit=2`, { key: h.keys.read });
    expect(today.body.has_more).toBe(true);
    const next = await h.request("GET", `/v1/sessions?date=${TODAY}&limit=2&cursor=${encodeURIComponent(today.body.next_cursor)}`, { key: h.keys.read });
    expect(next.body.data.map((s: { id: string }) => s.id)).toEqual([h.sessions.art]);
    expect(next.body.has_more).toBe(false);
  });

  it("retrieves one session", async () => {
    const res = await h.request("GET", `/v1/sessions/${h.sessions.art}`, { key: h.keys.read });
    expect(res.body).toMatchObject({ id: h.sessions.art, course_code: "ART", status: "scheduled" });
  });

  it("rolls every enrolled student, with null status and record_id for those nobody marked", async () => {
    const record = await mark(h, h.sessions.math2, "S2", "late");
    const res = await h.request("GET", `/v1/sessions/${h.sessions.math2}/roll`, { key: h.keys.read });
    expect(res.status).toBe(200);
    expect(res.body.session).toMatchObject({ id: h.sessions.math2, course_code: "MATH", status: "scheduled" });
    expect(res.body.roll.map((e: any) => [e.external_id, e.status, e.record_id])).toEqual([
      ["S1", null, null],
      ["S2", "late", record.id],
      ["S3", null, null],
      ["S4", null, null],
      ["S5", null, null],
    ]);
  });
});

describe("session lifecycle", () => {
  const move = (id: string, action: string) => h.request("POST", `/v1/sessions/${id}/${action}`, { key: h.keys.sessions });

  it("moves scheduled -> open -> closed", async () => {
    expect((await move(h.sessions.math1, "open")).body.status).toBe("open");
    expect((await h.request("GET", `/v1/sessions/${h.sessions.math1}`, { key: h.keys.read })).body.status).toBe("open");
    expect((await move(h.sessions.math1, "close")).body.status).toBe("closed");
  });

  it("refuses illegal moves with 409 naming both states, and leaves the session as it was", async () => {
    for (const [action, to] of [["open", "open"], ["cancel", "cancelled"], ["close", "closed"]] as const) {
      const res = await move(h.sessions.math1, action);
      expect(res.status).toBe(409);
      expect(res.body.error.code).toBe("session_transition_invalid");
      expect(res.body.error.message).toContain(`closed -> ${to}`);
    }
    const scheduledClose = await move(h.sessions.art, "close");
    expect(scheduledClose.status).toBe(409);
    expect(scheduledClose.body.error.message).toContain("scheduled -> closed");
    expect((await h.request("GET", `/v1/sessions/${h.sessions.math1}`, { key: h.keys.read })).body.status).toBe("closed");
  });

  it("cancels a scheduled session, which then takes no API writes", async () => {
    expect((await move(h.sessions.art, "cancel")).body.status).toBe("cancelled");
    expect((await move(h.sessions.art, "open")).status).toBe(409);
    const res = await h.request("POST", "/v1/attendance", { body: { session_id: h.sessions.art, external_id: "S5", status: "present" } });
    expect(res.status).toBe(409);
    expect(res.body.error.code).toBe("session_cancelled");
  });

  it("replays a transition retried with the same Idempotency-Key instead of refusing it", async () => {
    const first = await h.request("POST", `/v1/sessions/${h.sessions.math2}/open`, { key: h.keys.sessions, idempotencyKey: "open-math2" });
    const retry = await h.request("POST", `/v1/sessions/${h.sessions.math2}/open`, { key: h.keys.sessions, idempotencyKey: "open-math2" });
    expect(first.status).toBe(200);
    expect(retry.status).toBe(200);
    expect(retry.body).toEqual(first.body);
  });
});
