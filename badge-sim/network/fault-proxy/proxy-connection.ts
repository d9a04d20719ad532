// One client connection through the fault proxy: the client's bytes go to the server unchanged
// (read only to learn each request's path), the server's come back through the faults their
// request drew (fault-actions.ts), and a status fault is answered by the proxy itself
// (injected-answer.ts). HTTP/1.x answers in request order, so the exchanges wait in a queue.
import net from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { BodyFaults } from "./fault-actions.ts";
import { parseContentRange } from "../../../firmware/index.ts";
import { rewriteRange } from "./range-faults.ts";
import type { Fault, FaultOf } from "./faults.ts";
import { contentLength, headEnd, HttpFramingError, LengthFramer, parseHead, requestFramer, responseFramer, type BodyFramer, type BodyPart } from "./http-framing.ts";
import { injectedAnswer } from "./injected-answer.ts";
import { mitmAnswer } from "./mitm-answer.ts";
import type { ClosedBy, FaultAction, ProxyEvent } from "./proxy-log.ts";

const MAX_HEAD_BYTES = 64 * 1024;

export interface Exchange {
  request: number;
  method: string;
  /** the request target in origin form (path and query) */
  path: string;
  faults: Fault[];
  /** set when the proxy answers this request itself: without the server (status), or from its answer (mitm) */
  answer: FaultOf<"status"> | FaultOf<"mitm"> | undefined;
  /** the request as the client sent it, kept when a mitm answers it */
  request_bytes: Buffer[];
  requestDone: boolean;
}

export interface ProxyContext {
  upstream: { host: string; port: number };
  record(event: ProxyEvent): void;
  openExchange(connection: number, method: string, path: string, version: string): Exchange;
  /** a connection fell silent until its client gives up (a stall without an end) */
  silenced(): void;
}

interface ResponseBody {
  exchange: Exchange;
  framer: BodyFramer;
  faults: BodyFaults;
}

export class ProxyConnection {
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
  /** stalled with nothing more to come until the client gives up */
  private silent = false;
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

  /** While the connection is silent until its client gives up: the client's port and the bytes sent it before. */
  silence(): { clientPort: number; bytesSent: number } | null {
    return this.silent && !this.closing ? { clientPort: this.client.remotePort ?? 0, bytesSent: this.bytesToClient } : null;
  }

  /** Ends the connection once; `end` flushes what was forwarded first, `destroy` does not wait. */
  shutdown(by: ClosedBy, reason: string, how: "end" | "destroy"): void {
    if (this.closing) return;
    this.closing = true;
    const at = Date.now();
    if (this.response) this.record({ type: "body", at, connection: this.id, request: this.response.exchange.request, bytes: this.response.faults.forwarded, complete: false });
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

  private logFault(request: number, fault: Fault, action: FaultAction, detail: string, atByte: number | null = "atByte" in fault ? (fault.atByte ?? null) : null): void {
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
        else if (exchange.answer.kind === "mitm") exchange.request_bytes.push(...parts.map((part) => part.bytes));
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
      else await this.toServer(this.withRangeFaults(exchange, headBytes));
      if (exchange.answer?.kind === "mitm") exchange.request_bytes.push(Buffer.from(headBytes));
      if (this.requestBody.framer.done) this.endRequest(exchange);
    }
  }

  /** The request head as the range faults leave it, each one that acted logged. */
  private withRangeFaults(exchange: Exchange, headBytes: Buffer): Buffer {
    const rangeFaults = exchange.faults.filter((fault): fault is FaultOf<"range"> => fault.kind === "range");
    const { head, applied } = rewriteRange(headBytes, rangeFaults);
    for (const { fault, detail } of applied) this.logFault(exchange.request, fault, "rewrote", detail, null);
    return head;
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
    const faults = new BodyFaults(exchange.faults, {
      isClosing: () => this.closing,
      toClient: (bytes) => this.toClient(bytes),
      flushed: () => this.lastClientWrite,
      wait: (ms) => this.wait(ms),
      setStalled: (stalled, silent = false) => {
        this.stalled = stalled;
        this.silent = stalled && silent;
        if (this.silent) this.context.silenced();
      },
      drop: (reason) => this.shutdown("proxy", reason, "destroy"),
      logFault: (fault, action, detail) => this.logFault(exchange.request, fault, action, detail),
    }, status === 206 ? (parseContentRange(head.headers.get("content-range")?.[0])?.first ?? 0) : 0);
    const response: ResponseBody = { exchange, framer, faults };
    this.response = response;
    if (framer.done) await this.endResponse(response);
  }

  /** Forwards one part of a body, the payload through its faults; false once the connection is gone. */
  private async forwardBodyPart(response: ResponseBody, part: BodyPart): Promise<boolean> {
    if (part.payload) return response.faults.forward(part.bytes);
    await this.toClient(part.bytes);
    return !this.closing;
  }

  private async endResponse(response: ResponseBody): Promise<void> {
    if (!(await response.faults.finish())) return;
    this.record({ type: "body", at: Date.now(), connection: this.id, request: response.exchange.request, bytes: response.faults.forwarded, complete: true });
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
    if (exchange.answer.kind === "mitm") {
      this.fromServer(() => this.answerAsMitm(exchange, exchange.answer as FaultOf<"mitm">));
      return;
    }
    const { code } = exchange.answer;
    const { bytes, bodyBytes } = injectedAnswer(exchange.path, exchange.answer);
    this.logFault(exchange.request, exchange.answer, "answered", `${code} without contacting the server`, null);
    this.sendOwnAnswer(exchange, code, bytes, bodyBytes);
    this.shutdown("proxy", `answered ${code} for a status fault`, "end");
  }

  /** Answers a check from the server's answer, rewritten as the mitm fault says. */
  private async answerAsMitm(exchange: Exchange, fault: FaultOf<"mitm">): Promise<void> {
    const { bytes, bodyBytes, status } = await mitmAnswer(this.context.upstream, Buffer.concat(exchange.request_bytes), fault);
    if (this.closing) return;
    this.logFault(exchange.request, fault, "answered", `the server's answer rewritten by a man in the middle (${Object.keys(fault.lines ?? {}).join("") || "no"} lines replaced${fault.atByte === undefined ? "" : `, M of the image tampered at byte ${fault.atByte}`})`, null);
    this.sendOwnAnswer(exchange, status, bytes, bodyBytes);
    this.shutdown("proxy", "answered as a man in the middle", "end");
  }

  private sendOwnAnswer(exchange: Exchange, code: number, bytes: Buffer, bodyBytes: number): void {
    this.record({ type: "response", at: Date.now(), connection: this.id, request: exchange.request, status: code, contentLength: bodyBytes, from: "proxy" });
    void this.toClient(bytes);
    this.record({ type: "body", at: Date.now(), connection: this.id, request: exchange.request, bytes: bodyBytes, complete: true });
    this.exchanges.shift();
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

const messageOf = (error: unknown) => (error instanceof Error ? error.message : String(error));
