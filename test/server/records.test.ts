import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mark, startHarness, TODAY, type Harness } from "./harness.ts";

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(() => h.close());

describe("creating a record", () => {
  it("answers 201 with the full record and writes an attendance.recorded event in the outbox", async () => {
    const eventsBefore = await h.count("events");
    const res = await h.request("POST", "/v1/attendance", {
      body: { session_id: h.sessions.math1, external_id: "S1", status: "late", reason: "bus was late" },
    });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({
      object: "attendance_record",
      livemode: false,
      status: "late",
      method: "api",
      reason: "bus was late",
      student: { external_id: "S1", name: "Student 1" },
      session: { id: h.sessions.math1, course_code: "MATH", room: "R1" },
      device: null,
      history: [],
    });
    expect(res.body.id).toMatch(/^att_[0-9a-z]{26}$/);
    expect(res.body.student.id).toMatch(/^stu_/);
    const events = await h.server.store.db.selectFrom("events").selectAll().orderBy("id").execute();
    expect(events).toHaveLength(eventsBefore + 1);
    const event = JSON.parse(events.at(-1)!.payload);
    expect(event).toMatchObject({ object: "event", type: "attendance.recorded", livemode: false, data: { object: { id: res.body.id } } });
    expect(event.id).toMatch(/^evt_/);
  });

  it("accepts the service's student id instead of the external id", async () => {
    const roll = await h.request("GET", `/v1/sessions/${h.sessions.art}/roll`, { key: h.keys.read });
    const s6 = roll.body.roll.find((e: { external_id: string }) => e.external_id === "S6");
    const res = await h.request("POST", "/v1/attendance", { body: { session_id: h.sessions.art, student_id: s6.student_id, status: "present" } });
    expect(res.status).toBe(201);
    expect(res.body.student.external_id).toBe("S6");
  });

  it("refuses a second record for the same student and session with 409 naming the existing record", async () => {
    const first = await mark(h, h.sessions.math2, "S2", "absent");
    const before = await h.count("records");
    const res = await h.request("POST", "/v1/attendance", { body: { session_id: h.sessions.math2, external_id: "S2", status: "present" } });
    expect(res.status).toBe(409);
    expect(res.body.error.code).toBe("record_exists");
    expect(res.body.error.message).toContain(first.id);
    expect(await h.count("records")).toBe(before);
  });

  it("refuses a student who is not enrolled in the session's course", async () => {
    const res = await h.request("POST", "/v1/attendance", { body: { session_id: h.sessions.art, external_id: "S1", status: "present" } });
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ code: "student_not_enrolled", param: "external_id" });
  });

  it("refuses unknown sessions and students with 404 naming the parameter", async () => {
    const noSession = await h.request("POST", "/v1/attendance", { body: { session_id: "ses_nope", external_id: "S1", status: "present" } });
    expect(noSession.status).toBe(404);
    expect(noSession.body.error).toMatchObject({ code: "resource_missing", param: "session_id" });
    const noStudent = await h.request("POST", "/v1/attendance", { body: { session_id: h.sessions.math1, external_id: "S99", status: "present" } });
    expect(noStudent.status).toBe(404);
    expect(noStudent.body.error).toMatchObject({ code: "resource_missing", param: "external_id" });
  });
});

describe("correcting a record", () => {
  it("changes the status, appends a history entry and writes an attendance.updated event with the reason", async () => {
    const record = await mark(h, h.sessions.math1, "S3", "absent");
    const first = await h.request("PATCH", `/v1/attendance/${record.id}`, { body: { status: "excused", reason: "doctor's note" } });
    expect(first.status).toBe(200);
    expect(first.body.status).toBe("excused");
    const second = await h.request("PATCH", `/v1/attendance/${record.id}`, { body: { status: "present", reason: "note was for another day" } });
    expect(second.status).toBe(200);

    const read = await h.request("GET", `/v1/attendance/${record.id}`, { key: h.keys.read });
    expect(read.body.status).toBe("present");
    expect(read.body.history).toEqual([
      { at: expect.any(String), from: "absent", to: "excused", reason: "doctor's note", actor: { type: "user", id: expect.stringMatching(/^usr_/), name: "Ms Rivera" } },
      { at: expect.any(String), from: "excused", to: "present", reason: "note was for another day", actor: expect.objectContaining({ type: "user" }) },
    ]);

    const updates = (await h.server.store.db.selectFrom("events").select("payload").where("type", "=", "attendance.updated").execute()).map((e) => JSON.parse(e.payload));
    const mine = updates.filter((e) => e.data.object.id === record.id);
    expect(mine.map((e) => [e.data.previous_attributes.status, e.data.object.status, e.data.reason])).toEqual([
      ["absent", "excused", "doctor's note"],
      ["excused", "present", "note was for another day"],
    ]);
  });

  it("requires a non-empty reason and a changed status, and changes nothing otherwise", async () => {
    const record = await mark(h, h.sessions.math1, "S4", "present");
    const before = { history: await h.count("record_history"), events: await h.count("events") };
    const blank = await h.request("PATCH", `/v1/attendance/${record.id}`, { body: { status: "late", reason: "   " } });
    expect(blank.status).toBe(400);
    expect(blank.body.error).toMatchObject({ param: "reason" });
    const missing = await h.request("PATCH", `/v1/attendance/${record.id}`, { body: { status: "late" } });
    expect(missing.status).toBe(400);
    expect(missing.body.error).toMatchObject({ code: "parameter_missing", param: "reason" });
    const same = await h.request("PATCH", `/v1/attendance/${record.id}`, { body: { status: "present", reason: "no change" } });
    expect(same.status).toBe(400);
    expect(same.body.error.code).toBe("status_unchanged");
    expect({ history: await h.count("record_history"), events: await h.count("events") }).toEqual(before);
    expect((await h.request("GET", `/v1/attendance/${record.id}`, { key: h.keys.read })).body.status).toBe("present");
  });

  it("answers 404 for an unknown record", async () => {
    const res = await h.request("PATCH", "/v1/attendance/att_unknown", { body: { status: "late", reason: "x" } });
    expect(res.status).toBe(404);
    expect(res.body.error.code).toBe("resource_missing");
  });
});

describe("listing records", () => {
  async function listAll(query: string, limit = 2) {
    const items: any[] = [];
    let cursor: string | null = null;
    for (let page = 0; page < 100; page++) {
      const sep = query ? "&" : "";
      const res = await h.request("GET", `/v1/attendance?${query}${sep}limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`, { key: h.keys.read });
      expect(res.status).toBe(200);
      expect(res.body.object).toBe("list");
      items.push(...res.body.data);
      if (!res.body.has_more) {
        expect(res.body.next_cursor).toBeNull();
        return items;
      }
      cursor = res.body.next_cursor;
    }
    throw new Error("pagination did not end");
  }

  it("filters by every parameter and returns list items without the single-read fields", async () => {
    const all = await listAll("");
    expect(all.length).toBeGreaterThanOrEqual(5);
    for (const item of all) {
      expect(Object.keys(item).sort()).toEqual(["id", "livemode", "method", "object", "recorded_at", "session", "status", "student"]);
      expect(Object.keys(item.student).sort()).toEqual(["external_id", "id"]);
      expect(Object.keys(item.session).sort()).toEqual(["course_code", "id"]);
    }
    const expectFilter = async (query: string, predicate: (item: any) => boolean) => {
      const got = await listAll(query);
      const want = all.filter(predicate);
      expect(want.length).toBeGreaterThan(0);
      expect(got.map((i) => i.id)).toEqual(want.map((i) => i.id));
    };
    await expectFilter("course_code=ART", (i) => i.session.course_code === "ART");
    await expectFilter(`session_id=${h.sessions.math2}`, (i) => i.session.id === h.sessions.math2);
    await expectFilter("external_id=S3", (i) => i.student.external_id === "S3");
    const s3 = all.find((i) => i.student.external_id === "S3").student.id;
    await expectFilter(`student_id=${s3}`, (i) => i.student.id === s3);
    await expectFilter("status=absent", (i) => i.status === "absent");
    await expectFilter(`from=${TODAY}&to=${TODAY}`, () => true);
    expect(await listAll("external_id=NOBODY")).toEqual([]);
  });

  it("defaults to the last 7 days and includes both ends of from..to", async () => {
    const old = await mark(h, h.sessions.math2, "S5", "present");
    const eightDaysAgo = new Date(Date.now() - 8 * 86_400_000).toISOString();
    const sixDaysAgo = new Date(Date.now() - 6 * 86_400_000);
    await h.server.store.db.updateTable("records").set({ recorded_at: eightDaysAgo }).where("id", "=", old.id).execute();
    expect((await listAll("")).map((i) => i.id)).not.toContain(old.id);
    const day = eightDaysAgo.slice(0, 10);
    expect((await listAll(`from=${day}&to=${day}`)).map((i) => i.id)).toEqual([old.id]);
    await h.server.store.db.updateTable("records").set({ recorded_at: sixDaysAgo.toISOString() }).where("id", "=", old.id).execute();
    expect((await listAll("")).map((i) => i.id)).toContain(old.id);
  });

  it("orders by recorded_at then id, and a walk with records added meanwhile neither repeats nor skips", async () => {
    const before = await listAll("course_code=MATH");
    const sorted = [...before].sort((a, b) => (a.recorded_at === b.recorded_at ? (a.id < b.id ? -1 : 1) : a.recorded_at < b.recorded_at ? -1 : 1));
    expect(before.map((i) => i.id)).toEqual(sorted.map((i) => i.id));

    const first = await h.request("GET", "/v1/attendance?course_code=MATH&limit=2", { key: h.keys.read });
    const added = await mark(h, h.sessions.math2, "S1", "late");
    const seen = [...first.body.data];
    let cursor = first.body.next_cursor;
    while (cursor) {
      const page = await h.request("GET", `/v1/attendance?course_code=MATH&limit=2&cursor=${encodeURIComponent(cursor)}`, { key: h.keys.read });
      seen.push(...page.body.data);
      cursor = page.body.next_cursor;
    }
    const ids = seen.map((i) => i.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids).toEqual([...before.map((i) => i.id), added.id]);
  });
});

describe("retrieving a record", () => {
  it("answers 404 in the one error shape for an unknown id", async () => {
    const res = await h.request("GET", "/v1/attendance/att_doesnotexist", { key: h.keys.read });
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ error: { type: "invalid_request_error", code: "resource_missing", message: expect.stringContaining("att_doesnotexist"), param: null } });
  });
});
