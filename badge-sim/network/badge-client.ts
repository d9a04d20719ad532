// The badge's side of the badge endpoints (server/README.md, "The badge protocol"), spoken the
// way the firmware speaks it: HTTP/1.0 on a plain TCP socket, one request per connection, so a
// download has no chunked framing and ends where Content-Length says (or where the link died).
// The client only reports what happened on the wire; what to do about it is the machine's call.
//
// The base URL is the only address it knows: a fault-injecting proxy can sit there instead of
// the server. Paths from the server (the `P` line) are resolved against its origin.
//
// The stall timeout counts silence: the time the badge waits with no byte coming. On the wall
// clock, a real peer going silent on a real socket is found only by waiting. Given the badge's
// simulated clock (`clock`), the same timeout also runs there: it is armed while the client waits
// for bytes and disarmed while it handles them, so it fires when the simulation moves time on
// with the client still waiting, which it does only when it knows the peer is silent (a fault
// proxy holding the connection: SilentPeers). The wall timeout stays as the backstop for a
// real peer that went silent.
import net from "node:net";
import {
  BADGE_PATHS,
  formatRequest,
  formatStatusPairs,
  formatTap,
  parseResponse,
  parseSignatureLine,
  SIGNATURE_ANNOUNCEMENT,
  SIGNATURE_LETTER,
  type BadgeStatus,
  type ReleaseSignature,
  type ResponseLine,
} from "../../firmware/index.ts";

/** ESP-IDF's esp_http_client waits 5 s for data by default. */
export const DEFAULT_STALL_TIMEOUT_MS = 5_000;
/** A check or sync answer is a few short lines; anything bigger is not one. */
const MAX_ANSWER_BYTES = 64 * 1024;
const MAX_HEAD_BYTES = 16 * 1024;

export interface Offer {
  version: string;
  display: string;
  size: number;
  md5: string;
  path: string;
  notes: string[];
  /** the `G` line, when the answer had one (only a badge that announced `sig=ed25519` is sent it) */
  signature?: ReleaseSignature;
}

/** `recheckAfterS` is the answer's `S` line, or null when none was readable. */
export type CheckAnswer =
  | { kind: "offer"; offer: Offer; recheckAfterS: number | null }
  | { kind: "current"; latest: string; recheckAfterS: number | null }
  | { kind: "refused"; code: string; message: string; recheckAfterS: number | null }
  | { kind: "unauthorized" }
  | { kind: "failed"; message: string; recheckAfterS: number | null };

export interface TapAnswer {
  n: number;
  accepted: boolean;
  reason: string | null;
}

export type SyncAnswer =
  | { kind: "synced"; serverUnixS: number; echoedReport: string | null; taps: TapAnswer[]; recheckAfterS: number | null }
  | { kind: "unauthorized" }
  | { kind: "failed"; message: string; recheckAfterS: number | null };

export interface SyncPayload {
  /** the value of the `ota=` line, e.g. `err|1.5.0|download cut at 51% (983 of 1920 KiB)` */
  report: string | null;
  taps: Array<{ n: number; uid: string; unixS: number }>;
}

/**
 * How an exchange ended: `complete` (Content-Length bytes arrived, or the server closed a body
 * without one), `cut` (the connection ended early), `stalled` (no byte for the stall timeout),
 * `unreachable` (no connection), `aborted` (the caller gave up).
 */
export type Ending = "complete" | "cut" | "stalled" | "unreachable" | "aborted";

export interface DownloadResult {
  /** null when no status line arrived */
  status: number | null;
  contentLength: number | null;
  /** body bytes handed to onBody (of a 200 or a 206) */
  bytes: number;
  /** a 503's Retry-After (with its `S` line, the larger): seconds the server asked the badge to wait; null without Retry-After (a 503 from trouble, not from the cap) */
  retryAfterS: number | null;
  ending: Ending;
  /** for an answer other than 200: its `X` line (`code message`), when it had one */
  refusal: string | null;
  /** the socket error, if one ended the exchange */
  error: string | null;
}

/** The response head as the download handlers see it. */
export interface DownloadHead {
  status: number;
  contentLength: number | null;
  /** the raw Content-Range header, when there was one */
  contentRange: string | null;
}

export interface DownloadHandlers {
  onHead?: (head: DownloadHead) => void;
  onBody: (chunk: Uint8Array) => void;
}

/** A resume: `Range: bytes=<from>-` and `If-Range: <etag>`. */
export interface RangeRequest {
  from: number;
  etag: string;
}

export interface BadgeClientOptions {
  /** where the badge endpoints are: the server, or a proxy in front of it */
  baseUrl: string;
  stallTimeoutMs?: number;
  /**
   * The silence the wall clock waits for before it calls a stall (default: `stallTimeoutMs`). A
   * simulation whose peers say when they hold a connection silent (`SilentPeers`) finds its
   * stalls on the simulated clock and can keep this backstop long, so that a busy machine's slow
   * answer is never taken for a stall (the fault sweep).
   */
  wallStallTimeoutMs?: number;
  /** the badge's simulated clock: the stall timeout runs on it too */
  clock?: StallClock;
}

/** The timers the stall timeout runs on besides the wall (VirtualClock has this shape). */
export interface StallClock {
  setTimeout(fire: () => void, ms: number): number;
  clearTimeout(id: number): void;
}

/** A connection of this client that is open: its local port and the bytes it has read. */
export interface OpenConnection {
  localPort: number;
  bytesRead: number;
}

/**
 * Peers known to be silent: connections held open with nothing more to come until the client
 * gives up (the fault proxy's stalls). `bytesSent` is what the peer sent before falling silent.
 */
export interface SilentPeers {
  silentConnections(): Array<{ clientPort: number; bytesSent: number }>;
  /** hears each connection falling silent; returns the unsubscribe */
  onSilence(listener: () => void): () => void;
}

/** A check or sync answer read as lines, or what stood in the way. */
type PostAnswer =
  | { kind: "lines"; lines: ResponseLine[]; recheckAfterS: number | null }
  | { kind: "unauthorized" }
  | { kind: "failed"; message: string; recheckAfterS: number | null };

interface Exchange {
  status: number | null;
  contentLength: number | null;
  contentRange: string | null;
  retryAfter: string | null;
  bytes: number;
  ending: Ending;
  error: string | null;
}

export class BadgeClient {
  readonly origin: URL;
  readonly stallTimeoutMs: number;
  readonly wallStallTimeoutMs: number;
  readonly #clock: StallClock | undefined;
  readonly #open = new Set<net.Socket>();

  constructor(options: BadgeClientOptions) {
    let url: URL;
    try {
      url = new URL(options.baseUrl);
    } catch {
      throw new TypeError(`baseUrl ${JSON.stringify(options.baseUrl)} is not a URL`);
    }
    if (url.protocol !== "http:") throw new TypeError(`baseUrl ${options.baseUrl} must be http:// (the badge speaks plain HTTP/1.0)`);
    const stall = options.stallTimeoutMs ?? DEFAULT_STALL_TIMEOUT_MS;
    if (!(Number.isFinite(stall) && stall > 0)) throw new TypeError(`stallTimeoutMs ${stall} must be a positive number of milliseconds`);
    const wallStall = options.wallStallTimeoutMs ?? stall;
    if (!(Number.isFinite(wallStall) && wallStall >= stall)) throw new TypeError(`wallStallTimeoutMs ${wallStall} must be a number of milliseconds no less than stallTimeoutMs ${stall}`);
    this.origin = new URL(url.origin);
    this.stallTimeoutMs = stall;
    this.wallStallTimeoutMs = wallStall;
    this.#clock = options.clock;
  }

  /** The connections open now, for telling whether each waits on a silent peer. */
  openConnections(): OpenConnection[] {
    return [...this.#open].map((socket) => ({ localPort: socket.localPort ?? 0, bytesRead: socket.bytesRead }));
  }

  /** `verifiesSignatures`: the badge holds release keys, so it announces `sig=ed25519`. */
  async check(token: string, status: BadgeStatus, signal?: AbortSignal, verifiesSignatures = false): Promise<CheckAnswer> {
    const pairs = formatStatusPairs(status);
    if (verifiesSignatures) pairs.push(SIGNATURE_ANNOUNCEMENT);
    const answer = await this.#post(BADGE_PATHS.check, token, pairs, signal);
    if (answer.kind !== "lines") return answer;
    const { lines, recheckAfterS } = answer;
    const value = (letter: string) => lines.find((line) => line.letter === letter)?.value;
    const refusal = value("X");
    if (refusal !== undefined) return { kind: "refused", ...splitRefusal(refusal), recheckAfterS };
    const latest = value("N");
    if (latest !== undefined) return { kind: "current", latest, recheckAfterS };
    if (value("U") === undefined) return { kind: "failed", message: "the answer has no U, N or X line", recheckAfterS };
    const offer = readOffer(lines);
    return typeof offer === "string" ? { kind: "failed", message: offer, recheckAfterS } : { kind: "offer", offer, recheckAfterS };
  }

  async sync(token: string, status: BadgeStatus, payload: SyncPayload, signal?: AbortSignal): Promise<SyncAnswer> {
    const pairs = formatStatusPairs(status);
    if (payload.report !== null) pairs.push(["ota", payload.report]);
    for (const tap of payload.taps) pairs.push(["tap", formatTap(tap.n, tap.uid, tap.unixS)]);
    const answer = await this.#post(BADGE_PATHS.sync, token, pairs, signal);
    if (answer.kind !== "lines") return answer;
    const { lines, recheckAfterS } = answer;
    const time = lines.find((line) => line.letter === "T")?.value;
    if (time === undefined || !/^\d{1,12}$/.test(time)) return { kind: "failed", message: "the sync answer has no T line", recheckAfterS };
    const taps: TapAnswer[] = [];
    for (const { letter, value } of lines) {
      const match = /^(\d{1,9})(?: (.*))?$/.exec(value);
      if (letter === "A" && match) taps.push({ n: Number(match[1]), accepted: true, reason: null });
      if (letter === "R" && match) taps.push({ n: Number(match[1]), accepted: false, reason: match[2] ?? "" });
    }
    const echoedReport = lines.find((line) => line.letter === "O")?.value ?? null;
    return { kind: "synced", serverUnixS: Number(time), echoedReport, taps, recheckAfterS };
  }

  /**
   * GET `path`, with `Range` and `If-Range` when `range` is given: `onHead` hears the status,
   * Content-Length and Content-Range before any body byte, then every body byte of a 200 or a
   * 206 goes to `onBody` as it arrives. If either throws, the connection is closed and the error
   * is rethrown (a brownout stops the badge mid-write).
   */
  async download(token: string, path: string, handlers: DownloadHandlers, signal?: AbortSignal, range?: RangeRequest): Promise<DownloadResult> {
    let errorBody: Uint8Array[] | null = null;
    const isImage = (status: number) => status === 200 || status === 206;
    const headers = range ? [`Range: bytes=${range.from}-`, `If-Range: ${range.etag}`] : [];
    const exchange = await this.#exchange("GET", path, token, null, signal, {
      onHead: handlers.onHead && ((head) => handlers.onHead!(head)),
      onBody: (chunk, status) => {
        if (isImage(status)) handlers.onBody(chunk);
        else (errorBody ??= []).push(chunk);
      },
    }, headers);
    let refusal: string | null = null;
    let recheckAfterS: number | null = null;
    if (errorBody) {
      const parsed = parseResponse(Buffer.concat(errorBody).toString("utf8"));
      const value = (letter: string) => (parsed.ok ? parsed.lines.find((line) => line.letter === letter)?.value : undefined);
      refusal = value("X") ?? null;
      recheckAfterS = secondsOf(value("S"));
    }
    const retryAfter = secondsOf(exchange.retryAfter ?? undefined);
    const retryAfterS = exchange.status === 503 && retryAfter !== null ? Math.max(retryAfter, recheckAfterS ?? 0) : null;
    const { contentRange: _contentRange, retryAfter: _retryAfter, ...result } = exchange;
    return { ...result, bytes: exchange.status !== null && isImage(exchange.status) ? exchange.bytes : 0, refusal, retryAfterS };
  }

  async #post(
    path: string,
    token: string,
    pairs: Array<[string, string]>,
    signal: AbortSignal | undefined,
  ): Promise<PostAnswer> {
    const chunks: Buffer[] = [];
    let size = 0;
    const exchange = await this.#exchange("POST", path, token, formatRequest(pairs), signal, {
      onBody: (chunk) => {
        size += chunk.length;
        if (size > MAX_ANSWER_BYTES) throw new AnswerTooLarge();
        chunks.push(Buffer.from(chunk));
      },
    }).catch((error: unknown) => {
      if (error instanceof AnswerTooLarge) return null;
      throw error;
    });
    const failed = (message: string) => ({ kind: "failed" as const, message, recheckAfterS: null });
    if (exchange === null) return failed(`the answer is larger than ${MAX_ANSWER_BYTES} bytes`);
    if (exchange.ending !== "complete") return failed(describeEnding(exchange, this.stallTimeoutMs));
    if (exchange.status === 401) return { kind: "unauthorized" };
    const parsed = parseResponse(Buffer.concat(chunks).toString("utf8"));
    if (!parsed.ok) return failed(`unreadable answer (HTTP ${exchange.status}): ${parsed.message}`);
    const recheckAfterS = secondsOf(parsed.lines.find((line) => line.letter === "S")?.value);
    if (exchange.status !== 200) {
      const refusal = parsed.lines.find((line) => line.letter === "X")?.value ?? "";
      return { kind: "failed", message: `HTTP ${exchange.status} ${refusal}`.trim(), recheckAfterS };
    }
    return { kind: "lines", lines: parsed.lines, recheckAfterS };
  }

  /**
   * One HTTP/1.0 request on a fresh connection; the body goes to onBody as it arrives. Resolves
   * with how the exchange ended; rejects only with an error thrown by a handler.
   */
  #exchange(
    method: "GET" | "POST",
    path: string,
    token: string,
    body: string | null,
    signal: AbortSignal | undefined,
    handlers: { onHead?: (head: DownloadHead) => void; onBody: (chunk: Uint8Array, status: number) => void },
    extraHeaders: string[] = [],
  ): Promise<Exchange> {
    const target = new URL(path, this.origin);
    return new Promise((resolve, reject) => {
      const result: Exchange = { status: null, contentLength: null, contentRange: null, retryAfter: null, bytes: 0, ending: "cut", error: null };
      let head: Buffer | null = Buffer.alloc(0);
      let connected = false;
      let settled = false;
      const socket = net.connect({ host: target.hostname, port: Number(target.port || 80) });
      this.#open.add(socket);
      // the stall timeout on the simulated clock: armed while waiting for bytes, off while handling them
      const clock = this.#clock;
      let silence: number | null = null;
      const waitForBytes = (waiting: boolean) => {
        if (silence !== null) clock!.clearTimeout(silence);
        silence = clock && waiting && !settled ? clock.setTimeout(() => settle("stalled"), this.stallTimeoutMs) : null;
      };
      const finish = () => {
        settled = true;
        waitForBytes(false);
        this.#open.delete(socket);
        signal?.removeEventListener("abort", abort);
        socket.destroy();
      };
      const settle = (ending: Ending, error: string | null = null) => {
        if (settled) return;
        finish();
        resolve({ ...result, ending, error });
      };
      const abort = () => settle("aborted");
      if (signal?.aborted) return settle("aborted");
      signal?.addEventListener("abort", abort);
      socket.setTimeout(this.wallStallTimeoutMs, () => settle("stalled"));
      socket.on("connect", () => {
        connected = true;
        const lines = [`${method} ${target.pathname}${target.search} HTTP/1.0`, `Host: ${target.host}`, `Authorization: Bearer ${token}`, ...extraHeaders];
        if (body !== null) lines.push("Content-Type: text/plain", `Content-Length: ${Buffer.byteLength(body)}`);
        socket.write(`${lines.join("\r\n")}\r\n\r\n${body ?? ""}`);
        waitForBytes(true);
      });
      /** Runs a handler; false when it threw, and then the exchange is over. */
      const handled = (call: () => void) => {
        try {
          call();
          return true;
        } catch (error) {
          if (!settled) {
            finish();
            reject(error);
          }
          return false;
        }
      };
      const takeBody = (chunk: Buffer) => {
        const wanted = result.contentLength === null ? chunk.length : Math.min(chunk.length, result.contentLength - result.bytes);
        if (wanted > 0) {
          if (!handled(() => handlers.onBody(chunk.subarray(0, wanted), result.status!))) return;
          result.bytes += wanted;
        }
        if (result.contentLength !== null && result.bytes >= result.contentLength) settle("complete");
      };
      socket.on("data", (chunk: Buffer) => {
        if (settled) return;
        waitForBytes(false);
        onData(chunk);
        waitForBytes(true);
      });
      const onData = (chunk: Buffer) => {
        if (head === null) return takeBody(chunk);
        head = Buffer.concat([head, chunk]);
        const end = head.indexOf("\r\n\r\n");
        if (end === -1) {
          if (head.length > MAX_HEAD_BYTES) settle("cut", `response head longer than ${MAX_HEAD_BYTES} bytes`);
          return;
        }
        const [statusLine, ...headerLines] = head.subarray(0, end).toString("latin1").split("\r\n");
        const rest = head.subarray(end + 4);
        head = null;
        const status = /^HTTP\/1\.[01] (\d{3})/.exec(statusLine ?? "");
        if (!status) return settle("cut", `not an HTTP response: ${JSON.stringify(statusLine?.slice(0, 40))}`);
        result.status = Number(status[1]);
        for (const line of headerLines) {
          const length = /^content-length:\s*(\d+)\s*$/i.exec(line);
          if (length) result.contentLength = Number(length[1]);
          const header = /^(content-range|retry-after):\s*(.*)$/i.exec(line);
          if (header?.[1]!.toLowerCase() === "content-range") result.contentRange = header[2]!.trim();
          if (header?.[1]!.toLowerCase() === "retry-after") result.retryAfter = header[2]!.trim();
        }
        const seen: DownloadHead = { status: result.status, contentLength: result.contentLength, contentRange: result.contentRange };
        if (handlers.onHead && !handled(() => handlers.onHead!(seen))) return;
        takeBody(rest);
      };
      // HTTP/1.0 without Content-Length: the body ends where the server closes.
      socket.on("end", () => settle(head === null && result.contentLength === null ? "complete" : "cut"));
      socket.on("close", () => settle("cut"));
      socket.on("error", (error) => settle(connected ? "cut" : "unreachable", error.message));
    });
  }
}

class AnswerTooLarge extends Error {}

/** An `S` line or a Retry-After in seconds; null when it is not a plain number of seconds (a date, garbage). */
function secondsOf(value: string | undefined): number | null {
  return value !== undefined && /^\d{1,9}$/.test(value) ? Number(value) : null;
}

/** `battery_low battery 3.7 V is below ...` -> code and message. */
function splitRefusal(value: string): { code: string; message: string } {
  const space = value.indexOf(" ");
  return space === -1 ? { code: value, message: "" } : { code: value.slice(0, space), message: value.slice(space + 1) };
}

/** The offer lines, or a sentence saying what is missing. */
function readOffer(lines: ResponseLine[]): Offer | string {
  const value = (letter: string) => lines.find((line) => line.letter === letter)?.value;
  const version = value("U")!;
  const size = value("Z");
  const md5 = value("M");
  const path = value("P");
  if (size === undefined || !/^\d{1,10}$/.test(size)) return `offer of ${version} has no valid Z (size) line`;
  if (md5 === undefined || !/^[0-9a-f]{32}$/.test(md5)) return `offer of ${version} has no valid M (MD5) line`;
  if (path === undefined || !path.startsWith("/")) return `offer of ${version} has no valid P (path) line`;
  const notes = lines.filter((line) => line.letter === "L").map((line) => line.value);
  const offer: Offer = { version, display: value("B") ?? version, size: Number(size), md5, path, notes };
  const signatureLine = value(SIGNATURE_LETTER);
  if (signatureLine === undefined) return offer;
  const signature = parseSignatureLine(signatureLine);
  if (typeof signature === "string") return `offer of ${version} has no valid G (signature) line: ${signature}`;
  return { ...offer, signature };
}

function describeEnding(exchange: Exchange, stallTimeoutMs: number): string {
  switch (exchange.ending) {
    case "unreachable":
      return `server unreachable${exchange.error ? ` (${exchange.error})` : ""}`;
    case "stalled":
      return `no answer for ${stallTimeoutMs} ms`;
    case "aborted":
      return "request abandoned";
    default:
      return `answer cut after ${exchange.bytes} bytes`;
  }
}
