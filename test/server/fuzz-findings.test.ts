// The inputs the HTTP fuzz (fuzz-http.test.ts) found getting a 500, each pinned with the answer
// it gets now, whatever seed the fuzz runs with. Causes: Express's router and body parser mark
// a path that does not percent-decode and a body that does not inflate with status 400 but no
// `type`, which the error middleware did not recognise; and error messages quoted the client's
// text with JSON.stringify, which leaves DEL and the C1 controls raw, so the badge answer
// carrying them could not be written.
import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseResponse } from "../../firmware/index.ts";
import { startBadgeHarness, type BadgeHarness } from "./badge-harness.ts";
import { sendRaw, tableChecksums, type RawRequest } from "./fuzz-http.ts";

let h: BadgeHarness;
beforeAll(async () => {
  h = await startBadgeHarness();
  await h.publish("1.1.0");
});
afterAll(() => h.close());

async function send(request: RawRequest) {
  const before = await tableChecksums(h.server.store.db);
  const answer = await sendRaw(h.url, request);
  expect(await tableChecksums(h.server.store.db)).toEqual(before);
  return { status: answer.status, text: answer.body.toString("utf8") };
}

const v1 = (method: string, path: string, headers: Array<[string, string]>, body?: Buffer): RawRequest => ({
  method,
  path,
  headers: [["Authorization", `Bearer ${h.keys.write}`], ["Idempotency-Key", `finding-${Math.random()}`], ...headers],
  body,
});
const badge = (method: string, path: string, headers: Array<[string, string]>, body?: Buffer): RawRequest => ({
  method,
  path,
  headers: [["Authorization", `Bearer ${h.devices.r1.token}`], ...headers],
  body,
});

describe("/v1 inputs the fuzz found", () => {
  it.each([
    ["PATCH", "/v1/attendance/%"],
    ["PATCH", "/v1/attendance/%E0%A4%A"],
    ["GET", "/v1/sessions/%ff/roll"],
  ])("a path id that does not percent-decode (%s %s) is 400 path_invalid", async (method, path) => {
    const headers: Array<[string, string]> = [["Content-Type", "application/json"]];
    const request = v1(method, path, headers, method === "PATCH" ? Buffer.from('{"status":"late","reason":"fuzz"}') : undefined);
    if (method === "GET") request.headers[0] = ["Authorization", `Bearer ${h.keys.read}`];
    const { status, text } = await send(request);
    expect(status).toBe(400);
    expect(JSON.parse(text)).toEqual({ error: { type: "invalid_request_error", code: "path_invalid", message: "The request path is not valid percent-encoded UTF-8.", param: null } });
  });

  it.each(["gzip", "deflate", "br"])("a body that does not match Content-Encoding: %s is 400 body_encoding_invalid", async (encoding) => {
    const { status, text } = await send(v1("POST", "/v1/attendance", [["Content-Type", "application/json"], ["Content-Encoding", encoding]], Buffer.from("{}")));
    expect(status).toBe(400);
    expect(JSON.parse(text).error).toMatchObject({ type: "invalid_request_error", code: "body_encoding_invalid" });
  });

  // The idempotency fingerprint walked the body recursively and overflowed the stack; a session
  // action's body is fingerprinted whatever it holds. Plain and gzip bodies take different parsers.
  it.each([
    ["arrays 30,000 deep", "[".repeat(30_000) + "]".repeat(30_000), false],
    ["objects 5,000 deep in a field", `{"reason":${'{"a":'.repeat(5000)}1${"}".repeat(5000)}}`, false],
    ["arrays 30,000 deep, gzip", "[".repeat(30_000) + "]".repeat(30_000), true],
  ])("a write whose body is nested %s is 400 body_too_deep", async (_, json, gzip) => {
    const headers: Array<[string, string]> = [["Content-Type", "application/json"], ...(gzip ? [["Content-Encoding", "gzip"] as [string, string]] : [])];
    const request = v1("POST", `/v1/sessions/${h.sessions.mathOpen}/close`, headers, gzip ? gzipSync(json) : Buffer.from(json));
    request.headers[0] = ["Authorization", `Bearer ${h.keys.sessions}`];
    const { status, text } = await send(request);
    expect(status).toBe(400);
    expect(JSON.parse(text).error).toEqual({
      type: "invalid_request_error",
      code: "body_too_deep",
      message: "The request body is nested more than 32 levels deep; no field takes more than a few.",
      param: null,
    });
  });

  it("a body that is gzip as it says is still read", async () => {
    const body = gzipSync(JSON.stringify({ session_id: h.sessions.mathOpen, external_id: "S3", status: "present" }));
    const answer = await sendRaw(h.url, v1("POST", "/v1/attendance", [["Content-Type", "application/json"], ["Content-Encoding", "gzip"]], body));
    expect(answer.status).toBe(201);
    expect(JSON.parse(answer.body.toString()).status).toBe("present");
  });
});

describe("badge inputs the fuzz found", () => {
  it.each(["deflate", "br", "gzip"])("a check body that does not match Content-Encoding: %s answers X body_encoding_invalid", async (encoding) => {
    const { status, text } = await send(badge("POST", "/api/badge/ota/check", [["Content-Encoding", encoding]], Buffer.from("v=1\nsv=1.0.0\nbat=3.9\n")));
    expect(status).toBe(400);
    const parsed = parseResponse(text);
    expect(parsed.ok && parsed.lines.find((l) => l.letter === "X")?.value).toMatch(/^body_encoding_invalid /);
  });

  it("a key holding DEL gets malformed_request with the character escaped", async () => {
    const { status, text } = await send(badge("POST", "/api/badge/ota/check", [], Buffer.from("\u007fa=1")));
    expect(status).toBe(400);
    expect(text).toBe(`V1\nS 86400\nX malformed_request line 1 has key "\\u007fa"; a key is a lowercase letter then up to 15 of a-z, 0-9 and _\n.\n`);
  });

  it("a download of a version holding a C1 control gets release_unknown with the character escaped", async () => {
    const { status, text } = await send(badge("GET", "/api/badge/ota/download?v=%C2%9Ba", []));
    expect(status).toBe(404);
    expect(text).toBe('V1\nS 86400\nX release_unknown no published release "\\u009ba"\n.\n');
  });
});
