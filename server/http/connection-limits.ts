// How long node:http waits for a client, and how many connections one process holds. Node's
// defaults suit a server behind a proxy that already sheds slow clients: a request head may take
// 60 s, a whole request 300 s, and both are enforced by a sweep every 30 s, so a slow header got
// its 408 at about 65 s, and the connections are not counted. Exposed to the Internet (badges on
// school Wi-Fi talk to this server directly), each slow connection holds a socket and its buffers.
//
// Chosen for the slowest client that must still be served: a badge on a poor Wi-Fi link,
// 10-30 kB/s in the field (notes/ota-field-lessons.md, item 8); measured through the fault proxy's
// throttle (badge-sim/network/fault-proxy/) at 1 kB/s, a tenth of the poorest field figure, a badge's
// largest request (a sync, MAX_REQUEST_BYTES = 16 KiB, sent at 1 kB/s) took 18.2 s from its
// first byte to the end of its answer (server/README.md, "Security").

export interface ConnectionLimits {
  /** the request head (request line and headers) must have arrived within this, from its first byte */
  headersTimeoutMs: number;
  /** the whole request, body included, must have arrived within this */
  requestTimeoutMs: number;
  /** an idle kept-alive connection is closed after this */
  keepAliveTimeoutMs: number;
  /** a connection on which no byte moved either way for this long is closed (a client that stopped reading an answer) */
  idleTimeoutMs: number;
  /** connections open at once in one process; past it a new connection is closed at once */
  maxConnections: number;
}

export const CONNECTION_LIMITS: ConnectionLimits = {
  // A badge's head is about 200 bytes, one packet; 20 s leaves room for TCP's retransmission
  // backoff (1, 2, 4, 8 s) on a lossy link.
  headersTimeoutMs: 20_000,
  // 16 KiB at 1 kB/s is 16 s; /v1 bodies (64 KiB) and the tool endpoint's (1 MiB) come from
  // integrators' servers, 1 MiB at 30 kB/s is 35 s.
  requestTimeoutMs: 60_000,
  // Node's default: an integrator's next request within 5 s reuses the connection; badges speak
  // HTTP/1.0 and close after each answer.
  keepAliveTimeoutMs: 5_000,
  // A throttled download moves bytes every fraction of a second; a minute of silence is a peer gone.
  idleTimeoutMs: 60_000,
  // Twice a fleet of a thousand badges pressing Check at once (server/README.md, group commit),
  // with each connection's buffers a few tens of kilobytes; well under the usual open-file limit.
  maxConnections: 2_048,
};

/**
 * How often node checks the head and request timeouts. Its default (30 s) let a timeout run up
 * to 30 s late; the check walks the open connections, a few microseconds for thousands.
 */
export const TIMEOUT_CHECK_INTERVAL_MS = 1_000;
