// What the faults do to one response body as its connection forwards it: a drop closes the
// connection at its byte, a stall holds the body back (for a while, or until the client gives
// up), a corrupt flips bits of its byte, a throttle paces the body. Offsets count payload bytes
// only (never chunked framing); a fault counted in the image's bytes (`of: "image"`) is moved to
// the body's offset of that byte.
import type { Fault, FaultOf } from "./faults.ts";
import type { FaultAction } from "./proxy-log.ts";

/** A throttled body is sent in slices of 1/50 s, so the rate holds over short bodies too. */
const THROTTLE_SLICES_PER_SECOND = 50;

type Stop = FaultOf<"drop"> | FaultOf<"stall">;

/** What the faults need of the connection they act on. */
export interface FaultedConnection {
  /** true once the connection is being torn down */
  isClosing(): boolean;
  toClient(bytes: Buffer): Promise<void>;
  /** resolves when the client's socket has taken every byte handed to it so far */
  flushed(): Promise<void>;
  /** waits ms (forever when undefined), or until the connection is torn down */
  wait(ms: number | undefined): Promise<void>;
  /** a stalled connection is closed when the client gives up on it; `silent`: nothing more comes until it does */
  setStalled(stalled: boolean, silent?: boolean): void;
  drop(reason: string): void;
  logFault(fault: Fault, action: FaultAction, detail: string): void;
}

/** The faults of one response body, applied as its payload is forwarded. */
export class BodyFaults {
  /** payload bytes handed to the client */
  forwarded = 0;
  private readonly stops: Stop[];
  private readonly corrupts: Array<FaultOf<"corrupt">>;
  private readonly bytesPerSecond: number | null;
  /** throttle: when the bytes sent so far have been paid for (performance.now() ms) */
  private due = 0;

  /** `firstImageByte`: the image byte the body starts at (a 206's Content-Range; 0 otherwise) */
  constructor(
    faults: Fault[],
    private readonly connection: FaultedConnection,
    firstImageByte = 0,
  ) {
    const throttles = faults.filter((f): f is FaultOf<"throttle"> => f.kind === "throttle");
    const inBody = <F extends Stop | FaultOf<"corrupt">>(fault: F): F | null => {
      if (fault.of !== "image") return fault;
      if (fault.atByte < firstImageByte) {
        connection.logFault(fault, "not reached", `the body starts at image byte ${firstImageByte}`);
        return null;
      }
      return { ...fault, atByte: fault.atByte - firstImageByte };
    };
    this.stops = faults
      .filter((f): f is Stop => f.kind === "drop" || f.kind === "stall")
      .flatMap((f) => inBody(f) ?? [])
      .sort((a, b) => a.atByte - b.atByte);
    this.corrupts = faults.filter((f): f is FaultOf<"corrupt"> => f.kind === "corrupt").flatMap((f) => inBody(f) ?? []);
    this.bytesPerSecond = throttles.length > 0 ? Math.min(...throttles.map((f) => f.bytesPerSecond)) : null;
    for (const fault of throttles) connection.logFault(fault, "throttled", `body at ${this.bytesPerSecond} bytes/s`);
  }

  /** Forwards payload bytes, applying the faults; false once the connection is gone. */
  async forward(payload: Buffer): Promise<boolean> {
    let rest = payload;
    while (rest.length > 0) {
      const stop = this.stops[0];
      if (stop?.atByte === this.forwarded) {
        if (!(await this.applyStop(stop))) return false;
        continue;
      }
      const n = stop ? Math.min(rest.length, stop.atByte - this.forwarded) : rest.length;
      await this.send(this.corrupt(rest.subarray(0, n)));
      if (this.connection.isClosing()) return false;
      this.forwarded += n;
      rest = rest.subarray(n);
    }
    return true;
  }

  /** At the body's end: a stop at its very end still applies (a stall there holds back the close); the faults left were not reached. False once the connection is gone. */
  async finish(): Promise<boolean> {
    while (this.stops[0]?.atByte === this.forwarded) if (!(await this.applyStop(this.stops[0]))) return false;
    const body = `the body ended at ${this.forwarded} bytes`;
    for (const fault of this.stops) this.connection.logFault(fault, "not reached", body);
    for (const fault of this.corrupts) if (fault.atByte >= this.forwarded) this.connection.logFault(fault, "not reached", body);
    return true;
  }

  private async applyStop(stop: Stop): Promise<boolean> {
    this.stops.shift();
    const { connection } = this;
    if (stop.kind === "drop") {
      await connection.flushed(); // the client must get exactly atByte bytes before the close
      connection.logFault(stop, "dropped", `connection destroyed after ${this.forwarded} body bytes`);
      connection.drop(`drop fault after ${this.forwarded} body bytes`);
      return false;
    }
    connection.logFault(stop, "stalled", stop.forMs === undefined ? "until the client gives up" : `for ${stop.forMs} ms`);
    connection.setStalled(true, stop.forMs === undefined);
    await connection.wait(stop.forMs);
    connection.setStalled(false);
    if (connection.isClosing()) return false;
    connection.logFault(stop, "resumed", `after ${stop.forMs} ms`);
    return true;
  }

  private corrupt(bytes: Buffer): Buffer {
    let out = bytes;
    for (const fault of this.corrupts) {
      const index = fault.atByte - this.forwarded;
      if (index < 0 || index >= bytes.length) continue;
      if (out === bytes) out = Buffer.from(bytes);
      const before = out[index]!;
      out[index] = before ^ (fault.xor ?? 0x01);
      this.connection.logFault(fault, "corrupted", `0x${hex(before)} -> 0x${hex(out[index]!)}`);
    }
    return out;
  }

  private async send(bytes: Buffer): Promise<void> {
    const rate = this.bytesPerSecond;
    if (rate === null) return this.connection.toClient(bytes);
    const slice = Math.max(1, Math.floor(rate / THROTTLE_SLICES_PER_SECOND));
    for (let at = 0; at < bytes.length && !this.connection.isClosing(); at += slice) {
      const part = bytes.subarray(at, at + slice);
      const now = performance.now();
      this.due = Math.max(this.due, now) + (part.length / rate) * 1000;
      await this.connection.wait(this.due - now);
      await this.connection.toClient(part);
    }
  }
}

const hex = (byte: number) => byte.toString(16).padStart(2, "0");
