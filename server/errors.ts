// The one error type handlers throw, and the one JSON shape every /v1 error takes:
// {"error": {"type", "code", "message", "param"}} (Stripe-like).
export const ERROR_TYPES = ["invalid_request_error", "authentication_error", "permission_error", "idempotency_error", "rate_limit_error", "api_error"] as const;
export type ErrorType = (typeof ERROR_TYPES)[number];

export interface ErrorBody {
  error: { type: ErrorType; code: string; message: string; param: string | null };
}

export class ApiError extends Error {
  readonly status: number;
  readonly type: ErrorType;
  readonly code: string;
  readonly param: string | null;
  readonly headers: Record<string, string>;

  constructor(
    status: number,
    type: ErrorType,
    code: string,
    message: string,
    options: { param?: string; headers?: Record<string, string>; cause?: unknown } = {},
  ) {
    super(message, { cause: options.cause });
    this.name = "ApiError";
    this.status = status;
    this.type = type;
    this.code = code;
    this.param = options.param ?? null;
    this.headers = options.headers ?? {};
  }

  toBody(): ErrorBody {
    return { error: { type: this.type, code: this.code, message: this.message, param: this.param } };
  }
}

export const invalidParam = (param: string, message: string, code = "parameter_invalid") =>
  new ApiError(400, "invalid_request_error", code, message, { param });

export const notFound = (what: string, id: string, param?: string) =>
  new ApiError(404, "invalid_request_error", "resource_missing", `No such ${what}: '${id}'.`, { param });

export const conflict = (code: string, message: string, param?: string) =>
  new ApiError(409, "invalid_request_error", code, message, { param });

/**
 * Another publish or promote holds the release lock (ReleaseLockedError). 503, not 409: the
 * idempotency gate keeps 4xx answers for the key, and this one is worth retrying.
 */
export const releaseStoreBusy = () =>
  new ApiError(503, "api_error", "release_store_busy", "Another publish or promote is running; retry shortly.", { headers: { "Retry-After": "1" } });
