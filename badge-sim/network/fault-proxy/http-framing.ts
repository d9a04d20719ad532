// Just enough HTTP/1.x to find message boundaries: where a head ends, what it says about the
// body's length, and framers that split a byte stream into a body's parts and what follows it.
// Nothing here re-frames: the parts are slices of the bytes received.

const MAX_CHUNK_LINE_BYTES = 4 * 1024;

export class HttpFramingError extends Error {
  override name = "HttpFramingError";
}

export interface Head {
  startLine: string;
  headers: Map<string, string[]>;
}

/** The offset just after the blank line ending a head, or -1 while it is incomplete. */
export function headEnd(buffer: Buffer): number {
  const crlf = buffer.indexOf("\r\n\r\n");
  const lf = buffer.indexOf("\n\n");
  if (crlf === -1) return lf === -1 ? -1 : lf + 2;
  return lf !== -1 && lf < crlf ? lf + 2 : crlf + 4;
}

export function parseHead(bytes: Buffer): Head {
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

export function contentLength(head: Head): number | null {
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

export interface BodyPart {
  bytes: Buffer;
  /** false for chunked framing (sizes, CRLFs, trailers), which faults never count or touch */
  payload: boolean;
}

export interface BodyFramer {
  readonly done: boolean;
  /** the body ends when the sender closes the connection */
  readonly untilClose: boolean;
  /** Splits data into this body's parts and the bytes that follow the body. */
  take(data: Buffer): { parts: BodyPart[]; rest: Buffer };
}

export class LengthFramer implements BodyFramer {
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

export function requestFramer(head: Head): BodyFramer {
  if (transferCodings(head)?.at(-1) === "chunked") return new ChunkedFramer();
  return new LengthFramer(contentLength(head) ?? 0);
}

export function responseFramer(method: string, status: number, head: Head): BodyFramer {
  if (method === "HEAD" || status < 200 || status === 204 || status === 304) return new LengthFramer(0);
  const codings = transferCodings(head);
  if (codings) return codings.at(-1) === "chunked" ? new ChunkedFramer() : new CloseFramer();
  const length = contentLength(head);
  return length === null ? new CloseFramer() : new LengthFramer(length);
}
