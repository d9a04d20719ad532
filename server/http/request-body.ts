// The request body parsers of /v1 (JSON) and the badge endpoints (text), for Express and the hot
// routes alike. The body every client sends (a Content-Length within the limit, no
// Content-Encoding, UTF-8) is read here directly: body-parser's path through type-is,
// content-type, raw-body, iconv-lite and its async-hooks scope cost a few per cent of a create's
// CPU in the profiles. Anything else (compressed, chunked, another charset, too large) goes to
// body-parser itself, with the same options, so its answers for those stay what they were.
// For the bodies read here the result is the one body-parser gives: UTF-8 decoded with a leading
// byte-order mark dropped (as iconv-lite does), and for JSON its strict parse (an empty body is
// `{}`; anything but an object or array at the top is refused); test/server/request-body.test.ts
// holds the two against each other.
import type { IncomingMessage, ServerResponse } from "node:http";
import express from "express";
import type { Next } from "./hot-routes.ts";

/** An error shaped as body-parser's, so `clientMistakeOf` maps it to the same client mistake. */
class BodyReadError extends Error {
  constructor(
    message: string,
    readonly type: "entity.parse.failed" | "request.aborted",
    readonly status = 400,
  ) {
    super(message);
  }
}

const BYTE_ORDER_MARK = "\uFEFF";
const FIRST_NON_WHITESPACE = /^[\x20\x09\x0a\x0d]*([^\x20\x09\x0a\x0d]|$)/;

/** The body's length when it is plain (read here), or undefined when body-parser must read it. */
function plainLength(req: IncomingMessage, limit: number, plainContentType: (type: string | undefined) => boolean): number | undefined {
  const { headers } = req;
  if (headers["content-encoding"] !== undefined || headers["transfer-encoding"] !== undefined) return undefined;
  const length = headers["content-length"];
  if (length === undefined || !/^\d{1,9}$/.test(length) || Number(length) > limit) return undefined;
  return plainContentType(headers["content-type"]) ? Number(length) : undefined;
}

function readUtf8(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let ended = false;
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.once("end", () => {
      ended = true;
      const text = (chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)).toString("utf8");
      resolve(text.startsWith(BYTE_ORDER_MARK) ? text.slice(1) : text);
    });
    req.once("error", reject);
    req.once("close", () => {
      if (!ended) reject(new BodyReadError("request aborted", "request.aborted"));
    });
  });
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

function bodyParser(
  limit: number,
  plainContentType: (type: string | undefined) => boolean,
  decode: (text: string) => unknown,
  fallback: BodyParser,
) {
  return (req: IncomingMessage, res: ServerResponse, next: Next) => {
    if (plainLength(req, limit, plainContentType) === undefined) {
      fallback(req, res, next);
      return;
    }
    readUtf8(req)
      .then(decode)
      .then((body) => {
        req.body = body;
        next();
      }, next);
  };
}

/** `express.json({ limit })`: what /v1 reads. */
export function jsonBody(limit: number) {
  return bodyParser(
    limit,
    (type) => type === "application/json" || type === "application/json; charset=utf-8",
    parseStrictJson,
    express.json({ limit }),
  );
}

/** `express.text` of any Content-Type, UTF-8 unless a charset is named: what the badge endpoints read. */
export function textBody(limit: number) {
  return bodyParser(
    limit,
    // Without parameters there is no charset, and body-parser falls back to UTF-8 too.
    (type) => type === undefined || !type.includes(";") || type === "text/plain; charset=utf-8",
    (text) => text,
    express.text({ type: () => true, limit, defaultCharset: "utf-8" }),
  );
}
