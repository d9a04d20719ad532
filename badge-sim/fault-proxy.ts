// A fault-injecting HTTP proxy between a badge (simulated, or a real one pointed at it) and the
// server: it cuts, stalls, corrupts, refuses or slows the responses of chosen requests, which
// is where download faults happen in the field (notes/ota-field-lessons.md). It works on the TCP
// byte stream and reads only enough HTTP to find each request's path and each response body's
// end, so what it forwards is byte for byte what it received: the badge's HTTP/1.0 download
// keeps its Content-Length framing and its close after the body; nothing is re-framed.
import http from "node:http";
import net from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { z } from "zod";
import { formatResponse } from "../firmware/index.ts";

export const DOWNLOAD_PATH = "/api/badge/ota/download";
const BADGE_PATH_PREFIX = "/api/badge/";
/** The server's `S` after a failure on its side (server/README.md, "The badge protocol"). */
const SERVER_TROUBLE_RECHECK_S = 300;
const MAX_HEAD_BYTES = 64 * 1024;
const MAX_CHUNK_LINE_BYTES = 4 * 1024;
/** A throttled body is sent in slices of 1/50 s, so the rate holds over short bodies too. */
const THROTTLE_SLICES_PER_SECOND = 50;

const byteOffset = z.int().nonnegative();
const scope = {
  /** A string is the exact path (the query is ignored); a RegExp is tested against path and query. */
  path: z.union([z.string().startsWith("/"), z.instanceof(RegExp)]).optional(),
  /** Apply from the nth matching request on (1 = the first), counted from when the fault was set. */
  nth: z.int().min(1).optional(),
  /** Apply to this many matching requests; default 1 when `nth` is given, otherwise all of them. */
  times: z.int().min(1).optional(),
};

export const faultSchema = z.discriminatedUnion("kind", [
  z.strictObject({ ...scope, kind: z.literal("drop"), atByte: byteOffset }),
  z.strictObject({ ...scope, kind: z.literal("stall"), atByte: byteOffset, forMs: z.int().nonnegative().optional() }),
  z.strictObject({ ...scope, kind: z.literal("corrupt"), atByte: byteOffset, xor: z.int().min(1).max(255).optional() }),
  z.strictObject({ ...scope, kind: z.literal("status"), code: z.int().min(200).max(599), body: z.string().optional() }),
  z.strictObject({ ...scope, kind: z.literal("throttle"), bytesPerSecond: z.number().min(1) }),
]);

export type Fault = z.infer<typeof faultSchema>;
type FaultOf<K extends Fault["kind"]> = Extract<Fault, { kind: K }>;

const optionsSchema = z.strictObject({
  target: z.string().refine(isOriginUrl, "expected http://HOST:PORT with no path, such as http://127.0.0.1:8080"),
  faults: z.array(faultSchema).optional(),
  host: z.string().min(1).optional(),
  port: z.int().min(0).max(65535).optional(),
});

export type FaultProxyOptions = z.input<typeof optionsSchema>;

/** Thrown for options or faults the proxy cannot use; the message names every bad field. */
export class FaultProxyConfigError extends TypeError {
  override name = "FaultProxyConfigError";
}

export type ClosedBy = "client" | "server" | "proxy";
export type FaultAction = "answered" | "throttled" | "corrupted" | "stalled" | "resumed" | "dropped" | "not reached";

/** `connection` and `request` number connections and requests from 1 in the order the proxy saw them. */
export type ProxyEvent =
  | { type: "request"; at: number; connection: number; request: number; method: string; path: string; version: string; faults: Fault[] }
  | { type: "response"; at: number; connection: number; request: number; status: number; contentLength: number | null; from: "server" | "proxy" }
  | { type: "fault"; at: number; connection: number; request: number; kind: Fault["kind"]; atByte: number | null; action: FaultAction; detail: string }
  /** a response body ended: `bytes` of it were forwarded, `complete` when its framing ended */
  | { type: "body"; at: number; connection: number; request: number; bytes: number; complete: boolean }
  | { type: "close"; at: number; connection: number; by: ClosedBy; reason: string; bytesToClient: number; bytesToServer: number };

export interface FaultProxy {
  url: string;
  port: number;
  /** Replaces the faults (validated first; on error the old ones stay) and restarts their `nth` counts. */
  setFaults(faults: Fault[]): void;
  log: ProxyEvent[];
  /** Stops listening and destroys every open connection. */
  close(): Promise<void>;
}

export function parseFaults(input: unknown): Fault[] {
  const result = z.array(faultSchema).safeParse(input);
  if (!result.success) throw new FaultProxyConfigError(describeIssues(result.error, input, ["faults"]));
  return result.data;
}

export async function startFaultProxy(options: FaultProxyOptions): Promise<FaultProxy> {
  const result = optionsSchema.safeParse(options);
  if (!result.success) throw new FaultProxyConfigError(describeIssues(result.error, options, []));
  const { target, faults = [], host = "127.0.0.1", port = 0 } = result.data;
  const targetUrl = new URL(target);
  const upstream = { host: targetUrl.hostname.replace(/^\[|\]$/g, ""), port: Number(targetUrl.port || 80) };

  const log: ProxyEvent[] = [];
  const book = new FaultBook(faults);
  const connections = new Set<ProxyConnection>();
  let connectionCount = 0;
  let requestCount = 0;
  const context: ProxyContext = {
    upstream,
    record: (event) => log.push(event),
    openExchange: (connection, method, path, version) => {
      const faults = book.select(path);
      const request = ++requestCount;
      log.push({ type: "request", at: Date.now(), connection, request, method, path, version, faults });
      return { request, method, path: originForm(path), faults, answer: faults.find((f): f is FaultOf<"status"> => f.kind === "status"), requestDone: false };
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
    log,
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

function describeIssues(error: z.ZodError, input: unknown, root: Array<string | number>): string {
  const described = error.issues.flatMap((issue) => {
    const path = [...root, ...issue.path.map((key) => (typeof key === "symbol" ? String(key) : key))];
    if (issue.code === "unrecognized_keys") return issue.keys.map((key) => `${formatPath([...path, key])}: unknown field`);
    const value = valueAt(input, issue.path);
    const got = value === undefined || typeof value === "object" ? "" : ` (got ${JSON.stringify(value)})`;
    return [`${formatPath(path)}: ${issue.message}${got}`];
  });
  return `invalid fault proxy ${root.length > 0 ? "faults" : "options"}: ${described.join("; ")}`;
}

function formatPath(path: Array<string | number>): string {
  const text = path.map((key) => (typeof key === "number" ? `[${key}]` : `.${key}`)).join("");
  return text.startsWith(".") ? text.slice(1) : text || "(the value)";
}

function valueAt(input: unknown, path: PropertyKey[]): unknown {
  let value = input;
  for (const key of path) {
    if (value === null || typeof value !== "object") return undefined;
    value = (value as Record<PropertyKey, unknown>)[key];
  }
  return value;
}

/**
 * Which faults a request gets: each fault counts the requests that match its path. The proxy
 * consults it per request; the scenario report replays the same count to place its fault marks.
 */
export class FaultBook {
  private slots: Array<{ fault: Fault; matched: number }> = [];

  constructor(faults: Fault[]) {
    this.replace(faults);
  }

  replace(faults: Fault[]): void {
    this.slots = faults.map((fault) => ({ fault, matched: 0 }));
  }

  select(target: string): Fault[] {
    const selected: Fault[] = [];
    for (const slot of this.slots) {
      if (!pathMatches(slot.fault.path ?? DOWNLOAD_PATH, target)) continue;
      slot.matched += 1;
      const first = slot.fault.nth ?? 1;
      const times = slot.fault.times ?? (slot.fault.nth === undefined ? Infinity : 1);
      if (slot.matched >= first && slot.matched < first + times) selected.push(slot.fault);
    }
    return selected;
  }
}

function pathMatches(pattern: string | RegExp, target: string): boolean {
  const path = originForm(target);
  if (typeof pattern !== "string") {
    pattern.lastIndex = 0;
    return pattern.test(path);
  }
  const query = path.indexOf("?");
  return (query === -1 ? path : path.slice(0, query)) === pattern;
}

/** A client that knows it talks to a proxy sends the absolute form, http://host/path?query. */
function originForm(target: string): string {
  if (!/^https?:\/\//i.test(target) || !URL.canParse(target)) return target;
  const url = new URL(target);
  return `${url.pathname}${url.search}`;
}

// --- just enough HTTP/1.x to find message boundaries ---------------------------------------

class HttpFramingError extends Error {
  override name = "HttpFramingError";
}

interface Head {
  startLine: string;
  headers: Map<string, string[]>;
}

/** The offset just after the blank line ending a head, or -1 while it is incomplete. */
function headEnd(buffer: Buffer): number {
  const crlf = buffer.indexOf("\r\n\r\n");
  const lf = buffer.indexOf("\n\n");
  if (crlf === -1) return lf === -1 ? -1 : lf + 2;
  return lf !== -1 && lf < crlf ? lf + 2 : crlf + 4;
}

function parseHead(bytes: Buffer): Head {
  const [startLine = "", ...lines] = bytes.toString("latin1").split(/\r?\n/);
  const headers = new Map<string, string[]>();
  for (const line of lines) {
    const colon = line.indexOf(":");
    if (colon <= 0) continue;
    const name = line.slice(0, colon).trim().toLowerCase();
    headers.set(name, [...(headers.get(name) ?? []), line.slice(colon + 1).trim()]);
  }
  return { startLine, headers };
}

function contentLength(head: Head): number | null {
  const values = (head.headers.get("content-length") ?? []).flatMap((v) => v.split(",")).map((v) => v.trim());
  if (values.length === 0) return null;
  if (!values.every((v) => /^[0-9]{1,15}$/.test(v) && v === values[0])) {
    throw new HttpFramingError(`unusable Content-Length ${JSON.stringify(values.join(", "))}`);
  }
  return Number(values[0]);
}

function transferCodings(head: Head): string[] | null {
  const values = head.headers.get("transfer-encoding");
  return values ? values.flatMap((v) => v.split(",")).map((v) => v.trim().toLowerCase()) : null;
}

interface BodyPart {
  bytes: Buffer;
  /** false for chunked framing (sizes, CRLFs, trailers), which faults never count or touch */
  payload: boolean;
}

interface BodyFramer {
  readonly done: boolean;
  /** the body ends when the sender closes the connection */
  readonly untilClose: boolean;
  /** Splits data into this body's parts and the bytes that follow the body. */
  take(data: Buffer): { parts: BodyPart[]; rest: Buffer };
}

class LengthFramer implements BodyFramer {
  readonly untilClose = false;
  constructor(private remaining: number) {}
  get done() {
    return this.remaining === 0;
  }
  take(data: Buffer) {
    const n = Math.min(this.remaining, data.length);
    this.remaining -= n;
    return { parts: n > 0 ? [{ bytes: data.subarray(0, n), payload: true }] : [], rest: data.subarray(n) };
  }
}

class CloseFramer implements BodyFramer {
  readonly untilClose = true;
  readonly done = false;
  take(data: Buffer) {
    return { parts: [{ bytes: data, payload: true }], rest: data.subarray(data.length) };
  }
}

class ChunkedFramer implements BodyFramer {
  readonly untilClose = false;
  private state: "size" | "data" | "data-end" | "trailer" | "done" = "size";
  private line = "";
  private remaining = 0;

  get done() {
    return this.state === "done";
  }

  take(data: Buffer) {
    const parts: BodyPart[] = [];
    let at = 0;
    while (at < data.length && this.state !== "done") {
      if (this.state === "data") {
        const n = Math.min(this.remaining, data.length - at);
        parts.push({ bytes: data.subarray(at, at + n), payload: true });
        at += n;
        this.remaining -= n;
        if (this.remaining === 0) this.state = "data-end";
        continue;
      }
      const newline = data.indexOf(0x0a, at);
      const end = newline === -1 ? data.length : newline + 1;
      parts.push({ bytes: data.subarray(at, end), payload: false });
      this.line += data.toString("latin1", at, end);
      at = end;
      if (this.line.length > MAX_CHUNK_LINE_BYTES) throw new HttpFramingError("a chunked-body line is longer than 4 KiB");
      if (newline === -1) break;
      const line = this.line.replace(/\r?\n$/, "");
      this.line = "";
      if (this.state === "size") {
        const size = line.split(";")[0]!.trim();
        if (!/^[0-9a-f]{1,12}$/i.test(size)) throw new HttpFramingError(`bad chunk size line ${JSON.stringify(line.slice(0, 40))}`);
        this.remaining = parseInt(size, 16);
        this.state = this.remaining === 0 ? "trailer" : "data";
      } else if (this.state === "data-end") {
        this.state = "size";
      } else if (line === "") {
        this.state = "done";
      }
    }
    return { parts, rest: data.subarray(at) };
  }
}

function requestFramer(head: Head): BodyFramer {
  if (transferCodings(head)?.at(-1) === "chunked") return new ChunkedFramer();
  return new LengthFramer(contentLength(head) ?? 0);
}

function responseFramer(method: string, status: number, head: Head): BodyFramer {
  if (method === "HEAD" || status < 200 || status === 204 || status === 304) return new LengthFramer(0);
  const codings = transferCodings(head);
  if (codings) return codings.at(-1) === "chunked" ? new ChunkedFramer() : new CloseFramer();
  const length = contentLength(head);
  return length === null ? new CloseFramer() : new LengthFramer(length);
}

// --- one client connection -----------------------------------------------------------------

interface Exchange {
  request: number;
  method: string;
  /** the request target in origin form (path and query) */
  path: string;
  faults: Fault[];
  /** set when the proxy answers this request itself, without the server */
  answer: FaultOf<"status"> | undefined;
  requestDone: boolean;
}

interface ProxyContext {
  upstream: { host: string; port: number };
  record(event: ProxyEvent): void;
  openExchange(connection: number, method: string, path: string, version: string): Exchange;
}

type Stop = FaultOf<"drop"> | FaultOf<"stall">;

interface ResponseBody {
  exchange: Exchange;
  framer: BodyFramer;
  /** payload bytes handed to the client */
  forwarded: number;
  stops: Stop[];
  corrupts: Array<FaultOf<"corrupt">>;
  bytesPerSecond: number | null;
  /** throttle: when the bytes sent so far have been paid for (performance.now() ms) */
  due: number;
}

class ProxyConnection {
  private upstream: net.Socket | null = null;
  private upstreamError: Error | null = null;
  /** requests whose response has not ended yet, in order: HTTP/1.x answers in request order */
  private readonly exchanges: Exchange[] = [];
  private requestHead = Buffer.alloc(0);
  private requestBody: { exchange: Exchange; framer: BodyFramer } | null = null;
  private responseHead = Buffer.alloc(0);
  private response: ResponseBody | null = null;
  /** after a 101 Switching Protocols both directions are piped as they are */
  private raw = false;
  /** a request the proxy answers itself was read: the connection closes after that answer */
  private answering = false;
  private stalled = false;
  private closing = false;
  private readonly teardown = new AbortController();
  private clientWork: Promise<void> = Promise.resolve();
  private serverWork: Promise<void> = Promise.resolve();
  private lastClientWrite: Promise<void> = Promise.resolve();
  private bytesToClient = 0;
  private bytesToServer = 0;

  constructor(
    private readonly id: number,
    private readonly client: net.Socket,
    private readonly context: ProxyContext,
  ) {
    client.on("data", (chunk: Buffer) => {
      client.pause();
      this.fromClient(async () => {
        await this.onClientData(chunk);
        if (!client.destroyed) client.resume();
      });
    });
    client.on("end", () => this.fromClient(() => this.onClientEnd()));
    client.on("error", () => {});
    client.on("close", (hadError) => this.shutdown("client", hadError ? "the client connection failed" : "the client closed the connection", "destroy"));
  }

  /** Ends the connection once; `end` flushes what was forwarded first, `destroy` does not wait. */
  shutdown(by: ClosedBy, reason: string, how: "end" | "destroy"): void {
    if (this.closing) return;
    this.closing = true;
    const at = Date.now();
    if (this.response) this.record({ type: "body", at, connection: this.id, request: this.response.exchange.request, bytes: this.response.forwarded, complete: false });
    this.record({ type: "close", at, connection: this.id, by, reason, bytesToClient: this.bytesToClient, bytesToServer: this.bytesToServer });
    this.teardown.abort();
    this.upstream?.destroy();
    if (how === "end") this.client.destroySoon();
    else this.client.destroy();
  }

  // Each direction is handled one event at a time, in order; a direction's socket is paused
  // while its data is handled, so a stall or a throttle holds back the sender too.
  private fromClient(work: () => Promise<void> | void): void {
    this.clientWork = this.clientWork.then(work).catch((error: unknown) => this.shutdown("proxy", `unreadable request: ${messageOf(error)}`, "destroy"));
  }

  private fromServer(work: () => Promise<void> | void): void {
    this.serverWork = this.serverWork.then(work).catch((error: unknown) => this.shutdown("proxy", `unreadable response: ${messageOf(error)}`, "destroy"));
  }

  private record(event: ProxyEvent): void {
    this.context.record(event);
  }

  private logFault(request: number, fault: Fault, action: FaultAction, detail: string, atByte: number | null = "atByte" in fault ? fault.atByte : null): void {
    this.record({ type: "fault", at: Date.now(), connection: this.id, request, kind: fault.kind, atByte, action, detail });
  }

  // --- client to server: forwarded unchanged, parsed to learn the paths -------------------

  private async onClientData(chunk: Buffer): Promise<void> {
    let data = chunk;
    while (data.length > 0 && !this.closing) {
      if (this.answering && !this.requestBody) return;
      if (this.raw) {
        await this.toServer(data);
        return;
      }
      if (this.requestBody) {
        const { exchange, framer } = this.requestBody;
        const { parts, rest } = framer.take(data);
        if (!exchange.answer) for (const part of parts) await this.toServer(part.bytes);
        data = rest;
        if (framer.done) this.endRequest(exchange);
        continue;
      }
      this.requestHead = Buffer.concat([this.requestHead, data]);
      const end = headEnd(this.requestHead);
      if (end === -1) {
        if (this.requestHead.length > MAX_HEAD_BYTES) throw new HttpFramingError("request head larger than 64 KiB");
        return;
      }
      const headBytes = this.requestHead.subarray(0, end);
      data = this.requestHead.subarray(end);
      this.requestHead = Buffer.alloc(0);
      const head = parseHead(headBytes);
      const line = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+) (\S+) HTTP\/([0-9]\.[0-9])$/.exec(head.startLine);
      if (!line) throw new HttpFramingError(`bad request line ${JSON.stringify(head.startLine.slice(0, 80))}`);
      const exchange = this.context.openExchange(this.id, line[1]!, line[2]!, line[3]!);
      this.exchanges.push(exchange);
      this.requestBody = { exchange, framer: requestFramer(head) };
      if (exchange.answer) this.answering = true;
      else await this.toServer(headBytes);
      if (this.requestBody.framer.done) this.endRequest(exchange);
    }
  }

  private endRequest(exchange: Exchange): void {
    this.requestBody = null;
    exchange.requestDone = true;
    this.answerIfDue();
  }

  private onClientEnd(): void {
    // A client that gives up on a stalled or idle connection closes it; one that only
    // half-closes after its request still gets the answer, as it would from the server.
    if (this.stalled || this.exchanges.length === 0 || !this.upstream) {
      this.shutdown("client", "the client closed the connection", "destroy");
    } else {
      this.upstream.end();
    }
  }

  private async toServer(bytes: Buffer): Promise<void> {
    if (bytes.length === 0 || this.closing) return;
    const upstream = this.upstream ?? this.connectUpstream();
    this.bytesToServer += bytes.length;
    if (!upstream.write(bytes)) await this.drained(upstream);
  }

  private connectUpstream(): net.Socket {
    const upstream = net.connect({ ...this.context.upstream, allowHalfOpen: true });
    this.upstream = upstream;
    upstream.on("data", (chunk: Buffer) => {
      upstream.pause();
      this.fromServer(async () => {
        await this.onServerData(chunk);
        if (!upstream.destroyed) upstream.resume();
      });
    });
    upstream.on("end", () => this.fromServer(() => this.onServerEnd()));
    upstream.on("error", (error) => {
      this.upstreamError ??= error;
    });
    upstream.on("close", () => this.fromServer(() => this.onServerEnd()));
    return upstream;
  }

  // --- server to client: where the faults happen ------------------------------------------

  private async onServerData(chunk: Buffer): Promise<void> {
    let data = chunk;
    while (data.length > 0 && !this.closing) {
      if (this.raw) {
        await this.toClient(data);
        return;
      }
      if (this.response) {
        const response = this.response;
        const { parts, rest } = response.framer.take(data);
        for (const part of parts) if (!(await this.forwardBodyPart(response, part))) return;
        data = rest;
        if (response.framer.done) await this.endResponse(response);
        continue;
      }
      this.responseHead = Buffer.concat([this.responseHead, data]);
      const end = headEnd(this.responseHead);
      if (end === -1) {
        if (this.responseHead.length > MAX_HEAD_BYTES) throw new HttpFramingError("response head larger than 64 KiB");
        return;
      }
      const headBytes = this.responseHead.subarray(0, end);
      data = this.responseHead.subarray(end);
      this.responseHead = Buffer.alloc(0);
      await this.startResponse(headBytes);
    }
  }

  private async startResponse(headBytes: Buffer): Promise<void> {
    const head = parseHead(headBytes);
    const line = /^HTTP\/[0-9]\.[0-9] ([0-9]{3})(?: .*)?$/.exec(head.startLine);
    if (!line) throw new HttpFramingError(`bad status line ${JSON.stringify(head.startLine.slice(0, 80))}`);
    const exchange = this.exchanges[0];
    if (!exchange) throw new HttpFramingError("the server answered a request that was not sent");
    const status = Number(line[1]);
    const framer = responseFramer(exchange.method, status, head);
    this.record({ type: "response", at: Date.now(), connection: this.id, request: exchange.request, status, contentLength: framer instanceof LengthFramer ? contentLength(head) : null, from: "server" });
    await this.toClient(headBytes);
    if (status === 101) this.raw = true;
    if (status < 200) return; // an interim answer: the final one follows
    const throttles = exchange.faults.filter((f): f is FaultOf<"throttle"> => f.kind === "throttle");
    const response: ResponseBody = {
      exchange,
      framer,
      forwarded: 0,
      stops: exchange.faults.filter((f): f is Stop => f.kind === "drop" || f.kind === "stall").sort((a, b) => a.atByte - b.atByte),
      corrupts: exchange.faults.filter((f): f is FaultOf<"corrupt"> => f.kind === "corrupt"),
      bytesPerSecond: throttles.length > 0 ? Math.min(...throttles.map((f) => f.bytesPerSecond)) : null,
      due: 0,
    };
    this.response = response;
    for (const fault of throttles) this.logFault(exchange.request, fault, "throttled", `body at ${response.bytesPerSecond} bytes/s`);
    if (framer.done) await this.endResponse(response);
  }

  /** Forwards one part of a body, applying the faults; false once the connection is gone. */
  private async forwardBodyPart(response: ResponseBody, part: BodyPart): Promise<boolean> {
    if (!part.payload) {
      await this.toClient(part.bytes);
      return !this.closing;
    }
    let rest = part.bytes;
    while (rest.length > 0) {
      const stop = response.stops[0];
      if (stop?.atByte === response.forwarded) {
        if (!(await this.applyStop(response, stop))) return false;
        continue;
      }
      const n = stop ? Math.min(rest.length, stop.atByte - response.forwarded) : rest.length;
      await this.sendPayload(response, this.corrupt(response, rest.subarray(0, n)));
      if (this.closing) return false;
      response.forwarded += n;
      rest = rest.subarray(n);
    }
    return true;
  }

  private async applyStop(response: ResponseBody, stop: Stop): Promise<boolean> {
    response.stops.shift();
    const { request } = response.exchange;
    if (stop.kind === "drop") {
      await this.lastClientWrite; // the client must get exactly atByte bytes before the close
      this.logFault(request, stop, "dropped", `connection destroyed after ${response.forwarded} body bytes`);
      this.shutdown("proxy", `drop fault after ${response.forwarded} body bytes`, "destroy");
      return false;
    }
    this.logFault(request, stop, "stalled", stop.forMs === undefined ? "until the client gives up" : `for ${stop.forMs} ms`);
    this.stalled = true;
    await this.wait(stop.forMs);
    this.stalled = false;
    if (this.closing) return false;
    this.logFault(request, stop, "resumed", `after ${stop.forMs} ms`);
    return true;
  }

  private corrupt(response: ResponseBody, bytes: Buffer): Buffer {
    let out = bytes;
    for (const fault of response.corrupts) {
      const index = fault.atByte - response.forwarded;
      if (index < 0 || index >= bytes.length) continue;
      if (out === bytes) out = Buffer.from(bytes);
      const before = out[index]!;
      out[index] = before ^ (fault.xor ?? 0x01);
      this.logFault(response.exchange.request, fault, "corrupted", `0x${hex(before)} -> 0x${hex(out[index]!)}`);
    }
    return out;
  }

  private async sendPayload(response: ResponseBody, bytes: Buffer): Promise<void> {
    const rate = response.bytesPerSecond;
    if (rate === null) return this.toClient(bytes);
    const slice = Math.max(1, Math.floor(rate / THROTTLE_SLICES_PER_SECOND));
    for (let at = 0; at < bytes.length && !this.closing; at += slice) {
      const part = bytes.subarray(at, at + slice);
      const now = performance.now();
      response.due = Math.max(response.due, now) + (part.length / rate) * 1000;
      await this.wait(response.due - now);
      await this.toClient(part);
    }
  }

  private async endResponse(response: ResponseBody): Promise<void> {
    const { request } = response.exchange;
    // A stop at the body's very end still applies: a stall there holds back the close.
    while (response.stops[0]?.atByte === response.forwarded) if (!(await this.applyStop(response, response.stops[0]))) return;
    const body = `the body ended at ${response.forwarded} bytes`;
    for (const fault of response.stops) this.logFault(request, fault, "not reached", body);
    for (const fault of response.corrupts) if (fault.atByte >= response.forwarded) this.logFault(request, fault, "not reached", body);
    this.record({ type: "body", at: Date.now(), connection: this.id, request, bytes: response.forwarded, complete: true });
    this.response = null;
    this.exchanges.shift();
    this.answerIfDue();
  }

  private async onServerEnd(): Promise<void> {
    if (this.closing) return;
    if (this.response?.framer.untilClose) await this.endResponse(this.response);
    const reason = this.upstreamError ? `the server connection failed: ${this.upstreamError.message}` : "the server closed the connection";
    this.shutdown("server", reason, "end");
  }

  /** Answers a status fault once every earlier response on this connection has ended. */
  private answerIfDue(): void {
    const exchange = this.exchanges[0];
    if (!exchange?.answer || !exchange.requestDone || this.closing) return;
    const { code, body: given } = exchange.answer;
    const body = Buffer.from(given ?? injectedBody(exchange.path, code));
    const reason = http.STATUS_CODES[code] ?? "Injected";
    const head = [
      `HTTP/1.1 ${code} ${reason}`,
      `Content-Type: text/plain; charset=utf-8`,
      `Content-Length: ${body.length}`,
      "Cache-Control: no-store",
      "Connection: close",
      "",
      "",
    ].join("\r\n");
    this.logFault(exchange.request, exchange.answer, "answered", `${code} without contacting the server`, null);
    this.record({ type: "response", at: Date.now(), connection: this.id, request: exchange.request, status: code, contentLength: body.length, from: "proxy" });
    void this.toClient(Buffer.concat([Buffer.from(head, "latin1"), body]));
    this.record({ type: "body", at: Date.now(), connection: this.id, request: exchange.request, bytes: body.length, complete: true });
    this.exchanges.shift();
    this.shutdown("proxy", `answered ${code} for a status fault`, "end");
  }

  private async toClient(bytes: Buffer): Promise<void> {
    if (bytes.length === 0 || this.client.destroyed) return;
    this.bytesToClient += bytes.length;
    this.lastClientWrite = new Promise((resolve) => this.client.write(bytes, () => resolve()));
    if (this.client.writableNeedDrain) await this.drained(this.client);
  }

  private async drained(socket: net.Socket): Promise<void> {
    const { signal } = this.teardown;
    await new Promise<void>((resolve) => {
      const done = () => {
        socket.off("drain", done);
        signal.removeEventListener("abort", done);
        resolve();
      };
      socket.on("drain", done);
      signal.addEventListener("abort", done);
    });
  }

  /** Waits ms (forever when undefined), or until the connection is torn down. */
  private async wait(ms: number | undefined): Promise<void> {
    const { signal } = this.teardown;
    if (signal.aborted) return;
    if (ms === undefined) {
      await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
      return;
    }
    await sleep(Math.max(0, ms), undefined, { signal }).catch(() => {});
  }
}

/** What the proxy says for a status fault: the server's own text format on the badge endpoints. */
function injectedBody(path: string, code: number): string {
  if (path.startsWith(BADGE_PATH_PREFIX)) {
    return formatResponse([
      { letter: "S", value: String(SERVER_TROUBLE_RECHECK_S) },
      { letter: "X", value: "server_error injected by the fault proxy" },
    ]);
  }
  return `${code} injected by the fault proxy\n`;
}

const hex = (byte: number) => byte.toString(16).padStart(2, "0");
const messageOf = (error: unknown) => (error instanceof Error ? error.message : String(error));
