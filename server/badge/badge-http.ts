// The badge endpoints' HTTP plumbing: every answer, errors included, is the letter-line text
// format of SPEC 4.8 (`V1`, `S <seconds>`, then the lines, `.` last), because the badge parses
// nothing else. An error is an `X <code> <message>` line with a 4xx status; the badge acts on
// the code and logs the message.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Logger } from "pino";
import { BadgeRequestError, formatResponse, RECHECK_AFTER_S, type ResponseLine } from "../../firmware/index.ts";
import { clientMistakeOf, databaseUnavailableOf, requestedUrl } from "../http/error-middleware.ts";
import type { AuthFailureLimiter } from "../http/auth-failures.ts";
import { bearerToken } from "../http/auth-middleware.ts";
import { closeIfBodyUnread } from "../http/request-body.ts";
import type { Next } from "../http/steps.ts";
import type { AuthenticateDevice, DevicePrincipal } from "../services/devices.ts";

export class BadgeError extends Error {
  override name = "BadgeError";
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly recheckAfterS: number = RECHECK_AFTER_S.malformed,
  ) {
    super(message);
  }
}

/** Writes the answer with the headers Express's `res.status(s).set(...).send(text)` wrote, for Express and the hot route alike. */
export function sendLines(res: ServerResponse, status: number, recheckAfterS: number, lines: ResponseLine[]): void {
  const body = formatResponse([{ letter: "S", value: String(recheckAfterS) }, ...lines]);
  res.statusCode = status;
  res.setHeader("Content-Type", "text/plain; charset=utf-8");
  res.setHeader("Cache-Control", "no-store");
  res.setHeader("Content-Length", Buffer.byteLength(body));
  res.end(body);
}

export const refusalLine = (code: string, message: string): ResponseLine => ({ letter: "X", value: `${code} ${message}` });

// On node's request, so the hot route (http/hot-routes.ts) and Express (whose Request extends it) share it.
declare module "node:http" {
  interface IncomingMessage {
    device?: DevicePrincipal;
  }
}

export function deviceOf(req: IncomingMessage): DevicePrincipal {
  if (!req.device) throw new Error("badge route mounted without deviceAuth");
  return req.device;
}

/** A bad token from a client past its failure budget: the `S` line says when to come back. */
export const tooManyBadgeFailures = (retryAfterS: number) =>
  new BadgeError(429, "too_many_failed_authentications", `too many failed authentications from this address; retry after ${retryAfterS} s`, retryAfterS);

const unauthorized = (message: string) => new BadgeError(401, "unauthorized", message, RECHECK_AFTER_S.unauthorized);

/**
 * Device-token authentication; a revoked token gets 401 on every badge endpoint (the badge clears
 * it). Past its address's failure budget (http/auth-failures.ts) a bad token gets 429, and the
 * `S` line says when to come back.
 */
export function deviceAuth(authenticateDevice: AuthenticateDevice, failures: AuthFailureLimiter) {
  return async (req: IncomingMessage, _res: unknown, next: Next) => {
    const token = bearerToken(req);
    if (token === undefined) throw unauthorized("send 'Authorization: Bearer <DEVICE_TOKEN>'");
    if (token.startsWith("sk_")) throw unauthorized("API keys are not accepted on badge endpoints; use a device token");
    const device = await authenticateDevice(token);
    if (!device) {
      const retryAfterS = failures.noteFailure(req.socket.remoteAddress);
      throw retryAfterS > 0 ? tooManyBadgeFailures(retryAfterS) : unauthorized("invalid or revoked device token");
    }
    req.device = device;
    next();
  };
}

/** A request Express could not read (too large, aborted, unknown charset, not inflatable) keeps its /v1 code. */
function toBadgeError(error: unknown): BadgeError | undefined {
  if (error instanceof BadgeError) return error;
  if (error instanceof BadgeRequestError) return new BadgeError(400, error.code, error.message);
  const clientMistake = clientMistakeOf(error);
  return clientMistake && new BadgeError(clientMistake.status, clientMistake.code, clientMistake.message);
}

/** The database did not answer: the badge comes back after the server-trouble wait. */
function unavailableBadgeError(error: unknown): BadgeError | undefined {
  const unavailable = databaseUnavailableOf(error);
  return unavailable && new BadgeError(unavailable.status, unavailable.code, "the database is not answering; try again later", RECHECK_AFTER_S.serverTrouble);
}

export function badgeErrorMiddleware(logger: Logger) {
  return (error: unknown, req: IncomingMessage, res: ServerResponse, _next: Next) => {
    let badgeError = toBadgeError(error);
    if (!badgeError) {
      logger.error({ err: error, method: req.method, url: requestedUrl(req) }, "badge request failed");
      badgeError =
        unavailableBadgeError(error) ?? new BadgeError(500, "server_error", "the server failed; it has been logged", RECHECK_AFTER_S.serverTrouble);
    }
    if (badgeError.status === 401) res.setHeader("WWW-Authenticate", 'Bearer realm="badgebench"');
    if (badgeError.status === 429) res.setHeader("Retry-After", String(badgeError.recheckAfterS));
    if (res.headersSent) {
      res.destroy();
      return;
    }
    closeIfBodyUnread(req, res);
    sendLines(res, badgeError.status, badgeError.recheckAfterS, [refusalLine(badgeError.code, badgeError.message)]);
  };
}
