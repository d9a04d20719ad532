// The HTTP interface fuzzed from outside: fast-check builds whole requests (method, raw path,
// query, headers, body bytes) the way a careless or hostile client might, sends them over a
// real socket to a real server, and checks what every answer must satisfy whatever was sent:
// never a 5xx, the endpoint's own answer format (the /v1 error shape, the badge's `V1` ... `.`
// text), and a refused request changes no row. Used by test/server/fuzz-http.test.ts (fixed
// seed, few runs, in `npm test`) and test/server/fuzz-http-run.ts (as many runs as asked).
//
// Each endpoint family is a FuzzTarget: a request arbitrary and the protocol its answers speak.
// A new parser (the JSON-RPC endpoint /api/mcp) is a new target plus, if it answers in a format
// of its own, a case in `checkFormat`.
import { createHash } from "node:crypto";
import http from "node:http";
import { gzipSync } from "node:zlib";
import fc from "fast-check";
import { sql, type Kysely } from "kysely";
import { parseResponse } from "../../firmware/index.ts";
import type { Database } from "../../server/store/schema.ts";

export interface RawRequest {
  method: string;
  /** sent as is: percent-encoding, malformed or not, reaches the server untouched */
  path: string;
  headers: Array<[string, string]>;
  body: Buffer | undefined;
}

export interface RawAnswer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

export type Protocol = "v1" | "badge";

export interface FuzzTarget {
  name: string;
  protocol: Protocol;
  request: fc.Arbitrary<RawRequest>;
}

export interface FuzzServer {
  url: string;
  db: Kysely<Database>;
  /** resolves once the checks answered so far are recorded: a check's record commits after its answer */
  checksRecorded(): Promise<void>;
}

/** One request over its own connection, nothing normalised (unlike fetch, which re-encodes the URL and forbids some methods and headers). */
export function sendRaw(baseUrl: string, request: RawRequest): Promise<RawAnswer> {
  const { hostname, port } = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    // Given as a raw array, headers go out exactly as listed (duplicates too), with no Host added.
    const headers = ["Host", `${hostname}:${port}`, ...request.headers.flat()];
    if (request.body !== undefined && !request.headers.some(([name]) => name.toLowerCase() === "content-length")) {
      headers.push("Content-Length", String(request.body.length));
    }
    const req = http.request({ host: hostname, port, method: request.method, path: request.path, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(request.body);
  });
}

// The webhook delivery worker marks each event `dispatched_at` once it has fanned it out, in the
// background, whenever it gets to it: an earlier accepted request's event may be marked while a
// later refused request runs. That column is the worker's bookkeeping, not the request's write.
const BACKGROUND_COLUMNS: Record<string, string[]> = { events: ["dispatched_at"] };

/** Every table's row count and a hash of its rows, to tell whether a request changed anything. */
export async function tableChecksums(db: Kysely<Database>): Promise<Record<string, string>> {
  const tables = await sql<{ name: string }>`select name from sqlite_master where type = 'table' and name not like 'sqlite_%' order by name`.execute(db);
  const sums: Record<string, string> = {};
  for (const { name } of tables.rows) {
    const rows = await sql<Record<string, unknown>>`select * from ${sql.table(name)} order by rowid`.execute(db);
    const skipped = BACKGROUND_COLUMNS[name] ?? [];
    const compared = rows.rows.map((row) => Object.fromEntries(Object.entries(row).filter(([column]) => !skipped.includes(column))));
    sums[name] = `${rows.rows.length}:${createHash("sha256").update(JSON.stringify(compared)).digest("hex").slice(0, 16)}`;
  }
  return sums;
}

/** A download records its end after the last byte went out: wait for that, so the next request's "before" is still. */
async function downloadRecorded(db: Kysely<Database>): Promise<void> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const sending = await db.selectFrom("ota_fetches").select("id").where("outcome", "=", "sending").executeTakeFirst();
    if (!sending) return;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  throw new Error("a download's end was never recorded");
}

/** JSON.stringify that also escapes DEL and the C1 controls, so a report shows every byte. */
const shown = (text: string) => JSON.stringify(text).replace(/\p{Cc}/gu, (c) => `\\u${c.codePointAt(0)!.toString(16).padStart(4, "0")}`);

export function describeRequest(request: RawRequest): string {
  const body = request.body === undefined ? "(no body)" : shown(request.body.toString("latin1").slice(0, 300));
  return `${request.method} ${request.path}\n${request.headers.map(([n, v]) => `  ${n}: ${shown(v)}`).join("\n")}\n  body ${body}`;
}

class PropertyViolation extends Error {
  override name = "PropertyViolation";
}

function fail(what: string, request: RawRequest, answer: RawAnswer): never {
  throw new PropertyViolation(`${what}\nrequest: ${describeRequest(request)}\nanswer: ${answer.status} ${shown(answer.body.toString("utf8").slice(0, 300))}`);
}

const STACK_TRACE = /at .*\.[cm]?[jt]s:\d+|node_modules|\bError:/;

/** The answer is in the endpoint's own format. */
function checkFormat(protocol: Protocol, request: RawRequest, answer: RawAnswer): void {
  const text = answer.body.toString("utf8");
  if (STACK_TRACE.test(text)) fail("the answer shows internals", request, answer);
  if (request.method === "HEAD") return;
  const type = answer.headers["content-type"] ?? "";
  if (protocol === "v1") {
    // Successes are the routes' business (Express answers OPTIONS itself with the allowed methods).
    if (answer.status < 400) return;
    if (!type.startsWith("application/json")) fail(`a /v1 error with Content-Type '${type}'`, request, answer);
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      fail("a /v1 error that is not JSON", request, answer);
    }
    const error = (parsed as { error?: Record<string, unknown> }).error;
    const shapeOk =
      Object.keys(parsed as object).join() === "error" &&
      error !== undefined &&
      Object.keys(error).sort().join() === "code,message,param,type" &&
      typeof error.type === "string" &&
      typeof error.code === "string" &&
      typeof error.message === "string" &&
      (error.param === null || typeof error.param === "string");
    if (!shapeOk) fail("a /v1 error not in the one error shape", request, answer);
    return;
  }
  if (answer.status === 200 && type === "application/octet-stream") {
    if (Number(answer.headers["content-length"]) !== answer.body.length) fail("an image answer shorter than its Content-Length", request, answer);
    return;
  }
  if (!type.startsWith("text/plain")) fail(`a badge answer with Content-Type '${type}'`, request, answer);
  const parsed = parseResponse(text);
  if (!parsed.ok || parsed.version !== 1) fail(`a badge answer the badge cannot read (${parsed.ok ? `V${parsed.version}` : parsed.message})`, request, answer);
}

/**
 * The properties every answer must hold. A refused request (4xx) changes no row; the one
 * exception is a /v1 write whose refusal is stored under its Idempotency-Key for replay
 * (business failures are, SPEC), which the same request sent again must then replay.
 */
export async function checkAnswer(server: FuzzServer, target: FuzzTarget, request: RawRequest): Promise<RawAnswer> {
  const before = await tableChecksums(server.db);
  const answer = await sendRaw(server.url, request);
  if (answer.status >= 500) fail(`a ${answer.status} answer`, request, answer);
  checkFormat(target.protocol, request, answer);
  if (answer.headers["content-type"] === "application/octet-stream") await downloadRecorded(server.db);
  await server.checksRecorded();
  if (answer.status < 400) return answer;
  const after = await tableChecksums(server.db);
  const changed = Object.keys(after).filter((table) => after[table] !== before[table]);
  if (changed.length === 0) return answer;
  if (target.protocol === "v1" && changed.join() === "idempotency_keys") {
    const replay = await sendRaw(server.url, request);
    const replayed = replay.headers["idempotent-replayed"] === "true" && replay.status === answer.status && replay.body.equals(answer.body);
    if (replayed) return answer;
  }
  fail(`a refused request changed rows in ${changed.join(", ")}`, request, answer);
}

/** Runs the target's property; `observe` sees every answer (the script tallies them). */
export async function fuzzTarget(server: FuzzServer, target: FuzzTarget, parameters: fc.Parameters<[RawRequest]>, observe?: (answer: RawAnswer) => void): Promise<void> {
  await fc.assert(
    fc.asyncProperty(target.request, async (request) => {
      const answer = await checkAnswer(server, target, request);
      observe?.(answer);
    }),
    parameters,
  );
}

// ---------------------------------------------------------------------------------------
// Building blocks for requests

const pick = <T>(...values: T[]) => fc.constantFrom(...values);

/** Strings a parser is likely to get wrong: edge numbers, unicode, NUL, surrogates, injections. */
export const nastyString: fc.Arbitrary<string> = fc.oneof(
  pick("", " ", "0", "-1", "1.5", "1e309", "-0", "NaN", "Infinity", "9007199254740993", "99999999999999999999999", "0x10", "1_000"),
  pick("null", "true", "[]", "{}", "__proto__", "constructor", "toString", "hasOwnProperty", "\u0000", "a\u0000b", "\u007f", "\u0085", "a\u009bb", "\ud800", "\udfff\ud800"),
  pick("é", "日本語", "🙂", "\u202e", "\ufeff", "ß".repeat(300), "x".repeat(5000), "' OR 1=1 --", "%", "%ff", "%00", "../..", "\r\n", "\t"),
  // control characters (C0, DEL, C1) among ordinary ones: a badge line may hold none of them
  fc.string({ unit: fc.oneof(pick("\u0000", "\u0009", "\u001b", "\u007f", "\u0085", "\u009b"), pick("a", "1", ".", "|", "=", " ")), minLength: 1, maxLength: 8 }),
  fc.string({ unit: "grapheme", maxLength: 30 }),
  fc.string({ unit: "binary", maxLength: 30 }),
  fc.string({ maxLength: 30 }),
);

const utf8Percent = (text: string) => encodeURIComponent(text.replace(/[\ud800-\udfff]/g, "\ufffd"));

/** A path or query component: percent-encoded text, or raw percent sequences that do not decode. */
export const urlComponent = (meaningful: fc.Arbitrary<string>): fc.Arbitrary<string> =>
  fc.oneof(
    { weight: 4, arbitrary: meaningful.map(utf8Percent) },
    { weight: 2, arbitrary: nastyString.map(utf8Percent) },
    { weight: 1, arbitrary: pick("%", "%f", "%ff", "%E0%A4%A", "%C0%80", "%ED%A0%80", "%00", "%2F", "%25", "..", "%2e%2e", "a%20b", "+", "%F4%90%80%80") },
    { weight: 1, arbitrary: fc.uint8Array({ maxLength: 12 }).map((bytes) => [...bytes].map((b) => `%${b.toString(16).padStart(2, "0")}`).join("")) },
  );

export const queryString = (pairs: fc.Arbitrary<Array<[string, string]>>): fc.Arbitrary<string> =>
  fc.tuple(pairs, fc.boolean()).map(([list, withMark]) => (list.length === 0 ? (withMark ? "?" : "") : `?${list.map(([k, v]) => (v === "" && k.endsWith("=") ? k : `${k}=${v}`)).join("&")}`));

/** Query pairs: known parameter names (often repeated), prototype names, brackets, noise; values from `value`. */
export const queryPairs = (names: string[], value: fc.Arbitrary<string>) =>
  fc.array(
    fc.tuple(
      fc.oneof({ weight: 5, arbitrary: fc.constantFrom(...names) }, { weight: 1, arbitrary: pick("__proto__", "constructor", "limit[a]", "status[]", "a.b", "", "%ff") }, { weight: 1, arbitrary: urlComponent(fc.string({ maxLength: 8 })) }),
      urlComponent(value),
    ),
    { maxLength: 5 },
  );

/** The method a route takes most of the time, otherwise any method Node's HTTP parser accepts. */
export const method = (usual: string) => fc.oneof({ weight: 6, arbitrary: fc.constant(usual) }, { weight: 1, arbitrary: pick("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "PROPFIND", "LOCK", "PURGE") });

/** A valid header value (Node refuses to send CR, LF and most control characters). */
const headerValue: fc.Arbitrary<string> = fc.oneof(
  nastyString.map((s) => s.replace(/[^\t\x20-\x7e\x80-\xff]/g, "?")),
  fc.string({ maxLength: 40 }),
);

export const contentType = (usual: string) =>
  fc.option(
    fc.oneof(
      { weight: 5, arbitrary: fc.constant(usual) },
      {
        weight: 3,
        arbitrary: pick(
          "application/json; charset=utf-8",
          "application/json; charset=utf-16",
          "application/json; charset=latin1",
          "application/json; charset=koi8-r",
          "application/json; charset=bogus",
          "application/json;;",
          "application/merge-patch+json",
          "text/plain",
          "text/plain; charset=utf-16le",
          "text/plain; charset=ISO-8859-1",
          "text/plain; charset=unknown-8bit",
          "application/x-www-form-urlencoded",
          "multipart/form-data; boundary=x",
          "application/octet-stream",
          "*/*",
          "",
          "garbage",
        ),
      },
      { weight: 1, arbitrary: headerValue },
    ),
    { freq: 8 },
  );

/** Content-Encoding and the body bytes that go with it: a real gzip of the body, or a header that lies. */
export function encodedBody(body: fc.Arbitrary<Buffer | undefined>): fc.Arbitrary<{ encoding: string | null; body: Buffer | undefined }> {
  return fc.tuple(body, fc.oneof({ weight: 8, arbitrary: fc.constant(null) }, { weight: 2, arbitrary: pick("identity", "gzip", "deflate", "br", "x-gzip", "gzip, deflate", "compress", "bogus") }), fc.boolean()).map(([bytes, encoding, honest]) => {
    if (encoding === "gzip" && honest && bytes !== undefined) return { encoding, body: gzipSync(bytes) };
    return { encoding, body: bytes };
  });
}

/**
 * JSON text of shapes no client sends but anyone may, within `maxBytes` (the endpoint's body
 * limit, so that it is read and not refused as too large): arrays and objects nested thousands of
 * levels deep, arrays of tens of thousands of items, strings of tens of thousands of characters.
 */
export function oversizedJson(maxBytes: number): fc.Arbitrary<string> {
  const nested = (open: string, inner: string, close: string) =>
    fc.integer({ min: 1000, max: Math.floor((maxBytes - inner.length) / (open.length + close.length)) }).map((depth) => open.repeat(depth) + inner + close.repeat(depth));
  return fc.oneof(
    nested("[", "", "]"),
    nested('{"a":', "1", "}"),
    nested('[{"a":', "null", "}]"),
    fc.integer({ min: 1000, max: Math.floor(maxBytes / 2) - 1 }).map((items) => `[${new Array(items).fill("0").join(",")}]`),
    fc.tuple(fc.integer({ min: 1000, max: maxBytes - 2 }), pick("x", "é", "\\u0000", "🙂")).map(([bytes, unit]) => `"${unit.repeat(Math.floor(bytes / Buffer.byteLength(unit)))}"`),
  );
}

export const randomBytes = fc.uint8Array({ maxLength: 200 }).map((bytes) => Buffer.from(bytes));

/** Extra headers a client might add: duplicates of meaningful ones included. */
export const extraHeaders = fc.array(
  fc.tuple(pick("X-Forwarded-For", "Accept", "Accept-Encoding", "Range", "Transfer-Encoding-Ext", "Expect-Ext", "Cookie", "Content-Language", "If-None-Match", "X-Test"), headerValue),
  { maxLength: 3 },
);

/**
 * A whole request: the named headers (null leaves one out), a Content-Encoding that may lie
 * about the body (`encodedBody`), and extra headers.
 */
export function fuzzRequest(parts: {
  method: fc.Arbitrary<string>;
  path: fc.Arbitrary<string>;
  headers: Record<string, fc.Arbitrary<string | null>>;
  body?: fc.Arbitrary<Buffer | undefined>;
}): fc.Arbitrary<RawRequest> {
  return fc
    .record({ method: parts.method, path: parts.path, named: fc.record(parts.headers), encoded: encodedBody(parts.body ?? fc.constant(undefined)), extra: extraHeaders })
    .map(({ method, path, named, encoded, extra }) => {
      const headers = Object.entries({ ...named, "Content-Encoding": encoded.encoding }).filter((header): header is [string, string] => header[1] !== null);
      return { method, path, headers: [...headers, ...extra], body: encoded.body };
    });
}
