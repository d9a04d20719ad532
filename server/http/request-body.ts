// The request body parsers of /v1 (JSON), the badge endpoints (text) and the tool endpoint
// (bytes), for Express and the hot routes alike. The body every client sends (no
// Content-Encoding, UTF-8, a Content-Length within the limit or chunked) is read here directly:
// body-parser's path through type-is, content-type, raw-body, iconv-lite and its async-hooks scope
// cost a few per cent of a create's CPU in the profiles. Anything else (compressed, another
// charset) goes to body-parser itself, with the same options, so its answers for those stay what
// they were; only a body past the limit is refused sooner than body-parser would (bodyParser).
// For the bodies read here the result is the one body-parser gives: UTF-8 decoded with a leading
// byte-order mark dropped (as iconv-lite does), and for JSON its strict parse (an empty body is
// `{}`; anything but an object or array at the top is refused); test/server/request-body.test.ts
// holds the two against each other.
import type { IncomingMessage, ServerResponse } from "node:http";
import express from "express";
import type { Next } from "./steps.ts";
import { exceedsJsonDepth, MAX_JSON_DEPTH } from "./json-depth.ts";

/** An error shaped as body-parser's, so `clientMistakeOf` maps it to the same client mistake. */
class BodyReadError extends Error {
  constructor(
    message: string,
    readonly type: "entity.parse.failed" | "entity.too.deep" | "entity.too.large" | "request.aborted",
    readonly status = 400,
  ) {
    super(message);
  }
}

const tooLarge = () => new BodyReadError("request entity too large", "entity.too.large", 413);

const BYTE_ORDER_MARK = "\uFEFF";
const FIRST_NON_WHITESPACE = /^[\x20\x09\x0a\x0d]*([^\x20\x09\x0a\x0d]|$)/;
/**
 * What a compressed body may exceed the route's limit by on the wire while its decoded text is
 * within it: a gzip or zlib frame and deflate's 5 bytes per stored block of incompressible data
 * (brotli's overhead is smaller). The decoded limit is body-parser's, as before.
 */
const encodingOverhead = (limit: number) => 64 + 5 * Math.ceil(limit / 16_384);

/**
 * Whether the body is plain (read here): no Content-Encoding, a Content-Length or a chunked
 * body, and the Content-Type `plainContentType` accepts. Without either header there is no body,
 * and body-parser leaves `req.body` unset.
 */
function isPlain(req: IncomingMessage, plainContentType: (type: string | undefined) => boolean): boolean {
  const { headers } = req;
  if (headers["content-encoding"] !== undefined) return false;
  const length = headers["content-length"];
  if (length === undefined ? headers["transfer-encoding"] === undefined : !/^\d{1,9}$/.test(length)) return false;
  return plainContentType(headers["content-type"]);
}

/** The body's bytes, refused (entity.too.large) as soon as more than `limit` have arrived, with nothing more read. */
function readBytes(req: IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let received = 0;
    let settled = false;
    const onData = (chunk: Buffer) => {
      received += chunk.length;
      if (received <= limit) chunks.push(chunk);
      else {
        settled = true;
        req.off("data", onData);
        req.pause();
        reject(tooLarge());
      }
    };
    req.on("data", onData);
    req.once("end", () => {
      if (settled) return;
      settled = true;
      resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks));
    });
    req.once("error", reject);
    req.once("close", () => {
      if (!settled) reject(new BodyReadError("request aborted", "request.aborted"));
    });
  });
}

function utf8(bytes: Buffer): string {
  const text = bytes.toString("utf8");
  return text.startsWith(BYTE_ORDER_MARK) ? text.slice(1) : text;
}

/** body-parser's strict JSON: `{}` for an empty body, only an object or array at the top. */
function parseStrictJson(text: string): unknown {
  if (text.length === 0) return {};
  const first = FIRST_NON_WHITESPACE.exec(text)![1];
  if (first !== "{" && first !== "[") throw new BodyReadError("the JSON body must be an object or an array", "entity.parse.failed");
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new BodyReadError((error as Error).message, "entity.parse.failed");
  }
}

type BodyParser = (req: IncomingMessage, res: ServerResponse, next: Next) => void;

/**
 * Runs body-parser with a count of the bytes arriving: past `cap` the request is refused at once
 * (413), since body-parser reads a refused body to its end before it answers. Its own answer,
 * should it come after that, is dropped.
 */
function withByteCap(fallback: BodyParser, req: IncomingMessage, res: ServerResponse, next: Next, cap: number): void {
  let settled = false;
  const settle: Next = (error) => {
    if (settled) return;
    settled = true;
    req.off("data", count);
    next(error);
  };
  let received = 0;
  const count = (chunk: Buffer) => {
    received += chunk.length;
    if (received > cap) settle(tooLarge());
  };
  fallback(req, res, settle);
  // Counted only once body-parser reads: a body it leaves alone (another Content-Type) stays unread.
  if (!settled && req.listenerCount("data") > 0) req.on("data", count);
}

/**
 * A body of at most `limit` bytes: a declared Content-Length above it is refused before a byte
 * of the body is read, a chunked one as soon as it passes it (the error middleware then closes
 * the connection: `closeIfBodyUnread`).
 */
function bodyParser(
  limit: number,
  plainContentType: (type: string | undefined) => boolean,
  decode: (bytes: Buffer) => unknown,
  fallback: BodyParser,
) {
  return (req: IncomingMessage, res: ServerResponse, next: Next) => {
    if (Number(req.headers["content-length"]) > limit) {
      next(tooLarge());
      return;
    }
    if (!isPlain(req, plainContentType)) {
      withByteCap(fallback, req, res, next, req.headers["content-encoding"] === undefined ? limit : limit + encodingOverhead(limit));
      return;
    }
    readBytes(req, limit)
      .then(decode)
      .then((body) => {
        req.body = body;
        next();
      }, next);
  };
}

/**
 * Answering before the body arrived (a refusal: no key, too large, a bad header), the server
 * closes the connection after the answer rather than reading the rest of the body to keep it
 * alive: a client that is refused cannot make the server download its upload.
 */
export function closeIfBodyUnread(req: IncomingMessage, res: ServerResponse): void {
  if (!req.complete && !res.headersSent) res.setHeader("Connection", "close");
}

/** Refuses a parsed body nested deeper than any request needs (json-depth.ts says why). */
function refuseDeepJson(body: unknown): unknown {
  if (exceedsJsonDepth(body)) throw new BodyReadError(`the JSON body is nested more than ${MAX_JSON_DEPTH} levels deep`, "entity.too.deep");
  return body;
}

/** `express.json({ limit })`: what /v1 reads, with its nesting depth bounded on both paths. */
export function jsonBody(limit: number) {
  const bodyParserJson = express.json({ limit });
  return bodyParser(
    limit,
    (type) => type === "application/json" || type === "application/json; charset=utf-8",
    (bytes) => refuseDeepJson(parseStrictJson(utf8(bytes))),
    (req, res, next) =>
      bodyParserJson(req, res, (error?: unknown) => {
        if (error !== undefined) return next(error);
        try {
          refuseDeepJson(req.body);
        } catch (tooDeep) {
          return next(tooDeep);
        }
        next();
      }),
  );
}

/** `express.text` of any Content-Type, UTF-8 unless a charset is named: what the badge endpoints read. */
export function textBody(limit: number) {
  return bodyParser(
    limit,
    // Without parameters there is no charset, and body-parser falls back to UTF-8 too.
    (type) => type === undefined || !type.includes(";") || type === "text/plain; charset=utf-8",
    utf8,
    express.text({ type: () => true, limit, defaultCharset: "utf-8" }),
  );
}

/** `express.raw` of any Content-Type: the bytes, what the tool endpoint reads. */
export function rawBody(limit: number) {
  return bodyParser(limit, () => true, (bytes) => bytes, express.raw({ type: () => true, limit }));
}
