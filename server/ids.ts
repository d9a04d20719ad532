// Prefixed ids: 10 characters of millisecond time (so inserts land at the end of the index)
// then 16 of randomness (80 bits, so ids cannot be guessed), in Crockford base32.
import { randomBytes } from "node:crypto";

const ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz";

export type IdPrefix = "att" | "stu" | "ses" | "dev" | "usr" | "whe" | "evt" | "key" | "hst" | "fch" | "rpt" | "tap" | "wha" | "pip";

export function newId(prefix: IdPrefix, now = Date.now()): string {
  let time = "";
  let t = now;
  for (let i = 0; i < 10; i++) {
    time = ALPHABET[t % 32] + time;
    t = Math.floor(t / 32);
  }
  let random = "";
  for (const byte of randomBytes(16)) random += ALPHABET[byte % 32];
  return `${prefix}_${time}${random}`;
}
