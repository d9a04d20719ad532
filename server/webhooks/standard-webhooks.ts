// Standard Webhooks 1.0 beside SPEC 5: every delivery carries `webhook-id` (the event id, the
// same on every retry), `webhook-timestamp` (unix seconds of the attempt) and
// `webhook-signature` (`v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<raw body>">`, one per
// secret valid now, space-separated), so a receiver can check a delivery with any Standard
// Webhooks library. One secret string serves both schemes: SPEC 5 keys its HMAC with the whole
// string; Standard Webhooks with the bytes that the part after `whsec_` base64-decodes to.
import { createHmac } from "node:crypto";
import { SIGNATURE_HEADER, signatureHeader } from "./signature.ts";

const SECRET_PREFIX = "whsec_";

/**
 * The key bytes of a `whsec_` secret. Node decodes base64 and base64url alike, so secrets issued
 * in base64url (before Standard Webhooks was served) sign too; a receiver's library may want
 * them rewritten in the standard alphabet (server/README.md, Webhooks).
 */
function keyBytes(secret: string): Buffer {
  return Buffer.from(secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret, "base64");
}

/** The `webhook-signature` value: one `v1,<base64>` per secret, space-separated. */
function standardSignature(eventId: string, timestamp: number, rawBody: string, secrets: readonly string[]): string {
  return secrets
    .map((secret) => `v1,${createHmac("sha256", keyBytes(secret)).update(`${eventId}.${timestamp}.`).update(rawBody).digest("base64")}`)
    .join(" ");
}

/** Every signature header of one attempt, SPEC 5's and Standard Webhooks' three, at one timestamp. */
export function deliveryHeaders(eventId: string, rawBody: string, secrets: readonly string[], timestamp: number): Record<string, string> {
  return {
    [SIGNATURE_HEADER]: signatureHeader(rawBody, secrets, timestamp),
    "webhook-id": eventId,
    "webhook-timestamp": String(timestamp),
    "webhook-signature": standardSignature(eventId, timestamp, rawBody, secrets),
  };
}
