// The fuzz targets: one per parser family of the HTTP interface, built over a running badge
// harness (its keys, device tokens, ids, a published release, a record and a valid cursor),
// so that many generated requests get past authentication and reach the parser under test.
import fc from "fast-check";
import { MAX_REQUEST_BYTES } from "../../firmware/index.ts";
import { MAX_BODY_BYTES } from "../../server/app.ts";
import { createApiKey } from "../../server/services/api-keys.ts";
import { startBadgeHarness, type BadgeHarness } from "./badge-harness.ts";
import {
  contentType,
  method,
  nastyString,
  oversizedJson,
  queryPairs,
  queryString,
  randomBytes,
  fuzzRequest,
  urlComponent,
  type FuzzServer,
  type FuzzTarget,
  type RawRequest,
} from "./fuzz-http.ts";

const pick = <T>(...values: T[]) => fc.constantFrom(...values);

export interface FuzzFixture extends FuzzServer {
  harness: BadgeHarness;
  targets: FuzzTarget[];
  close(): Promise<void>;
}

/** What every target is built over: the harness and the ids, keys and cursor it made. */
interface FuzzContext {
  h: BadgeHarness;
  now: number;
  ids: { record: string; session: string; scheduledSession: string; device: string; student: string };
  cursor: string;
  devicesWriteKey: string;
  otherWrites: string;
}

// A fifth of the fuzz's requests carry a bad credential, all from one address: with the normal
// budget most would get 429 and never reach the 401 path or the parsers behind it (the budget
// itself is tested in auth-failures.test.ts). A second server the fuzz compares with uses it too.
export const FUZZ_AUTH_FAILURES = { failures: Number.MAX_SAFE_INTEGER };

export async function startFuzzFixture(): Promise<FuzzFixture> {
  const h = await startBadgeHarness({ authFailures: FUZZ_AUTH_FAILURES });
  await h.publish("1.1.0");
  const now = Math.floor(Date.now() / 1000);
  await h.sync(h.devices.r1.token, `v=1\nsv=1.0.0\nbat=3.9\ntap=1|${h.cards[0]}|${now}\ntap=2|${h.cards[1]}|${now}\n`);
  const records = await fetch(`${h.url}/v1/attendance?limit=1`, { headers: { authorization: `Bearer ${h.keys.read}` } }).then((r) => r.json());
  const recordId: string = records.data[0].id;
  const cursor: string = records.next_cursor;
  const devicesWriteKey = (await createApiKey(h.server.store.db, { mode: "test", scopes: ["devices:write"] })).secret;
  const otherWrites = (await createApiKey(h.server.store.db, { mode: "test", scopes: ["webhooks:write", "releases:write"] })).secret;
  const ids = {
    record: recordId,
    session: h.sessions.mathOpen,
    scheduledSession: h.sessions.artScheduled,
    device: h.devices.r1.id,
    student: "stu_0000000000000000",
  };

  const ctx: FuzzContext = { h, now, ids, cursor, devicesWriteKey, otherWrites };
  return {
    harness: h,
    url: h.url,
    db: h.server.store.db,
    checksRecorded: () => h.server.checksRecorded(),
    targets: [v1Queries(ctx), v1PathIds(ctx), v1Bodies(ctx), badgeBodies(ctx), badgeDownloads(ctx)],
    close: () => h.close(),
  };
}

// ---- /v1 ---------------------------------------------------------------------------------

/** The Authorization header: usually the route's own key, sometimes another, a device token or noise. */
function apiKey(h: BadgeHarness, usual: string) {
  return fc.oneof(
    { weight: 8, arbitrary: fc.constant<string | null>(`Bearer ${usual}`) },
    {
      weight: 2,
      arbitrary: fc.oneof(
        pick<string | null>(null, `Bearer ${h.keys.read}`, `Bearer ${h.keys.admin}`, `Bearer ${h.devices.r2.token}`, "Bearer", "Basic dXNlcjpwYXNz", `bearer  ${usual}`, `Bearer ${usual}x`, "Bearer sk_test_"),
        nastyString.map((s) => `Bearer ${s.replace(/[^\x21-\x7e]/g, "x")}`),
      ),
    },
  );
}

const idempotencyKey = fc.option(
  fc.oneof(
    { weight: 5, arbitrary: fc.uuid() },
    { weight: 2, arbitrary: pick("", " ", "k".repeat(255), "k".repeat(256), "same-key", "same-key", "\t", "é\u00ff") },
    { weight: 1, arbitrary: nastyString.map((s) => s.replace(/[^\t\x20-\x7e\x80-\xff]/g, "?")) },
  ),
  { freq: 6 },
);

function v1Queries({ h, ids, cursor }: FuzzContext): FuzzTarget {
  /** A cursor: the real one, cut, altered, re-signed with nothing, or noise. */
  const cursorValue = fc.oneof(
    fc.constant(cursor),
    fc.nat({ max: cursor.length }).map((n) => cursor.slice(0, n)),
    fc.tuple(fc.nat({ max: cursor.length - 1 }), fc.string({ minLength: 1, maxLength: 1 })).map(([i, c]) => cursor.slice(0, i) + c + cursor.slice(i + 1)),
    fc.json().map((json) => `${Buffer.from(json).toString("base64url")}.${cursor.split(".")[1]}`),
    fc.json().map((json) => Buffer.from(json).toString("base64url")),
    nastyString,
  );
  const dateValue = fc.oneof(pick("2026-01-01", "2026-02-30", "2026-13-01", "0000-00-00", "9999-12-31", "2026-1-1", "20260101", "2026-01-01T00:00:00Z"), fc.date({ noInvalidDate: true }).map((d) => d.toISOString().slice(0, 10)));
  const limitValue = fc.oneof(fc.integer({ min: -5, max: 500 }).map(String), pick("1e2", "0x10", "01", "200.0", "99999999999999999999", " 5", "5 "));
  const queryValue = fc.oneof(
    cursorValue,
    dateValue,
    limitValue,
    pick("present", "late", "absent", "excused", "open", "scheduled", "accepted", "rejected", "MATH", "R1", "S1", ids.session, ids.device, ids.student, "ses_", "dev_x"),
    nastyString,
  );
  const listRoutes: Array<{ path: string; key: string; names: string[] }> = [
    { path: "/v1/attendance", key: h.keys.read, names: ["from", "to", "course_code", "session_id", "student_id", "external_id", "status", "limit", "cursor"] },
    { path: "/v1/sessions", key: h.keys.read, names: ["date", "course_code", "status", "limit", "cursor"] },
    { path: "/v1/devices", key: h.keys.admin, names: ["room", "limit", "cursor"] },
    { path: "/v1/device_taps", key: h.keys.admin, names: ["result", "device_id", "limit", "cursor"] },
  ];
  return {
    name: "/v1 list query strings and cursors",
    protocol: "v1",
    request: fc.constantFrom(...listRoutes).chain((route) =>
      fuzzRequest({
        method: method("GET"),
        path: queryString(queryPairs(route.names, queryValue)).map((q) => route.path + q),
        headers: { Authorization: apiKey(h, route.key) },
      }),
    ),
  };
}

function v1PathIds({ h, ids, otherWrites }: FuzzContext): FuzzTarget {
  const idValue = fc.oneof(
    pick(ids.record, ids.session, ids.scheduledSession, ids.device, ids.student, "att_", "ses_", "dev_", "rol_", "rol_0000000000000000", "att_nope", ids.record.toUpperCase(), `${ids.record} `),
    fc.string({ maxLength: 20 }).map((s) => `att_${s}`),
    nastyString,
  );
  const idRoutes: Array<{ method: string; template: string; key: string; body?: string }> = [
    { method: "GET", template: "/v1/attendance/:id", key: h.keys.read },
    { method: "PATCH", template: "/v1/attendance/:id", key: h.keys.write, body: '{"status":"late","reason":"fuzz"}' },
    { method: "GET", template: "/v1/sessions/:id", key: h.keys.read },
    { method: "GET", template: "/v1/sessions/:id/roll", key: h.keys.read },
    { method: "POST", template: "/v1/sessions/:id/close", key: h.keys.sessions, body: "{}" },
    { method: "POST", template: "/v1/sessions/:id/cancel", key: h.keys.sessions, body: "{}" },
    { method: "GET", template: "/v1/devices/:id", key: h.keys.admin },
    { method: "GET", template: "/v1/rollouts/:id", key: otherWrites },
    { method: "POST", template: "/v1/rollouts/:id/pause", key: otherWrites, body: "{}" },
  ];
  return {
    name: "/v1 path ids",
    protocol: "v1",
    request: fc.constantFrom(...idRoutes).chain((route) =>
      fuzzRequest({
        method: method(route.method),
        path: urlComponent(idValue).map((id) => route.template.replace(":id", id)),
        headers: { Authorization: apiKey(h, route.key), "Content-Type": fc.constant(route.body ? "application/json" : null), "Idempotency-Key": idempotencyKey },
        body: fc.constant(route.body === undefined ? undefined : Buffer.from(route.body)),
      }),
    ),
  };
}

/** A JSON value of the kind a field might wrongly get. */
const oddJson: fc.Arbitrary<string> = fc.oneof(
  nastyString.map((s) => JSON.stringify(s)),
  pick("null", "true", "0", "-0", "1e999", "-1e999", "123456789012345678901234567890", "[]", "{}", '["present"]', '{"__proto__":{"admin":true}}', '"\\u0000"', '"\\ud800"', "[[[[[[[[]]]]]]]]"),
  fc.json({ maxDepth: 2 }),
);
const fieldValue = (good: fc.Arbitrary<string>) => fc.oneof({ weight: 3, arbitrary: good.map((s) => JSON.stringify(s)) }, { weight: 1, arbitrary: oddJson });
/** A good JSON value of any type, or an odd one. */
const jsonValue = (good: fc.Arbitrary<unknown>) => fc.oneof({ weight: 3, arbitrary: good.map((value) => JSON.stringify(value) ?? "null") }, { weight: 1, arbitrary: oddJson });
const statusValue = pick("present", "late", "absent", "excused");
/** JSON object text with known fields, prototype keys, duplicates (which JSON.stringify cannot write), unknown keys. */
const jsonObjectText = (fields: Record<string, fc.Arbitrary<string>>) =>
  fc
    .array(
      fc.oneof(
        { weight: 6, arbitrary: fc.constantFrom(...Object.keys(fields)).chain((name) => fields[name]!.map((value) => `${JSON.stringify(name)}:${value}`)) },
        { weight: 1, arbitrary: fc.tuple(pick("__proto__", "constructor", "prototype", "", "status ", "STATUS", "session_id\u0000"), oddJson).map(([k, v]) => `${JSON.stringify(k)}:${v}`) },
      ),
      { maxLength: 7 },
    )
    .map((members) => `{${members.join(",")}}`);
/** A complete object (every field once, good values) with one field maybe replaced or added: reaches the business rules. */
const nearlyValidText = (complete: Record<string, fc.Arbitrary<string>>, fields: Record<string, fc.Arbitrary<string>>) =>
  fc
    .tuple(fc.record(complete), fc.option(fc.constantFrom(...Object.keys(fields)).chain((name) => fields[name]!.map((value) => [name, value] as const))))
    .map(([good, odd]) => {
      const members = Object.entries(good).map(([name, value]) => [name, JSON.stringify(value)]);
      if (odd) members.push([odd[0], odd[1]]);
      return `{${members.map(([name, value]) => `${JSON.stringify(name)}:${value}`).join(",")}}`;
    });
// Leaves room for the fields around an oversized value, so that the body stays within the limit.
const oversized = oversizedJson(MAX_BODY_BYTES - 1024);
const jsonBody = (complete: Record<string, fc.Arbitrary<string>>, fields: Record<string, fc.Arbitrary<string>>): fc.Arbitrary<Buffer | undefined> =>
  fc.oneof(
    { weight: 6, arbitrary: nearlyValidText(complete, fields).map((text) => Buffer.from(text)) },
    { weight: 1, arbitrary: oversized.map((text) => Buffer.from(text)) },
    {
      weight: 2,
      arbitrary: fc
        .tuple(nearlyValidText(complete, fields), fc.constantFrom(...Object.keys(fields), "metadata"), oversized)
        .map(([text, name, value]) => Buffer.from(`{${JSON.stringify(name)}:${value}${text.length > 2 ? "," : ""}${text.slice(1)}`)),
    },
    { weight: 6, arbitrary: jsonObjectText(fields).map((text) => Buffer.from(text)) },
    { weight: 1, arbitrary: jsonObjectText(fields).map((text) => Buffer.from(`[${text}]`)) },
    { weight: 1, arbitrary: oddJson.map((text) => Buffer.from(text)) },
    { weight: 1, arbitrary: jsonObjectText(fields).chain((text) => fc.nat({ max: text.length }).map((n) => Buffer.from(text.slice(0, n)))) },
    { weight: 1, arbitrary: jsonObjectText(fields).map((text) => Buffer.from(`\ufeff${text}`)) },
    { weight: 1, arbitrary: jsonObjectText(fields).map((text) => Buffer.from(text, "utf16le")) },
    { weight: 1, arbitrary: randomBytes },
    { weight: 1, arbitrary: fc.constant(undefined) },
  );

function v1Bodies({ h, ids, devicesWriteKey, otherWrites }: FuzzContext): FuzzTarget {
  const createFields: Record<string, fc.Arbitrary<string>> = {
    session_id: fieldValue(pick(ids.session, ids.scheduledSession, "ses_nope")),
    external_id: fieldValue(pick("S1", "S2", "S3", "S4", "S5", "S6", "S99")),
    student_id: fieldValue(pick(ids.student, "stu_")),
    status: fieldValue(statusValue),
    reason: fieldValue(fc.string({ maxLength: 20 })),
  };
  const deviceFields: Record<string, fc.Arbitrary<string>> = {
    room: fieldValue(pick("R1", "R2", "NOPE", "", " ", "r".repeat(41))),
    model: fieldValue(fc.string({ maxLength: 45 })),
    name: fieldValue(fc.oneof(fc.string({ maxLength: 45 }), nastyString)),
  };
  const correctFields: Record<string, fc.Arbitrary<string>> = {
    status: fieldValue(statusValue),
    reason: fieldValue(pick("fuzz", " ", "", "r".repeat(501))),
  };
  const rolloutFields: Record<string, fc.Arbitrary<string>> = {
    version: fieldValue(pick("1.1.0", "9.9.9", "", "1.1", "v".repeat(41))),
    stages: jsonValue(fc.oneof(fc.array(fc.integer({ min: -5, max: 105 }), { maxLength: 12 }), pick([5, 25, 50, 100], [100], [50, 25, 100], [5, 50], []), fc.array(fc.double(), { maxLength: 4 }))),
    min_stage_seconds: jsonValue(fc.oneof(fc.integer({ min: -10, max: 3_000_000 }), fc.double())),
    min_ok_share: jsonValue(fc.oneof(fc.double({ min: -1, max: 2 }), pick(0, 1))),
    halt_failures: jsonValue(fc.oneof(fc.integer({ min: -1, max: 2_000_000 }), fc.double())),
    halt_failure_share: jsonValue(fc.oneof(fc.double({ min: -1, max: 2 }), pick(0, 1))),
    report_timeout_seconds: jsonValue(fc.integer({ min: -1, max: 1_000_000 })),
  };
  const v1Body = (route: { method: string; path: string; key?: string; complete: Record<string, fc.Arbitrary<string>>; fields: Record<string, fc.Arbitrary<string>> }): fc.Arbitrary<RawRequest> =>
    fuzzRequest({
      method: method(route.method),
      path: fc.constant(route.path),
      headers: { Authorization: apiKey(h, route.key ?? h.keys.write), "Content-Type": contentType("application/json"), "Idempotency-Key": idempotencyKey },
      body: jsonBody(route.complete, route.fields),
    });
  return {
    name: "/v1 JSON bodies and Idempotency-Key values",
    protocol: "v1",
    request: fc.oneof(
      v1Body({
        method: "POST",
        path: "/v1/attendance",
        complete: { session_id: pick(ids.session, ids.scheduledSession), external_id: pick("S1", "S3", "S4", "S5", "S6"), status: statusValue },
        fields: createFields,
      }),
      v1Body({ method: "PATCH", path: `/v1/attendance/${ids.record}`, complete: { status: statusValue, reason: pick("fuzz", "late bus") }, fields: correctFields }),
      v1Body({ method: "POST", path: "/v1/devices", key: devicesWriteKey, complete: { room: pick("R1", "R2"), model: pick("esp32-badge") }, fields: deviceFields }),
      // The other writes that take a body, on ids that do not exist: their bodies are read,
      // checked and fingerprinted, and nothing the other targets rely on is closed or promoted.
      v1Body({ method: "POST", path: "/v1/sessions/ses_0000000000000000/close", key: h.keys.sessions, complete: {}, fields: { reason: fieldValue(fc.string()) } }),
      v1Body({ method: "POST", path: "/v1/releases/9.9.9/promote", key: otherWrites, complete: {}, fields: { force: oddJson, reason: fieldValue(fc.string()) } }),
      // Rollouts: of the fleet's release (refused: it has no canary to confirm it) or an unknown
      // one, and the operator's actions on a rollout that does not exist.
      v1Body({ method: "POST", path: "/v1/rollouts", key: otherWrites, complete: { version: pick("1.1.0", "9.9.9") }, fields: rolloutFields }),
      v1Body({ method: "POST", path: "/v1/rollouts/rol_0000000000000000/advance", key: otherWrites, complete: {}, fields: { reason: fieldValue(fc.string()) } }),
      v1Body({ method: "POST", path: "/v1/rollouts/rol_0000000000000000/abort", key: otherWrites, complete: {}, fields: rolloutFields }),
      v1Body({ method: "POST", path: "/v1/webhook_endpoints/whe_0000000000000000/test", key: otherWrites, complete: { type: pick("attendance.recorded") }, fields: { type: fieldValue(pick("attendance.recorded", "x")) } }),
      v1Body({ method: "PATCH", path: "/v1/webhook_endpoints/whe_0000000000000000", key: otherWrites, complete: { description: pick("fuzz") }, fields: { description: fieldValue(fc.string()), url: fieldValue(fc.webUrl()) } }),
    ),
  };
}

// ---- badge endpoints -----------------------------------------------------------------------

/** The Authorization header of a badge: usually its device token, sometimes another credential. */
function deviceToken(h: BadgeHarness) {
  return fc.oneof(
    { weight: 8, arbitrary: fc.constant<string | null>(`Bearer ${h.devices.r1.token}`) },
    { weight: 2, arbitrary: pick<string | null>(null, `Bearer ${h.keys.write}`, "Bearer dtk_nope", "Bearer", `Basic ${h.devices.r1.token}`, `Bearer ${h.devices.r1.token} extra`) },
  );
}

function badgeBodies({ h, now }: FuzzContext): FuzzTarget {
  const token = deviceToken(h);
  const tapValue = fc.oneof(
    fc.tuple(fc.nat({ max: 200 }), fc.constantFrom(...h.cards, "0000000000", "ffffffffffffffffffff"), fc.oneof(fc.constant(now), fc.integer({ min: 0, max: 999_999_999_999 }))).map(([n, card, at]) => `${n}|${card}|${at}`),
    pick("1|04A1B2C3D0|", "||", "1|04A1B2C3D0|1e9", "-1|04A1B2C3D0|1700000000", "1|zz|1700000000", "999999999|04A1B2C3D0|999999999999", "0000000001|04A1B2C3D0|1"),
    nastyString,
  );
  const badgeValues: Record<string, fc.Arbitrary<string>> = {
    v: fc.oneof({ weight: 6, arbitrary: fc.constant("1") }, { weight: 1, arbitrary: pick("2", "01", "1.0", "") }, { weight: 1, arbitrary: nastyString }),
    sv: fc.oneof({ weight: 4, arbitrary: pick("1.0.0", "1.1.0", "2.0.0", "1.0.0-rc1", "1.0.0+build.7") }, { weight: 1, arbitrary: pick("1.0", "99999999999999999999.0.0", "1.0.0.0", "v1.0.0", "01.0.0") }, { weight: 1, arbitrary: nastyString }),
    fw: fc.oneof(fc.string({ maxLength: 70 }), nastyString),
    bat: fc.oneof({ weight: 4, arbitrary: pick("3.9", "4.2", "3.84", "3.85", "0", "6", "6.0001", "999.9999") }, { weight: 1, arbitrary: nastyString }, { weight: 1, arbitrary: fc.double().map(String) }),
    chg: fc.oneof(pick("0", "1", "2", ""), nastyString),
    // a verifying badge's announcement (issue 24); other values are answered as if it were absent
    sig: fc.oneof(pick("ed25519", "ED25519", "ed25519 ", "rsa", ""), nastyString),
    tap: tapValue,
    ota: fc.oneof(pick("ok|1.1.0", "err|1.1.0|flash write failed", "ok|", "err|1.1.0", "ok|1.1.0|x", "err||x", "ok|99999999999999999999.0.0"), nastyString.map((s) => `err|1.1.0|${s}`), nastyString),
    zz_future: nastyString,
  };
  const badgeLine = fc.oneof(
    { weight: 12, arbitrary: fc.constantFrom(...Object.keys(badgeValues)).chain((key) => badgeValues[key]!.map((value) => `${key}=${value}`)) },
    { weight: 1, arbitrary: pick("", "=", "novalue", "=x", "tap=", "ota=", "V=1", "__proto__=1", "constructor=1", "a".repeat(17) + "=1", "v =1", " v=1") },
    { weight: 1, arbitrary: nastyString },
    { weight: 1, arbitrary: nastyString.map((key) => `${key}=1`) },
  );
  /** Bodies from key=value lines (usually the required ones first), any line ending, or raw bytes. */
  const badgeBody: fc.Arbitrary<Buffer | undefined> = fc.oneof(
    {
      weight: 10,
      arbitrary: fc
        .tuple(fc.boolean(), fc.array(badgeLine, { maxLength: 6 }), fc.oneof({ weight: 4, arbitrary: fc.constant("\n") }, { weight: 1, arbitrary: pick("\r\n", "\r", "") }), fc.boolean())
        .map(([withBase, lines, eol, trailing]) => {
          const all = [...(withBase ? ["v=1", "sv=1.0.0", "bat=3.9"] : []), ...lines];
          return Buffer.from(all.join(eol) + (trailing ? eol : ""));
        }),
    },
    { weight: 1, arbitrary: fc.array(tapValue, { minLength: 95, maxLength: 110 }).map((taps) => Buffer.from(`v=1\nsv=1.0.0\nbat=3.9\n${taps.map((t, i) => `tap=${i}|${t.split("|")[1] ?? h.cards[0]}|${now}`).join("\n")}\n`)) },
    { weight: 2, arbitrary: randomBytes },
    // A line of thousands of characters, and thousands of lines, within the request limit.
    {
      weight: 1,
      arbitrary: fc
        .tuple(fc.constantFrom(...Object.keys(badgeValues)), fc.integer({ min: 1000, max: MAX_REQUEST_BYTES - 64 }), pick("x", "é", "|", "9"))
        .map(([key, bytes, unit]) => Buffer.from(`v=1\nsv=1.0.0\nbat=3.9\n${key}=${unit.repeat(Math.floor(bytes / Buffer.byteLength(unit)))}\n`)),
    },
    { weight: 1, arbitrary: fc.tuple(fc.integer({ min: 1000, max: Math.floor((MAX_REQUEST_BYTES - 32) / 4) }), pick("x=1", "=", "v=1")).map(([lines, line]) => Buffer.from(`v=1\nsv=1.0.0\nbat=3.9\n${`${line}\n`.repeat(lines)}`)) },
    { weight: 1, arbitrary: fc.tuple(randomBytes, fc.nat({ max: 2 })).map(([bytes, at]) => Buffer.concat([Buffer.from(["v=1\n", "v=1\nsv=1.0.0\n", "v=1\nsv=1.0.0\nbat=3.9\n"][at]!), bytes])) },
    { weight: 1, arbitrary: fc.constant(undefined) },
  );
  return {
    name: "badge key=value bodies (check and sync)",
    protocol: "badge",
    request: fuzzRequest({
      method: method("POST"),
      path: pick("/api/badge/ota/check", "/api/badge/sync"),
      headers: { Authorization: token, "Content-Type": contentType("text/plain") },
      body: badgeBody,
    }),
  };
}

function badgeDownloads({ h }: FuzzContext): FuzzTarget {
  const token = deviceToken(h);
  return {
    name: "badge download v= and paths",
    protocol: "badge",
    request: fuzzRequest({
      method: method("GET"),
      path: fc.oneof(
        { weight: 4, arbitrary: queryString(queryPairs(["v"], fc.oneof(pick("1.1.0", "1.0.0", "1.1.0 ", "1.1", "../manifest.json", "1.1.0%00", "/etc/passwd"), nastyString))).map((q) => `/api/badge/ota/download${q}`) },
        { weight: 1, arbitrary: urlComponent(fc.string({ maxLength: 12 })).map((segment) => `/api/badge/${segment}`) },
      ),
      headers: { Authorization: token },
    }),
  };
}
