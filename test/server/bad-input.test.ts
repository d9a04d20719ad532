// Every client mistake gets a 4xx in the one error shape, never a stack trace, and changes nothing.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mark, startHarness, type Harness } from "./harness.ts";

let h: Harness;
let recordId: string;
let validCursor: string;
beforeAll(async () => {
  h = await startHarness();
  recordId = (await mark(h, h.sessions.math1, "S1")).id;
  await mark(h, h.sessions.math1, "S2");
  validCursor = (await h.request("GET", "/v1/attendance?limit=1", { key: h.keys.read })).body.next_cursor;
});
afterAll(() => h.close());

interface Case {
  name: string;
  method: string;
  path: () => string;
  body?: () => unknown;
  headers?: Record<string, string>;
  idempotencyKey?: string | null;
  status: number;
  code: string;
  param?: string | null;
}

const create = (over: Record<string, unknown>) => () => ({ session_id: h.sessions.math2, external_id: "S3", status: "present", ...over });

const cases: Case[] = [
  { name: "malformed JSON", method: "POST", path: () => "/v1/attendance", body: () => '{"session_id": ', status: 400, code: "body_invalid_json" },
  { name: "a JSON array body", method: "POST", path: () => "/v1/attendance", body: () => "[1,2]", status: 400, code: "body_invalid" },
  { name: "no JSON content type", method: "POST", path: () => "/v1/attendance", body: () => "session_id=x", headers: { "content-type": "text/plain" }, status: 400, code: "body_invalid" },
  { name: "a wrong type", method: "POST", path: () => "/v1/attendance", body: create({ status: 1 }), status: 400, code: "parameter_invalid", param: "status" },
  { name: "an unknown status", method: "POST", path: () => "/v1/attendance", body: create({ status: "here" }), status: 400, code: "parameter_invalid", param: "status" },
  { name: "a missing field", method: "POST", path: () => "/v1/attendance", body: () => ({ external_id: "S3", status: "present" }), status: 400, code: "parameter_missing", param: "session_id" },
  { name: "an unknown field", method: "POST", path: () => "/v1/attendance", body: create({ colour: "red" }), status: 400, code: "parameter_unknown", param: "colour" },
  { name: "both student identifiers", method: "POST", path: () => "/v1/attendance", body: create({ student_id: "stu_x" }), status: 400, code: "parameter_invalid", param: "external_id" },
  { name: "an oversized body", method: "POST", path: () => "/v1/attendance", body: create({ reason: "x".repeat(70_000) }), status: 413, code: "body_too_large" },
  { name: "a missing Idempotency-Key", method: "POST", path: () => "/v1/attendance", body: create({}), idempotencyKey: null, status: 400, code: "idempotency_key_missing", param: "Idempotency-Key" },
  { name: "an empty reason", method: "PATCH", path: () => `/v1/attendance/${recordId}`, body: () => ({ status: "late", reason: "" }), status: 400, code: "parameter_invalid", param: "reason" },
  { name: "an unknown record id", method: "PATCH", path: () => "/v1/attendance/att_nope", body: () => ({ status: "late", reason: "r" }), status: 404, code: "resource_missing" },
  { name: "an impossible date", method: "GET", path: () => "/v1/attendance?from=2026-02-30", status: 400, code: "parameter_invalid", param: "from" },
  { name: "a date in another format", method: "GET", path: () => "/v1/attendance?to=30/01/2026", status: 400, code: "parameter_invalid", param: "to" },
  { name: "from after to", method: "GET", path: () => "/v1/attendance?from=2026-03-02&to=2026-03-01", status: 400, code: "parameter_invalid", param: "from" },
  { name: "limit 0", method: "GET", path: () => "/v1/attendance?limit=0", status: 400, code: "parameter_invalid", param: "limit" },
  { name: "limit 201", method: "GET", path: () => "/v1/attendance?limit=201", status: 400, code: "parameter_invalid", param: "limit" },
  { name: "limit abc", method: "GET", path: () => "/v1/attendance?limit=abc", status: 400, code: "parameter_invalid", param: "limit" },
  { name: "a repeated parameter", method: "GET", path: () => "/v1/attendance?status=late&status=absent", status: 400, code: "parameter_invalid", param: "status" },
  { name: "an unknown query parameter", method: "GET", path: () => "/v1/attendance?course=MATH", status: 400, code: "parameter_unknown", param: "course" },
  { name: "an unknown status filter", method: "GET", path: () => "/v1/attendance?status=here", status: 400, code: "parameter_invalid", param: "status" },
  { name: "a forged cursor", method: "GET", path: () => `/v1/attendance?cursor=${Buffer.from('{"after":["2000","att_0"],"filters":"x"}').toString("base64url")}.AAAAAAAAAAAAAAAAAAAAAA`, status: 400, code: "cursor_invalid", param: "cursor" },
  { name: "a truncated cursor", method: "GET", path: () => `/v1/attendance?cursor=${encodeURIComponent(validCursor.slice(0, -5))}`, status: 400, code: "cursor_invalid", param: "cursor" },
  { name: "a cursor without its signature", method: "GET", path: () => `/v1/attendance?cursor=${encodeURIComponent(validCursor.split(".")[0]!)}`, status: 400, code: "cursor_invalid", param: "cursor" },
  { name: "a cursor used with other filters", method: "GET", path: () => `/v1/attendance?status=late&cursor=${encodeURIComponent(validCursor)}`, status: 400, code: "cursor_invalid", param: "cursor" },
  { name: "a records cursor on sessions", method: "GET", path: () => `/v1/sessions?cursor=${encodeURIComponent(validCursor)}`, status: 400, code: "cursor_invalid", param: "cursor" },
  { name: "an unknown session", method: "GET", path: () => "/v1/sessions/ses_nope", status: 404, code: "resource_missing" },
  { name: "an unknown session's roll", method: "GET", path: () => "/v1/sessions/ses_nope/roll", status: 404, code: "resource_missing" },
  { name: "a session date that does not exist", method: "GET", path: () => "/v1/sessions?date=2026-13-01", status: 400, code: "parameter_invalid", param: "date" },
  { name: "an unknown session status", method: "GET", path: () => "/v1/sessions?status=paused", status: 400, code: "parameter_invalid", param: "status" },
  { name: "an unknown route", method: "GET", path: () => "/v1/attendances", status: 404, code: "route_unknown" },
];

describe("bad input", () => {
  it.each(cases)("$name gets $status $code and changes nothing", async (c) => {
    const before = { records: await h.count("records"), events: await h.count("events"), history: await h.count("record_history"), keys: await h.count("idempotency_keys") };
    const body = c.body?.();
    const res = await fetch(`${h.url}${c.path()}`, {
      method: c.method,
      headers: {
        authorization: `Bearer ${h.keys.write}`,
        "content-type": "application/json",
        ...(c.method !== "GET" && c.idempotencyKey !== null ? { "idempotency-key": `bad-${c.name}` } : {}),
        ...c.headers,
      },
      body: body === undefined || typeof body === "string" ? body : JSON.stringify(body),
    });
    const text = await res.text();
    expect(res.status).toBe(c.status);
    expect(res.headers.get("content-type")).toMatch(/^application\/json/);
    const answer = JSON.parse(text);
    expect(Object.keys(answer)).toEqual(["error"]);
    expect(Object.keys(answer.error).sort()).toEqual(["code", "message", "param", "type"]);
    expect(answer.error.code).toBe(c.code);
    if (c.param !== undefined) expect(answer.error.param).toBe(c.param);
    expect(answer.error.message.length).toBeGreaterThan(10);
    expect(text).not.toMatch(/at .*\.ts:\d+|node_modules|Error:/);
    const after = { records: await h.count("records"), events: await h.count("events"), history: await h.count("record_history"), keys: await h.count("idempotency_keys") };
    // A 404 for an unknown record ran the write, so its key is kept for replay; nothing else is.
    expect({ ...after, keys: c.status === 404 && c.method !== "GET" ? after.keys - 1 : after.keys }).toEqual(before);
  });
});
