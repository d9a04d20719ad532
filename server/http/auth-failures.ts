// A budget of failed authentications per client address (issue 28, row 7). Keys and device
// tokens are too long to guess, but a flood of bad ones cost a routed request and a full answer
// each, at full speed, and left no trace. Past the budget a client's requests are checked before
// any routing (`shedFailedAuthentication`): a valid credential goes on as always, whatever the
// address's count; anything else gets 429 with Retry-After at once, which costs the server a
// third of the 401 it replaces. One log line names each client that crossed its budget.
import type { IncomingMessage, RequestListener, ServerResponse } from "node:http";
import type { Logger } from "pino";
import { ApiError } from "../errors.ts";

export interface AuthFailureBudget {
  /** failed attempts a client address may make per window */
  failures: number;
  /** the window, from the address's first failure */
  windowMs: number;
  /** addresses tracked at once; past it the longest-tracked is forgotten */
  maxClients: number;
}

// A person fixing a mistyped key, or a badge retrying with a revoked token every few minutes,
// stays far below 20 a minute; a script trying keys crosses it within a second.
export const AUTH_FAILURE_BUDGET: AuthFailureBudget = { failures: 20, windowMs: 60_000, maxClients: 10_000 };

interface ClientFailures {
  failures: number;
  resetAt: number;
}

export class AuthFailureLimiter {
  readonly #budget: AuthFailureBudget;
  readonly #logger: Logger;
  readonly #clients = new Map<string, ClientFailures>();
  /** when the last window of a client past its budget ends: until then requests are looked at */
  #someoneOverBudgetUntil = 0;

  constructor(logger: Logger, budget: Partial<AuthFailureBudget> = {}) {
    this.#budget = { ...AUTH_FAILURE_BUDGET, ...budget };
    this.#logger = logger;
  }

  /**
   * Counts a failed attempt from `client`; returns the seconds it must wait before trying again
   * when it is past its budget, or 0 when it is within it.
   */
  noteFailure(client: string | undefined, now = Date.now()): number {
    const key = client ?? "unknown";
    let entry = this.#clients.get(key);
    if (!entry || entry.resetAt <= now) {
      this.#clients.delete(key);
      if (this.#clients.size >= this.#budget.maxClients) this.#clients.delete(this.#clients.keys().next().value!);
      entry = { failures: 0, resetAt: now + this.#budget.windowMs };
      this.#clients.set(key, entry);
    }
    entry.failures += 1;
    if (entry.failures <= this.#budget.failures) return 0;
    if (entry.failures === this.#budget.failures) this.#someoneOverBudgetUntil = Math.max(this.#someoneOverBudgetUntil, entry.resetAt);
    if (entry.failures === this.#budget.failures + 1) {
      this.#logger.warn(
        { client: key, failures: this.#budget.failures, windowS: this.#budget.windowMs / 1000 },
        "authentication failures over budget: refusing this client's bad credentials with 429 until its window ends",
      );
    }
    return Math.max(1, Math.ceil((entry.resetAt - now) / 1000));
  }

  /** Whether any client may be past its budget now: while none is, requests are not looked at. */
  someoneOverBudget(now = Date.now()): boolean {
    return now < this.#someoneOverBudgetUntil;
  }

  /** Whether `client` has used up its budget. */
  isOverBudget(client: string | undefined, now = Date.now()): boolean {
    const entry = this.#clients.get(client ?? "unknown");
    return entry !== undefined && entry.failures >= this.#budget.failures && entry.resetAt > now;
  }
}

/** A bad credential from a client past its failure budget. */
export const tooManyFailures = (retryAfterS: number) =>
  new ApiError(429, "rate_limit_error", "too_many_failed_authentications", `Too many failed authentications from this address; retry after ${retryAfterS} s with a valid credential.`, {
    headers: { "Retry-After": String(retryAfterS) },
  });

export interface FailedAuthenticationGate {
  limiter: AuthFailureLimiter;
  /** whether the request carries a credential its route accepts; undefined for a route that needs none */
  credentialIsValid(req: IncomingMessage): Promise<boolean> | undefined;
  /** answers with the route's own 429 shape */
  refuse(req: IncomingMessage, res: ServerResponse, retryAfterS: number): void;
}

/**
 * In front of the app: while no client is past its budget, every request passes after a clock
 * read, so the hot routes pay nothing more in the normal case. While one is, each request's
 * address is looked up; a client past its budget has its credential checked first, and only a
 * valid one reaches the routes.
 */
export function shedFailedAuthentication(gate: FailedAuthenticationGate, app: RequestListener): RequestListener {
  return (req, res) => {
    if (!gate.limiter.someoneOverBudget()) return app(req, res);
    const client = req.socket.remoteAddress;
    if (!gate.limiter.isOverBudget(client)) return app(req, res);
    const valid = gate.credentialIsValid(req);
    if (valid === undefined) return app(req, res);
    valid.then(
      (ok) => (ok ? app(req, res) : gate.refuse(req, res, gate.limiter.noteFailure(client))),
      // The check itself failed (the database): the routes answer as they would.
      () => app(req, res),
    );
  };
}
