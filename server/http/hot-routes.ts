// The requests a deployment sees most, `POST /v1/attendance` (integrators' creates),
// `POST /api/badge/ota/check` (every badge, every few hours) and `POST /api/badge/sync` (every
// badge, every few minutes, with its card taps), are dispatched on node:http before Express: the
// profiles of the create and check benchmarks put Express's app and router layers (path matching
// through three nested routers, per-layer closures, its request and response prototypes) at a
// large share of a request's CPU; a sync of one tap cost 0.54 ms of server CPU through Express
// and 0.34 ms on its hot route (scripts/bench/bench-sync.ts --taps 1). A hot route runs the SAME
// middleware and handler functions, in the order Express runs them for that path, and its errors
// go through the same error middleware; only the path matching is skipped. Anything else,
// including these paths written any other way (a trailing slash, other letter case, a query
// string), goes to Express.
import type { IncomingMessage, RequestListener, ServerResponse } from "node:http";
import type { ErrorStep, Next, Step } from "./steps.ts";

declare module "node:http" {
  interface IncomingMessage {
    /** set by the body parsers (body-parser, for Express and the hot routes alike) */
    body?: unknown;
  }
}

export interface HotRoute {
  method: string;
  /** the exact request target (`req.url`) served here; every other spelling goes to Express */
  path: string;
  /** what Express runs for this path, in its order */
  steps: Step[];
  /** the error middleware Express would pass an error to, innermost first */
  onError: ErrorStep[];
}

export function withHotRoutes(routes: HotRoute[], fallback: RequestListener): RequestListener {
  const byTarget = new Map(routes.map((route) => [`${route.method} ${route.path}`, route]));
  return (req, res) => {
    const route = byTarget.get(`${req.method} ${req.url}`);
    if (route) run(route, req, res);
    else fallback(req, res);
  };
}

/** Runs the steps as Express 5 does: each calls `next()` to go on, and an error (thrown, rejected or passed to `next`) skips to the error middleware. */
function run(route: HotRoute, req: IncomingMessage, res: ServerResponse): void {
  let step = 0;
  let errorStep = 0;
  let failure: unknown;
  const fail: Next = (error) => {
    if (error !== undefined && error !== null) failure = error;
    const handler = route.onError[errorStep++];
    // Every route's last error middleware answers; should one not, the client must not hang.
    if (!handler) {
      res.destroy();
      return;
    }
    invoke(() => handler(failure, req, res, fail), fail);
  };
  const next: Next = (error) => {
    if (error !== undefined && error !== null) fail(error);
    else if (step < route.steps.length) {
      const handler = route.steps[step++]!;
      invoke(() => handler(req, res, next), fail);
    }
  };
  next();
}

function invoke(call: () => unknown, fail: Next): void {
  try {
    const result = call();
    if (result instanceof Promise) result.catch((error: unknown) => fail(error ?? new Error("Rejected promise")));
  } catch (error) {
    fail(error);
  }
}
