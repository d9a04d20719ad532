// Turns anything thrown in a handler into the one error shape. A request Express could not read
// (bad JSON, oversized body, a body that does not inflate, a path that does not percent-decode)
// is the client's mistake and becomes a 4xx; anything unexpected becomes a 500 whose body says
// nothing about the internals, while the log keeps the stack.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Request } from "express";
import type { Logger } from "pino";
import { ApiError } from "../errors.ts";
import { isDatabaseUnavailable } from "../store/dialect.ts";
import type { Next } from "./steps.ts";
import { MAX_JSON_DEPTH } from "./json-depth.ts";
import { closeIfBodyUnread } from "./request-body.ts";
import { sendJson } from "./send-json.ts";

/**
 * What Express's router and body parser raise for a request they could not read: http-errors
 * with a 4xx `status`, most with a `type`. Two come without one, with status 400: zlib's error
 * (`code` Z_... for gzip and deflate, ERR__ERROR_... for brotli) when the body does not match
 * its Content-Encoding, and a URIError for a path parameter that is not percent-encoded UTF-8.
 */
interface RequestReadingError {
  type?: string;
  status?: number;
  code?: string;
}

const ZLIB_ERROR_CODE = /^(Z_|ERR__ERROR_)/;

const invalidRequest = (status: number, code: string, message: string) => new ApiError(status, "invalid_request_error", code, message);

/** The client mistake an error raised while reading the request stands for, or undefined for anything else. */
export function clientMistakeOf(error: unknown): ApiError | undefined {
  if (typeof error !== "object" || error === null) return undefined;
  const reading = error as RequestReadingError;
  switch (reading.type) {
    case "entity.parse.failed":
      return invalidRequest(400, "body_invalid_json", "The request body is not valid JSON.");
    case "entity.too.deep":
      return invalidRequest(400, "body_too_deep", `The request body is nested more than ${MAX_JSON_DEPTH} levels deep; no field takes more than a few.`);
    case "entity.too.large":
      return invalidRequest(413, "body_too_large", "The request body is too large.");
    case "encoding.unsupported":
    case "charset.unsupported":
      return invalidRequest(415, "body_encoding_unsupported", "The request body encoding is not supported.");
    case "request.aborted":
      return invalidRequest(400, "request_aborted", "The request was aborted by the client.");
  }
  if (reading.status !== 400) return undefined;
  if (error instanceof URIError) {
    return invalidRequest(400, "path_invalid", "The request path is not valid percent-encoded UTF-8.");
  }
  if (reading.code !== undefined && ZLIB_ERROR_CODE.test(reading.code)) {
    return invalidRequest(400, "body_encoding_invalid", "The request body could not be decoded with its Content-Encoding.");
  }
  return undefined;
}

/** The URL the client asked for: Express rewrites `req.url` inside a mounted router and keeps it as `originalUrl`. */
export const requestedUrl = (req: IncomingMessage & { originalUrl?: string }) => req.originalUrl ?? req.url;

/**
 * A 503 for an error that says the database cannot answer now (PostgreSQL gone, restarting, a
 * statement or pool timeout): nothing of the request was committed, a retry may succeed; never a
 * 500. Undefined for anything else.
 */
export function databaseUnavailableOf(error: unknown): ApiError | undefined {
  if (!isDatabaseUnavailable(error)) return undefined;
  return new ApiError(503, "api_error", "database_unavailable", "The database is not answering right now; nothing was changed. Retry shortly.", {
    headers: { "Retry-After": "1" },
  });
}

export function errorMiddleware(logger: Logger) {
  return (error: unknown, req: IncomingMessage, res: ServerResponse, _next: Next) => {
    const apiError =
      error instanceof ApiError
        ? error
        : (clientMistakeOf(error) ??
          databaseUnavailableOf(error) ??
          new ApiError(500, "api_error", "internal_error", "An internal error occurred. It has been logged."));
    if (apiError.status >= 500) logger.error({ err: error, method: req.method, url: requestedUrl(req) }, "request failed");
    closeIfBodyUnread(req, res);
    sendJson(res, apiError.status, apiError.toBody(), apiError.headers);
  };
}

export function notFoundRoute(req: Request) {
  throw new ApiError(404, "invalid_request_error", "route_unknown", `Unrecognized request URL (${req.method} ${req.path}).`);
}
