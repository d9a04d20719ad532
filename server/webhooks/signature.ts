// The webhook signature of SPEC 5: `X-Service-Signature: t=<unix s>,v1=<hex>[,v1=<hex>...]`,
// each v1 the lowercase hex HMAC-SHA256 of `<t>.<raw body>` under one signing secret. The
// sender signs with every secret that is valid now (two while a rolled secret is in its grace
// period); `verifySignature` is the receiver's side, exported for integrators
// (`import { verifySignature } from "badgebench/webhooks"`). It imports nothing of ours.
import { createHmac, timingSafeEqual } from "node:crypto";

export const SIGNATURE_HEADER = "X-Service-Signature";
/** SPEC 8: a receiver refuses a timestamp further than this from its clock. */
export const DEFAULT_TOLERANCE_SECONDS = 300;

function hmacHex(secret: string, timestamp: number, rawBody: Buffer | string): string {
  return createHmac("sha256", secret).update(`${timestamp}.`).update(rawBody).digest("hex");
}

/** The header value for a body signed at `timestamp` (unix seconds) with each of `secrets`. */
export function signatureHeader(rawBody: Buffer | string, secrets: readonly string[], timestamp: number): string {
  return [`t=${timestamp}`, ...secrets.map((secret) => `v1=${hmacHex(secret, timestamp, rawBody)}`)].join(",");
}

export type VerifyFailure = "header_missing" | "header_malformed" | "timestamp_outside_tolerance" | "signature_mismatch";

export class SignatureVerificationError extends Error {
  override name = "SignatureVerificationError";
  readonly reason: VerifyFailure;
  constructor(reason: VerifyFailure, message: string) {
    super(message);
    this.reason = reason;
  }
}

export interface VerifyOptions {
  /** default 300 (SPEC 8) */
  toleranceSeconds?: number;
  /** the receiver's clock in unix seconds (default: now) */
  now?: number;
}

/**
 * Checks a delivery: the raw body bytes exactly as received (never re-serialised JSON), the
 * `X-Service-Signature` header, and the endpoint's secrets (several while one is rolled).
 * Returns the timestamp it was signed at, or throws `SignatureVerificationError` (answer 400).
 */
export function verifySignature(
  rawBody: Buffer | string,
  header: string | undefined | null,
  secrets: string | readonly string[],
  options: VerifyOptions = {},
): number {
  if (!header) throw new SignatureVerificationError("header_missing", `No ${SIGNATURE_HEADER} header.`);
  let timestamp: number | undefined;
  const signatures: Buffer[] = [];
  for (const part of header.split(",")) {
    const at = part.indexOf("=");
    if (at < 0) continue;
    const name = part.slice(0, at).trim();
    const value = part.slice(at + 1).trim();
    if (name === "t" && /^\d{1,15}$/.test(value)) timestamp = Number(value);
    if (name === "v1" && /^[0-9a-f]{64}$/.test(value)) signatures.push(Buffer.from(value, "hex"));
  }
  if (timestamp === undefined || signatures.length === 0) {
    throw new SignatureVerificationError("header_malformed", `${SIGNATURE_HEADER} needs a t= part and at least one v1= part.`);
  }
  const tolerance = options.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS;
  const now = options.now ?? Math.floor(Date.now() / 1000);
  if (Math.abs(now - timestamp) > tolerance) {
    throw new SignatureVerificationError(
      "timestamp_outside_tolerance",
      `The signature's timestamp ${timestamp} is more than ${tolerance} s from this clock (${now}).`,
    );
  }
  for (const secret of typeof secrets === "string" ? [secrets] : secrets) {
    const expected = Buffer.from(hmacHex(secret, timestamp, rawBody), "hex");
    // Compare against every part without stopping early, so timing says nothing about which matched.
    let matched = false;
    for (const signature of signatures) matched = timingSafeEqual(expected, signature) || matched;
    if (matched) return timestamp;
  }
  throw new SignatureVerificationError("signature_mismatch", "No v1 signature matches the body under any of the given secrets.");
}
