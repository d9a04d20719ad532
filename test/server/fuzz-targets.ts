// The fuzz targets: one per parser family of the HTTP interface, built over a running badge
// harness (its keys, device tokens, ids, a published release, a record and a valid cursor),
// so that many generated requests get past authentication and reach the parser under test.
import fc from "fast-check";
import { startBadgeHarness, type BadgeHarness } from "./badge-harness.ts";
import {
  contentType,
  method,
  nastyString,
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

export async function startFuzzFixture(): Promise<FuzzFixture> {
  const h = await startBadgeHarness();
  await h.publish("1.1.0");
  const now = Math.floor(Date.now() / 1000);
  await h.sync(h.devices.r1.token, `v=1\nsv=1.0.0\nbat=3.9\ntap=1|${h.cards[0]}|${now}\ntap=2|${h.cards[1]}|${now}\n`);
  const records = await fetch(`${h.url}/v1/attendance?limit=1`, { headers: { authorization: `Bearer ${h.keys.read}` } }).then((r) => r.json());
  const recordId: string = records.data[0].id;
  const cursor: string = records.next_cursor;
  const ids = {
    record: recordId,
    session: h.sessions.mathOpen,
    scheduledSession: h.sessions.artScheduled,
    device: h.devices.r1.id,
    student: "stu_0000000000000000",
  };

  // ---- /v1 -------------------------------------------------------------------------------
  const apiKey = (usual: string) =>
    fc.oneof(
      { weight: 8, arbitrary: fc.constant<string | null>(`Bearer ${usual}`) },
      {
        weight: 2,
        arbitrary: fc.oneof(
          pick<string | null>(null, `Bearer ${h.keys.read}`, `Bearer ${h.keys.admin}`, `Bearer ${h.devices.r2.token}`, "Bearer", "Basic dXNlcjpwYXNz", `bearer  ${usual}`, `Bearer ${usual}x`, "Bearer sk_test_"),
          nastyString.map((s) => `Bearer ${s.replace(/[^\x21-\x7e]/g, "x")}`),
        ),
      },
    );

  const idempotencyKey = fc.option(
    fc.oneof(
      { weight: 5, arbitrary: fc.uuid() },
      { weight: 2, arbitrary: pick("", " ", "k".repeat(255), "k".repeat(256), "same-key", "same-key", "\t", "é\u00ff") },
      { weight: 1, arbitrary: nastyString.map((s) => s.replace(/[^\t\x20-\x7e\x80-\xff]/g, "?")) },
    ),
    { freq: 6 },
  );

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
  const v1Queries: FuzzTarget = {
    name: "/v1 list query strings and cursors",
    protocol: "v1",
    request: fc.constantFrom(...listRoutes).chain((route) =>
      fuzzRequest({
        method: method("GET"),
        path: queryString(queryPairs(route.names, queryValue)).map((q) => route.path + q),
        headers: { Authorization: apiKey(route.key) },
      }),
    ),
  };

  const idValue = fc.oneof(
    pick(ids.record, ids.session, ids.scheduledSession, ids.device, ids.student, "att_", "ses_", "dev_", "att_nope", ids.record.toUpperCase(), `${ids.record} `),
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
  ];
  const v1PathIds: FuzzTarget = {
    name: "/v1 path ids",
    protocol: "v1",
    request: fc.constantFrom(...idRoutes).chain((route) =>
      fuzzRequest({
        method: method(route.method),
        path: urlComponent(idValue).map((id) => route.template.replace(":id", id)),
        headers: { Authorization: apiKey(route.key), "Content-Type": fc.constant(route.body ? "application/json" : null), "Idempotency-Key": idempotencyKey },
        body: fc.constant(route.body === undefined ? undefined : Buffer.from(route.body)),
      }),
    ),
  };

  /** A JSON value of the kind a field might wrongly get. */
  const oddJson: fc.Arbitrary<string> = fc.oneof(
    nastyString.map((s) => JSON.stringify(s)),
    pick("null", "true", "0", "-0", "1e999", "-1e999", "123456789012345678901234567890", "[]", "{}", '["present"]', '{"__proto__":{"admin":true}}', '"\\u0000"', '"\\ud800"', "[[[[[[[[]]]]]]]]"),
    fc.json({ maxDepth: 2 }),
  );
  const fieldValue = (good: fc.Arbitrary<string>) => fc.oneof({ weight: 3, arbitrary: good.map((s) => JSON.stringify(s)) }, { weight: 1, arbitrary: oddJson });
  const statusValue = pick("present", "late", "absent", "excused");
  const createFields: Record<string, fc.Arbitrary<string>> = {
    session_id: fieldValue(pick(ids.session, ids.scheduledSession, "ses_nope")),
    external_id: fieldValue(pick("S1", "S2", "S3", "S4", "S5", "S6", "S99")),
    student_id: fieldValue(pick(ids.student, "stu_")),
    status: fieldValue(statusValue),
    reason: fieldValue(fc.string({ maxLength: 20 })),
  };
  const correctFields: Record<string, fc.Arbitrary<string>> = {
    status: fieldValue(statusValue),
    reason: fieldValue(pick("fuzz", " ", "", "r".repeat(501))),
  };
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
  const jsonBody = (complete: Record<string, fc.Arbitrary<string>>, fields: Record<string, fc.Arbitrary<string>>): fc.Arbitrary<Buffer | undefined> =>
    fc.oneof(
      { weight: 6, arbitrary: nearlyValidText(complete, fields).map((text) => Buffer.from(text)) },
      { weight: 6, arbitrary: jsonObjectText(fields).map((text) => Buffer.from(text)) },
      { weight: 1, arbitrary: jsonObjectText(fields).map((text) => Buffer.from(`[${text}]`)) },
      { weight: 1, arbitrary: oddJson.map((text) => Buffer.from(text)) },
      { weight: 1, arbitrary: jsonObjectText(fields).chain((text) => fc.nat({ max: text.length }).map((n) => Buffer.from(text.slice(0, n)))) },
      { weight: 1, arbitrary: jsonObjectText(fields).map((text) => Buffer.from(`\ufeff${text}`)) },
      { weight: 1, arbitrary: jsonObjectText(fields).map((text) => Buffer.from(text, "utf16le")) },
      { weight: 1, arbitrary: randomBytes },
      { weight: 1, arbitrary: fc.constant(undefined) },
    );
  const v1Body = (route: { method: string; path: string; complete: Record<string, fc.Arbitrary<string>>; fields: Record<string, fc.Arbitrary<string>> }): fc.Arbitrary<RawRequest> =>
    fuzzRequest({
      method: method(route.method),
      path: fc.constant(route.path),
      headers: { Authorization: apiKey(h.keys.write), "Content-Type": contentType("application/json"), "Idempotency-Key": idempotencyKey },
      body: jsonBody(route.complete, route.fields),
    });
  const v1Bodies: FuzzTarget = {
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
    ),
  };

  // ---- badge endpoints ---------------------------------------------------------------------
  const token = fc.oneof(
    { weight: 8, arbitrary: fc.constant<string | null>(`Bearer ${h.devices.r1.token}`) },
    { weight: 2, arbitrary: pick<string | null>(null, `Bearer ${h.keys.write}`, "Bearer dtk_nope", "Bearer", `Basic ${h.devices.r1.token}`, `Bearer ${h.devices.r1.token} extra`) },
  );
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
    { weight: 1, arbitrary: fc.tuple(randomBytes, fc.nat({ max: 2 })).map(([bytes, at]) => Buffer.concat([Buffer.from(["v=1\n", "v=1\nsv=1.0.0\n", "v=1\nsv=1.0.0\nbat=3.9\n"][at]!), bytes])) },
    { weight: 1, arbitrary: fc.constant(undefined) },
  );
  const badgeBodies: FuzzTarget = {
    name: "badge key=value bodies (check and sync)",
    protocol: "badge",
    request: fuzzRequest({
      method: method("POST"),
      path: pick("/api/badge/ota/check", "/api/badge/sync"),
      headers: { Authorization: token, "Content-Type": contentType("text/plain") },
      body: badgeBody,
    }),
  };
  const badgeDownloads: FuzzTarget = {
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

  return {
    harness: h,
    url: h.url,
    db: h.server.store.db,
    targets: [v1Queries, v1PathIds, v1Bodies, badgeBodies, badgeDownloads],
    close: () => h.close(),
  };
}
