// The badge endpoints' HTTP plumbing: every answer, errors included, is the letter-line text
// format of SPEC 4.8 (`V1`, `S <seconds>`, then the lines, `.` last), because the badge parses
// nothing else. An error is an `X <code> <message>` line with a 4xx status; the badge acts on
// the code and logs the message.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Logger } from "pino";
import { formatResponse, type ResponseLine } from "../../firmware/index.ts";
import { clientMistakeOf, databaseUnavailableOf, requestedUrl } from "../http/error-middleware.ts";
import type { Next } from "../http/hot-routes.ts";
import { authenticateDevice, type DeviceRow } from "../services/devices.ts";
import type { Db } from "../store/schema.ts";

/** The `S` line: seconds before the badge should contact the server again on its own. */
export const RECHECK_AFTER_S = {
  offer: 3600,
  current: 6 * 3600,
  noRelease: 6 * 3600,
  batteryLow: 15 * 60,
  sync: 15 * 60,
  /** a request the server cannot read is a firmware bug: retrying soon only repeats it */
  malformed: 24 * 3600,
  serverTrouble: 5 * 60,
  unauthorized: 0,
} as const;

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
    device?: DeviceRow;
  }
}

export function deviceOf(req: IncomingMessage): DeviceRow {
  if (!req.device) throw new Error("badge route mounted without deviceAuth");
  return req.device;
}

const unauthorized = (message: string) => new BadgeError(401, "unauthorized", message, RECHECK_AFTER_S.unauthorized);

/** Device-token authentication; a revoked token gets 401 on every badge endpoint (the badge clears it). */
export function deviceAuth(db: Db) {
  return async (req: IncomingMessage, _res: unknown, next: Next) => {
    const match = /^Bearer ([^\s]+)$/i.exec(req.headers.authorization?.trim() ?? "");
    if (!match) throw unauthorized("send 'Authorization: Bearer <DEVICE_TOKEN>'");
    const token = match[1]!;
    if (token.startsWith("sk_")) throw unauthorized("API keys are not accepted on badge endpoints; use a device token");
    const device = await authenticateDevice(db, token);
    if (!device) throw unauthorized("invalid or revoked device token");
    req.device = device;
    next();
  };
}

/** A request Express could not read (too large, aborted, unknown charset, not inflatable) keeps its /v1 code. */
function toBadgeError(error: unknown): BadgeError | undefined {
  if (error instanceof BadgeError) return error;
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
    if (res.headersSent) {
      res.destroy();
      return;
    }
    sendLines(res, badgeError.status, badgeError.recheckAfterS, [refusalLine(badgeError.code, badgeError.message)]);
  };
}
