// Every write on /v1 (POST, PATCH) carries an Idempotency-Key. The key is checked first, the
// body is validated next (a request that fails validation stores nothing, so the client can
// fix it and retry with the same key), and only then does the write run through the gate.
import type { Request, Response } from "express";
import { ApiError } from "../errors.ts";
import { IdempotencyGate, MAX_KEY_LENGTH, requestFingerprint, type Operation } from "../services/idempotency.ts";
import { principalOf } from "./auth-middleware.ts";

export function requireIdempotencyKey(req: Request): string {
  const key = req.get("idempotency-key");
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

export async function sendIdempotent(req: Request, res: Response, gate: IdempotencyGate, key: string, operation: Operation) {
  const principal = principalOf(req);
  const fingerprint = requestFingerprint(req.method, req.baseUrl + req.path, req.body);
  const result = await gate.run(principal.livemode, key, fingerprint, operation);
  if (result.replayed) res.set("Idempotent-Replayed", "true");
  res.status(result.status).json(result.body);
}
