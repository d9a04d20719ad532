// Bearer-token authentication for /v1 and /api/mcp. No cookies and no unauthenticated route:
// every request either carries a valid key or gets 401; a key without the route's scope gets 403.
import type { IncomingMessage } from "node:http";
import { ApiError } from "../errors.ts";
import type { Authenticate, Principal, Scope } from "../services/api-keys.ts";
import { tooManyFailures, type AuthFailureLimiter } from "./auth-failures.ts";
import type { Next } from "./steps.ts";

// On node's request, so the hot routes (hot-routes.ts) and Express (whose Request extends it) share it.
declare module "node:http" {
  interface IncomingMessage {
    principal?: Principal;
  }
}

const unauthenticated = (code: string, message: string) =>
  new ApiError(401, "authentication_error", code, message, {
    headers: { "WWW-Authenticate": 'Bearer realm="badgebench"' },
  });

/** The bearer token of a request, or undefined without a well-formed Authorization header. */
export const bearerToken = (req: IncomingMessage) => /^Bearer ([^\s]+)$/i.exec(req.headers.authorization?.trim() ?? "")?.[1];

export function bearerAuth(authenticate: Authenticate, failures: AuthFailureLimiter) {
  return async (req: IncomingMessage, _res: unknown, next: Next) => {
    const header = req.headers.authorization;
    if (!header) {
      throw unauthenticated("api_key_missing", "No API key provided. Send 'Authorization: Bearer <API_KEY>'.");
    }
    const token = bearerToken(req);
    if (token === undefined) {
      throw unauthenticated("api_key_invalid", "Malformed Authorization header. Expected 'Bearer <API_KEY>'.");
    }
    if (token.startsWith("dtk_")) {
      throw unauthenticated("api_key_invalid", "Device tokens open the badge endpoints only; /v1 and /api/mcp take an API key.");
    }
    const principal = await authenticate(token);
    if (!principal) {
      const retryAfterS = failures.noteFailure(req.socket.remoteAddress);
      throw retryAfterS > 0 ? tooManyFailures(retryAfterS) : unauthenticated("api_key_invalid", "Invalid or revoked API key.");
    }
    req.principal = principal;
    next();
  };
}

export function principalOf(req: IncomingMessage): Principal {
  if (!req.principal) throw new Error("route mounted without bearerAuth");
  return req.principal;
}

export function requireScope(scope: Scope) {
  return (req: IncomingMessage, _res: unknown, next: Next) => {
    if (!principalOf(req).scopes.has(scope)) {
      throw new ApiError(403, "permission_error", "scope_missing", `This API key lacks the '${scope}' scope.`);
    }
    next();
  };
}
