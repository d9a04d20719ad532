// Turns anything thrown in a handler into the one error shape. Client mistakes that Express's
// own body parser detects (bad JSON, oversized body) become 4xx; anything unexpected becomes a
// 500 whose body says nothing about the internals, while the log keeps the stack.
import type { NextFunction, Request, Response } from "express";
import type { Logger } from "pino";
import { ApiError } from "../errors.ts";

interface BodyParserError {
  type?: string;
  status?: number;
}

/** The client mistake a body-parser error stands for, or undefined for anything else. */
export function fromBodyParser(error: BodyParserError): ApiError | undefined {
  switch (error.type) {
    case "entity.parse.failed":
      return new ApiError(400, "invalid_request_error", "body_invalid_json", "The request body is not valid JSON.");
    case "entity.too.large":
      return new ApiError(413, "invalid_request_error", "body_too_large", "The request body is too large.");
    case "encoding.unsupported":
    case "charset.unsupported":
      return new ApiError(415, "invalid_request_error", "body_encoding_unsupported", "The request body encoding is not supported.");
    case "request.aborted":
      return new ApiError(400, "invalid_request_error", "request_aborted", "The request was aborted by the client.");
    default:
      return undefined;
  }
}

export function errorMiddleware(logger: Logger) {
  return (error: unknown, req: Request, res: Response, _next: NextFunction) => {
    const apiError =
      error instanceof ApiError
        ? error
        : (fromBodyParser(error as BodyParserError) ??
          new ApiError(500, "api_error", "internal_error", "An internal error occurred. It has been logged."));
    if (apiError.status >= 500) logger.error({ err: error, method: req.method, url: req.originalUrl }, "request failed");
    res.status(apiError.status).set(apiError.headers).json(apiError.toBody());
  };
}

export function notFoundRoute(req: Request) {
  throw new ApiError(404, "invalid_request_error", "route_unknown", `Unrecognized request URL (${req.method} ${req.path}).`);
}
