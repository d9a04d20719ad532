// The middleware shape every request step has, whether Express or a hot route (hot-routes.ts)
// runs it: plain node request and response, and `next` to go on or to pass an error.
import type { IncomingMessage, ServerResponse } from "node:http";

export type Next = (error?: unknown) => void;
/** A middleware or handler that needs nothing of Express. */
export type Step = (req: IncomingMessage, res: ServerResponse, next: Next) => unknown;
export type ErrorStep = (error: unknown, req: IncomingMessage, res: ServerResponse, next: Next) => unknown;
