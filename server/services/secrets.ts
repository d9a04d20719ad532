// Bearer secrets (API keys and device tokens): shown once, stored as a SHA-256 hash. A secret's
// first characters are a non-secret lookup handle; the whole secret is compared in constant
// time against the stored hash, so verification time says nothing about the secret.
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";

const LOOKUP_LENGTH = 8;

export interface NewSecret {
  secret: string;
  lookup: string;
  hash: string;
  hint: string;
}

/** A new secret `<prefix><random>`, e.g. prefix `sk_test_` or `dtk_live_`. */
export function newSecret(prefix: string): NewSecret {
  const secret = `${prefix}${randomBytes(24).toString("base64url")}`;
  return {
    secret,
    lookup: lookupOf(prefix, secret),
    hash: hashSecret(secret).toString("hex"),
    hint: `${secret.slice(0, 8)}...${secret.slice(-4)}`,
  };
}

export const lookupOf = (prefix: string, secret: string) => secret.slice(0, prefix.length + LOOKUP_LENGTH);

const hashSecret = (secret: string) => createHash("sha256").update(secret).digest();

export function secretMatches(secret: string, storedHashHex: string): boolean {
  return timingSafeEqual(hashSecret(secret), Buffer.from(storedHashHex, "hex"));
}
