// One line for a server that could not be reached, naming the URL and the cause: Node's fetch
// says only "fetch failed" and keeps the reason (ECONNREFUSED, ENOTFOUND, a timeout) in `cause`.
const CAUSES: Record<string, string> = {
  ECONNREFUSED: "connection refused",
  ECONNRESET: "connection reset",
  ENOTFOUND: "no such host",
  EAI_AGAIN: "name lookup failed",
  EHOSTUNREACH: "host unreachable",
  ENETUNREACH: "network unreachable",
  ETIMEDOUT: "timed out",
  UND_ERR_CONNECT_TIMEOUT: "timed out connecting",
  UND_ERR_HEADERS_TIMEOUT: "timed out waiting for an answer",
  UND_ERR_SOCKET: "connection closed",
};

/** The cause of a failed request in a few words, or undefined when the error is not a network failure. */
export function networkCause(error: unknown): string | undefined {
  for (let e = error as { code?: unknown; cause?: unknown; name?: unknown } | undefined; e; e = e.cause as typeof e) {
    if (typeof e.code === "string" && e.code in CAUSES) return CAUSES[e.code];
    if (e.name === "TimeoutError") return "timed out";
  }
  return undefined;
}

/** The error a command prints when `url` could not be reached, e.g. "cannot reach http://127.0.0.1:4199 (connection refused)". */
export class UnreachableError extends Error {
  constructor(
    readonly url: string,
    error: unknown,
  ) {
    super(`cannot reach ${url} (${networkCause(error) ?? (error as Error)?.message ?? String(error)})`, { cause: error });
  }
}
