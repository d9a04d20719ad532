// Prefixed ids: 10 characters of millisecond time (so inserts land at the end of the index)
// then 16 of randomness (80 bits, so ids cannot be guessed), in Crockford base32.
import { randomFillSync } from "node:crypto";

const ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz";

export type IdPrefix = "att" | "stu" | "ses" | "dev" | "usr" | "whe" | "evt" | "key" | "hst" | "fch" | "rpt" | "tap" | "wha" | "pip" | "rol";

// Random bytes are drawn from the CSPRNG a pool at a time: a call per id was 8 % of the server's
// CPU in the sync benchmark's profile.
const pool = Buffer.alloc(16 * 256);
let poolOffset = pool.length;

function random16(): Buffer {
  if (poolOffset === pool.length) {
    randomFillSync(pool);
    poolOffset = 0;
  }
  poolOffset += 16;
  return pool.subarray(poolOffset - 16, poolOffset);
}

export function newId(prefix: IdPrefix, now = Date.now()): string {
  let time = "";
  let t = now;
  for (let i = 0; i < 10; i++) {
    time = ALPHABET[t % 32] + time;
    t = Math.floor(t / 32);
  }
  let random = "";
  for (const byte of random16()) random += ALPHABET[byte % 32];
  return `${prefix}_${time}${random}`;
}
