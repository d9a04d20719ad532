// Lookups kept in memory: the principals of recent credentials (API keys, device tokens), so a
// request does not pay a database read and two hashes to learn who sent it, and each mode's open
// staged rollout (services/rollouts.ts), so a badge's check or download does not read it either.
// Kept only while the store's change feed (store/change-feed.ts) says nothing that could change them
// has happened: a revocation or a rollout's change on this process, on another instance, or by an
// admin command empties the cache (on PostgreSQL from the next request after its notification
// arrives, and never later than the feed's check interval). Of the principals only credentials
// that authenticated are kept, so unknown tokens cannot fill it (`keepMissing` false); a mode
// without an open rollout is an answer worth keeping (`keepMissing` true). Past `capacity` it
// starts again empty.
import type { ChangeFeed } from "../store/change-feed.ts";

/** How many credentials' principals a server keeps per kind (a district's badges, a few hundred bytes each); past it the cache starts again empty. */
export const PRINCIPAL_CACHE_SIZE = 100_000;

export function cachedLookup<K, P>(
  changes: ChangeFeed,
  lookup: (key: K) => Promise<P | undefined>,
  { capacity = PRINCIPAL_CACHE_SIZE, keepMissing = false }: { capacity?: number; keepMissing?: boolean } = {},
) {
  const kept = new Map<K, P | undefined>();
  let seen: number | undefined;
  const fresh = (now: number) => {
    if (now !== seen) {
      kept.clear();
      seen = now;
    }
  };
  return async (key: K): Promise<P | undefined> => {
    const current = changes.current();
    const before = typeof current === "number" ? current : await current;
    fresh(before);
    if (kept.has(key)) return kept.get(key);
    const found = await lookup(key);
    // A change announced while the lookup ran may have come after its read: not kept.
    const after = changes.current();
    if ((found !== undefined || keepMissing) && (typeof after === "number" ? after : await after) === before) {
      if (kept.size >= capacity) kept.clear();
      kept.set(key, found);
    }
    return found;
  };
}
