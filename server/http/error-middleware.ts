// Turns anything thrown in a handler into the one error shape. A request Express could not read
// (bad JSON, oversized body, a body that does not inflate, a path that does not percent-decode)
// is the client's mistake and becomes a 4xx; anything unexpected becomes a 500 whose body says
// nothing about the internals, while the log keeps the stack.
import type { NextFunction, Request, Response } from "express";
import type { Logger } from "pino";
import { ApiError } from "../errors.ts";

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

export function errorMiddleware(logger: Logger) {
  return (error: unknown, req: Request, res: Response, _next: NextFunction) => {
    const apiError =
      error instanceof ApiError
        ? error
        : (clientMistakeOf(error) ??
          new ApiError(500, "api_error", "internal_error", "An internal error occurred. It has been logged."));
    if (apiError.status >= 500) logger.error({ err: error, method: req.method, url: req.originalUrl }, "request failed");
    res.status(apiError.status).set(apiError.headers).json(apiError.toBody());
  };
}

export function notFoundRoute(req: Request) {
  throw new ApiError(404, "invalid_request_error", "route_unknown", `Unrecognized request URL (${req.method} ${req.path}).`);
}
