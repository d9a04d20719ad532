// Every write on /v1 (POST, PATCH) carries an Idempotency-Key. The key is checked first, the
// body is validated next (a request that fails validation stores nothing, so the client can
// fix it and retry with the same key), and only then does the write run through the gate.
import type { IncomingMessage, ServerResponse } from "node:http";
import { ApiError } from "../errors.ts";
import { IdempotencyGate, MAX_KEY_LENGTH, requestFingerprint, type GroupedCombinable, type Operation } from "../services/idempotency.ts";
import { principalOf } from "./auth-middleware.ts";
import { sendJson } from "./send-json.ts";

export function requireIdempotencyKey(req: IncomingMessage): string {
  // node joins a repeated header of this kind with ", ", as Express's req.get returned it.
  const key = req.headers["idempotency-key"] as string | undefined;
  if (key === undefined || key.trim() === "") {
    throw new ApiError(
      400,
      "invalid_request_error",
      "idempotency_key_missing",
      "Every write needs an Idempotency-Key header built from something stable (for example the session and the student).",
      { param: "Idempotency-Key" },
    );
  }
  if (key.length > MAX_KEY_LENGTH) {
    throw new ApiError(400, "invalid_request_error", "idempotency_key_invalid", `Idempotency-Key is longer than ${MAX_KEY_LENGTH} characters.`, {
      param: "Idempotency-Key",
    });
  }
  return key;
}

/**
 * The path the request fingerprint holds, as the client wrote it without the query: what
 * Express gives as `baseUrl + path`; a hot route (hot-routes.ts) serves only an exact `req.url`
 * without a query, which is that same text.
 */
function pathOf(req: IncomingMessage & { baseUrl?: string; path?: string }): string {
  return req.path === undefined ? req.url! : (req.baseUrl ?? "") + req.path;
}

const REPLAYED = { "Idempotent-Replayed": "true" };

/** A replay says so; one whose answer showed a secret once names the fields it now holds null in. */
const replayHeaders = (withheld: string[]) => (withheld.length === 0 ? REPLAYED : { ...REPLAYED, "Idempotent-Withheld": withheld.join(", ") });

/** The write through the gate: an operation, or a request of a grouped write (IdempotencyGate.runGrouped). */
export type IdempotentWrite<I> = Operation | { grouped: GroupedCombinable<I>; input: I };

export async function sendIdempotent<I>(req: IncomingMessage, res: ServerResponse, gate: IdempotencyGate, key: string, write: IdempotentWrite<I>) {
  const principal = principalOf(req);
  const owner = { livemode: principal.livemode, apiKeyId: principal.keyId };
  const fingerprint = requestFingerprint(req.method!, pathOf(req), req.body);
  const result = typeof write === "function" ? await gate.run(owner, key, fingerprint, write) : await gate.runGrouped(owner, key, fingerprint, write.grouped, write.input);
  sendJson(res, result.status, result.body, result.replayed ? replayHeaders(result.withheld) : {});
}
