// How deep a parsed JSON body nests, measured without recursion. Parsing itself is safe at any
// depth (V8's JSON.parse does not recurse), but whatever walks the value afterwards with a
// recursive function (the idempotency fingerprint, zod, a tool's argument check) overflows the
// stack at a few thousand levels, a 500. No body of /v1 or /api/mcp needs more than a few
// levels, so a body deeper than MAX_JSON_DEPTH is refused as the client's mistake on arrival.

/** Deeper JSON than any request needs is refused before anything walks it. */
export const MAX_JSON_DEPTH = 32;

/** Whether `value` has arrays or objects nested more than `max` levels deep (the top level is 1). */
export function exceedsJsonDepth(value: unknown, max = MAX_JSON_DEPTH): boolean {
  const pending: Array<{ value: unknown; depth: number }> = [{ value, depth: 0 }];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    if (typeof next.value !== "object" || next.value === null) continue;
    const depth = next.depth + 1;
    if (depth > max) return true;
    for (const child of Object.values(next.value)) if (typeof child === "object" && child !== null) pending.push({ value: child, depth });
  }
  return false;
}
