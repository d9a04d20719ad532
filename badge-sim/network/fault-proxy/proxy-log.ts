// The proxy's log: what each connection and request did, in the order the proxy saw it.
import type { Fault } from "./faults.ts";

export type ClosedBy = "client" | "server" | "proxy";
export type FaultAction = "answered" | "throttled" | "corrupted" | "stalled" | "resumed" | "dropped" | "rewrote" | "not reached";

/** `connection` and `request` number connections and requests from 1 in the order the proxy saw them. */
export type ProxyEvent =
  | { type: "request"; at: number; connection: number; request: number; method: string; path: string; version: string; faults: Fault[] }
  | { type: "response"; at: number; connection: number; request: number; status: number; contentLength: number | null; from: "server" | "proxy" }
  | { type: "fault"; at: number; connection: number; request: number; kind: Fault["kind"]; atByte: number | null; action: FaultAction; detail: string }
  /** a response body ended: `bytes` of it were forwarded, `complete` when its framing ended */
  | { type: "body"; at: number; connection: number; request: number; bytes: number; complete: boolean }
  | { type: "close"; at: number; connection: number; by: ClosedBy; reason: string; bytesToClient: number; bytesToServer: number };
