// A fault-injecting HTTP proxy between a badge (simulated, or a real one pointed at it) and the
// server: it cuts, stalls, corrupts, refuses or slows the responses of chosen requests, which
// is where download faults happen in the field (notes/ota-field-lessons.md). It works on the TCP
// byte stream and reads only enough HTTP to find each request's path and each response body's
// end, so what it forwards is byte for byte what it received: the badge's HTTP/1.0 download
// keeps its Content-Length framing and its close after the body; nothing is re-framed.
//
// This file: the options, the listening socket, the connections it holds and the log they write
// to. Each connection (proxy-connection.ts) forwards its bytes and applies the faults the book
// (fault-book.ts) picked for each of its requests.
import net from "node:net";
import { z } from "zod";
import { FaultBook, originForm } from "./fault-book.ts";
import { configError, faultSchema, parseFaults, type Fault, type FaultOf } from "./faults.ts";
import { ProxyConnection, type ProxyContext } from "./proxy-connection.ts";
import type { ProxyEvent } from "./proxy-log.ts";
import type { SilentPeers } from "../badge-client.ts";

const optionsSchema = z.strictObject({
  target: z.string().refine(isOriginUrl, "expected http://HOST:PORT with no path, such as http://127.0.0.1:8080"),
  faults: z.array(faultSchema).optional(),
  host: z.string().min(1).optional(),
  port: z.int().min(0).max(65535).optional(),
});

export type FaultProxyOptions = z.input<typeof optionsSchema>;

export interface FaultProxy extends SilentPeers {
  url: string;
  port: number;
  /** Replaces the faults (validated first; on error the old ones stay) and restarts their `nth` counts. */
  setFaults(faults: Fault[]): void;
  /** Adds faults (validated first) beside the ones set, their `nth` counted from now: the rig's hold at a power cut (hil/target-strategies.ts). */
  addFaults(faults: Fault[]): void;
  log: ProxyEvent[];
  /** Stops listening and destroys every open connection. */
  close(): Promise<void>;
}

export async function startFaultProxy(options: FaultProxyOptions): Promise<FaultProxy> {
  const result = optionsSchema.safeParse(options);
  if (!result.success) throw configError(result.error, options, []);
  const { target, faults = [], host = "127.0.0.1", port = 0 } = result.data;
  const targetUrl = new URL(target);
  const upstream = { host: targetUrl.hostname.replace(/^\[|\]$/g, ""), port: Number(targetUrl.port || 80) };

  const log: ProxyEvent[] = [];
  const book = new FaultBook(faults);
  const connections = new Set<ProxyConnection>();
  let connectionCount = 0;
  let requestCount = 0;
  const silenceListeners = new Set<() => void>();
  const context: ProxyContext = {
    silenced: () => {
      for (const listener of silenceListeners) listener();
    },
    upstream,
    record: (event) => log.push(event),
    openExchange: (connection, method, path, version) => {
      const faults = book.select(path);
      const request = ++requestCount;
      log.push({ type: "request", at: Date.now(), connection, request, method, path, version, faults });
      return { request, method, path: originForm(path), faults, answer: faults.find((f): f is FaultOf<"status"> | FaultOf<"mitm"> => f.kind === "status" || f.kind === "mitm"), request_bytes: [], requestDone: false };
    },
  };

  const server = net.createServer({ allowHalfOpen: true }, (socket) => {
    const connection = new ProxyConnection(++connectionCount, socket, context);
    connections.add(connection);
    socket.on("close", () => connections.delete(connection));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const bound = (server.address() as net.AddressInfo).port;
  return {
    url: `http://${host.includes(":") ? `[${host}]` : host}:${bound}`,
    port: bound,
    setFaults: (next) => book.replace(parseFaults(next)),
    addFaults: (more) => book.add(parseFaults(more)),
    log,
    silentConnections: () => [...connections].flatMap((connection) => connection.silence() ?? []),
    onSilence(listener) {
      silenceListeners.add(listener);
      return () => silenceListeners.delete(listener);
    },
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const connection of connections) connection.shutdown("proxy", "the proxy was closed", "destroy");
      await closed;
    },
  };
}

function isOriginUrl(text: string): boolean {
  if (!URL.canParse(text)) return false;
  const url = new URL(text);
  return url.protocol === "http:" && url.pathname === "/" && url.search === "" && url.username === "";
}
