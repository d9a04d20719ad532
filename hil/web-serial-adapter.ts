// A Web Serial `SerialPort` lookalike over a node-serialport binding, so that esptool-js, which
// is written for the browser, can drive a serial port from Node (shared
// notes/esptool-js-in-node.md). It has the members esptool-js's Transport touches and no more:
// getInfo, open, readable, writable, setSignals, setBaudRate, close.
import type { OpenOptions } from "@serialport/stream";
import { SerialPort } from "serialport";

// node-serialport's binding interfaces, named through @serialport/stream (a dependency of ours)
// rather than @serialport/bindings-interface (only a dependency of theirs).
export type BindingInterface = OpenOptions["binding"];
type BindingPortInterface = Awaited<ReturnType<BindingInterface["open"]>>;

export interface WebSerialAdapterOptions {
  path: string;
  /** Default: node-serialport's binding for this OS; tests pass a binding-mock one. */
  binding?: BindingInterface;
  /**
   * What `getInfo()` reports. esptool-js picks its reset from these (0x303a:0x1001 is the
   * USB-JTAG reset); they are given by hand because listing ports spawns udevadm, which
   * containers often lack.
   */
  usbVendorId?: number;
  usbProductId?: number;
  /** A pty has no modem lines (set() fails with ENOTTY): carry on without them. */
  ignoreSignalErrors?: boolean;
}

export interface SerialSignals {
  dataTerminalReady?: boolean;
  requestToSend?: boolean;
  break?: boolean;
}

export type OpenFailure = "no_such_port" | "port_busy" | "permission_denied" | "other";

/** The port could not be opened; `reason` says why in a word, the message in a sentence. */
export class SerialPortOpenError extends Error {
  override name = "SerialPortOpenError";
  constructor(
    readonly path: string,
    readonly reason: OpenFailure,
    cause: unknown,
  ) {
    super(`cannot open serial port ${path}: ${OPEN_FAILURE_TEXT[reason] ?? String((cause as Error).message ?? cause)}`, { cause });
  }
}

const OPEN_FAILURE_TEXT: Partial<Record<OpenFailure, string>> = {
  no_such_port: "no such port (is the badge plugged in?)",
  port_busy: "the port is busy (another program has it open)",
  permission_denied: "permission denied (is this user in the dialout group?)",
};

// The native binding's errors carry no code, only the OS's words.
function openFailureOf(error: unknown): OpenFailure {
  const message = String((error as Error)?.message ?? error);
  if (/No such file or directory|does not exist/i.test(message)) return "no_such_port";
  if (/Cannot lock port|Resource busy|is locked/i.test(message)) return "port_busy";
  if (/Permission denied/i.test(message)) return "permission_denied";
  return "other";
}

const READ_CHUNK_BYTES = 64 * 1024;

export class WebSerialAdapter {
  readonly path: string;
  readable: ReadableStream<Uint8Array> | null = null;
  writable: WritableStream<Uint8Array> | null = null;
  /** Signal changes a pty refused and `ignoreSignalErrors` let pass: none means every reset reached the chip. */
  ignoredSignalErrors = 0;
  #binding: BindingInterface;
  #info: { usbVendorId?: number; usbProductId?: number };
  #ignoreSignalErrors: boolean;
  #port: BindingPortInterface | null = null;
  // The OS raises DTR and RTS when a tty opens. node-serialport's set() writes every line and
  // fills the ones left out with true, while Web Serial callers send one line at a time, so
  // the current state is kept here and both lines always go out together.
  #signals = { dtr: true, rts: true, brk: false };

  constructor(options: WebSerialAdapterOptions) {
    if (typeof options.path !== "string" || options.path === "") throw new TypeError("path must name a serial port, e.g. /dev/ttyUSB0");
    this.path = options.path;
    this.#binding = options.binding ?? SerialPort.binding;
    this.#info = { usbVendorId: options.usbVendorId, usbProductId: options.usbProductId };
    this.#ignoreSignalErrors = options.ignoreSignalErrors ?? false;
  }

  get isOpen(): boolean {
    return this.#port !== null;
  }

  getInfo(): { usbVendorId?: number; usbProductId?: number } {
    return { ...this.#info };
  }

  /** Only the baud rate is used: ESP32 download mode is always 8N1 without flow control. */
  async open(options: { baudRate: number }): Promise<void> {
    if (this.#port) throw new Error(`serial port ${this.path} is already open`);
    let port: BindingPortInterface;
    try {
      port = await this.#binding.open({ path: this.path, baudRate: options.baudRate, lock: true });
    } catch (error) {
      throw new SerialPortOpenError(this.path, openFailureOf(error), error);
    }
    this.#port = port;
    this.#signals = { dtr: true, rts: true, brk: false };
    this.readable = readableOf(port);
    this.writable = new WritableStream<Uint8Array>({
      write: (chunk) => port.write(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)),
    });
  }

  async setSignals(signals: SerialSignals): Promise<void> {
    const port = this.#openPort();
    const next = {
      dtr: signals.dataTerminalReady ?? this.#signals.dtr,
      rts: signals.requestToSend ?? this.#signals.rts,
      brk: signals.break ?? this.#signals.brk,
    };
    try {
      await port.set(next);
    } catch (error) {
      if (!this.#ignoreSignalErrors) throw new Error(`cannot set DTR/RTS on ${this.path}: ${(error as Error).message}`, { cause: error });
      this.ignoredSignalErrors++;
    }
    this.#signals = next;
  }

  /** Changes the baud rate without closing the port, which esptool-js prefers to a reopen. */
  async setBaudRate(baudRate: number): Promise<void> {
    await this.#openPort().update({ baudRate });
  }

  async close(): Promise<void> {
    const port = this.#openPort();
    this.#port = null;
    this.readable = null;
    this.writable = null;
    await port.close();
  }

  #openPort(): BindingPortInterface {
    if (!this.#port) throw new Error(`serial port ${this.path} is not open`);
    return this.#port;
  }
}

/**
 * Reads are pulled, one chunk ahead, so bytes nobody asks for wait in the OS. Closing the port
 * fails the pending read with `canceled`, which ends the stream; a reader that cancels first
 * (esptool-js does, before it closes) has already ended it.
 */
function readableOf(port: BindingPortInterface): ReadableStream<Uint8Array> {
  const buffer = Buffer.allocUnsafe(READ_CHUNK_BYTES);
  let cancelled = false;
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { bytesRead } = await port.read(buffer, 0, READ_CHUNK_BYTES);
        if (!cancelled) controller.enqueue(new Uint8Array(buffer.subarray(0, bytesRead)));
      } catch (error) {
        if (cancelled) return;
        if ((error as { canceled?: boolean }).canceled) controller.close();
        else controller.error(error);
      }
    },
    cancel() {
      cancelled = true;
    },
  });
}
