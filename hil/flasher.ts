// Flashing a badge over USB serial with esptool-js, unmodified, from Node: a Web Serial adapter
// over node-serialport carries it (web-serial-adapter.ts). The images go compressed through the
// flasher stub, each is checked by MD5, and the chip is reset into its app at the end. The
// workarounds for esptool-js 0.7.0's faults (shared notes/esptool-js-in-node.md) are marked.
import fs from "node:fs";
import { performance } from "node:perf_hooks";
import { ESPError, ESPLoader, Transport, type FlashSizeValues, type IEspLoaderTerminal } from "esptool-js";
import { inspectAppImage, md5Hex, OTA_SLOT_BYTES } from "../firmware/index.ts";
import { SerialPortOpenError, WebSerialAdapter } from "./web-serial-adapter.ts";

/** Where the app goes in the badge's partition table (arduino-esp32 min_spiffs: app0). */
export const APP_OFFSET = 0x10000;
export const SECTOR_BYTES = 0x1000;
export const DEFAULT_FLASH_BAUD_RATE = 921600;
const ROM_BAUD_RATE = 115200;
const ESP32_CHIP_ID = 0;
/**
 * EN low (RTS=1, DTR=0) for 100 ms, then released with IO0 high, so the chip boots from flash.
 * esptool-js's after("hard_reset") does not do this: it only drops RTS, which is already low (fault 2).
 */
const RESET_INTO_APP = "D0|R1|W100|R0";

export interface FlashImage {
  data: Uint8Array;
  address: number;
  /** What to call it in messages, e.g. its file name. */
  name?: string;
}

export interface FlashProgress {
  stage: "connecting" | "writing" | "verifying" | "resetting";
  /** The image being written or verified (its index in `images`), null before and after. */
  image: number | null;
  /** Bytes of all images written so far; within an image, estimated from the compressed bytes sent. */
  bytesDone: number;
  bytesTotal: number;
}

export interface FlashBadgeOptions {
  /** A serial port path; or `adapter`, already made (tests pass one over binding-mock). */
  port?: string;
  adapter?: WebSerialAdapter;
  images: FlashImage[];
  /** The rate the stub is switched to for the transfer (the ROM talks at 115200). Default 921600. */
  baudRate?: number;
  /** With `port`: go on when the port has no DTR/RTS (a pty). Resets then reach nothing. */
  ignoreSignalErrors?: boolean;
  onProgress?: (progress: FlashProgress) => void;
  /** esptool-js's own lines ("Chip is ESP32-D0WD-V3", "Writing at 0x10000...") go here, never to the console. */
  log?: (line: string) => void;
}

export interface FlashedImage {
  address: number;
  bytes: number;
  /** Of the bytes sent: the image, padded with 0xFF to a multiple of 4 bytes as esptool-js sends it. */
  md5: string;
  /** The flash's MD5 of the written range equals `md5`. */
  verified: boolean;
}

export interface FlashResult {
  port: string;
  chip: string;
  images: FlashedImage[];
  /** False when the port has no modem lines (a pty): the chip was left in the flasher stub. */
  resetIntoApp: boolean;
  timing: { connectMs: number; writeMs: number; resetMs: number; totalMs: number };
}

/** The images or their offsets are wrong; nothing was sent to the badge. */
export class FlashInputError extends Error {
  override name = "FlashInputError";
}

export type FlashErrorCode = "no_such_port" | "port_busy" | "port_error" | "no_answer" | "md5_mismatch" | "flash_too_small" | "device_error";

/** Flashing failed; the port has been released. */
export class FlashError extends Error {
  override name = "FlashError";
  constructor(
    readonly code: FlashErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

// ---------------------------------------------------------------------------------------------
// Arguments: FILE@OFFSET ...

const hex = (value: number) => `0x${value.toString(16)}`;
const nameOf = (image: FlashImage) => image.name ?? `the image at ${hex(image.address)}`;

/**
 * `FILE@OFFSET` arguments (offsets in 0x hex or decimal) read into images; a lone FILE is the
 * app, flashed at 0x10000. Throws FlashInputError naming the argument for anything wrong,
 * including what checkFlashImages refuses.
 */
export function parseFlashArgs(args: string[], readFile: (file: string) => Uint8Array = (file) => fs.readFileSync(file)): FlashImage[] {
  if (args.length === 0) throw new FlashInputError("name the images to flash: FILE@OFFSET ..., or just the app FILE (flashed at 0x10000)");
  const images = args.map((arg) => {
    const at = arg.lastIndexOf("@");
    if (at === -1 && args.length > 1) {
      throw new FlashInputError(`${arg} has no @OFFSET: with more than one file, give each its offset, e.g. bootloader.bin@0x1000 partitions.bin@0x8000 app.bin@0x10000`);
    }
    const file = at === -1 ? arg : arg.slice(0, at);
    if (file === "") throw new FlashInputError(`${arg} names no file before the @`);
    return { name: file, address: at === -1 ? APP_OFFSET : parseOffset(arg, arg.slice(at + 1)), data: readImage(file, readFile) };
  });
  checkFlashImages(images);
  return images;
}

function parseOffset(arg: string, text: string): number {
  if (/^0x[0-9a-f]+$/i.test(text)) return Number.parseInt(text.slice(2), 16);
  if (/^[0-9]+$/.test(text)) return Number.parseInt(text, 10);
  throw new FlashInputError(`${arg}: the offset ${JSON.stringify(text)} is not a number (write 0x10000 or 65536)`);
}

function readImage(file: string, readFile: (file: string) => Uint8Array): Uint8Array {
  try {
    return readFile(file);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const why = code === "ENOENT" ? "no such file" : code === "EISDIR" ? "it is a directory" : (code ?? (error as Error).message);
    throw new FlashInputError(`cannot read ${file}: ${why}`);
  }
}

/**
 * Refuses images that are empty, start off a 4 KiB sector (the flash erases whole sectors, so
 * a neighbour would lose bytes), overlap, or, at 0x10000, are not an ESP32 app image that fits
 * the app slot.
 */
export function checkFlashImages(images: FlashImage[]): void {
  if (images.length === 0) throw new FlashInputError("no images to flash");
  for (const image of images) {
    if (image.data.length === 0) throw new FlashInputError(`${nameOf(image)} is empty`);
    if (!Number.isInteger(image.address) || image.address < 0 || image.address % SECTOR_BYTES !== 0) {
      throw new FlashInputError(`${nameOf(image)} at ${hex(image.address)}: the offset must be a multiple of 0x1000 (the 4 KiB flash sector)`);
    }
  }
  const sorted = [...images].sort((a, b) => a.address - b.address);
  for (let i = 1; i < sorted.length; i++) {
    const before = sorted[i - 1]!;
    const after = sorted[i]!;
    const end = before.address + before.data.length;
    if (end > after.address) {
      throw new FlashInputError(`${nameOf(before)} (${hex(before.address)} to ${hex(end)}) overlaps ${nameOf(after)} at ${hex(after.address)}`);
    }
  }
  const app = images.find((image) => image.address === APP_OFFSET);
  if (!app) return;
  const inspection = inspectAppImage(app.data);
  if (inspection.problems.length > 0) {
    throw new FlashInputError(`${nameOf(app)} at ${hex(APP_OFFSET)} is not a valid ESP32 app image: ${inspection.problems.join("; ")}`);
  }
  if (inspection.chipId !== ESP32_CHIP_ID) {
    throw new FlashInputError(`${nameOf(app)} at ${hex(APP_OFFSET)} is built for chip id ${inspection.chipId}, not the ESP32 (0)`);
  }
  if (app.data.length > OTA_SLOT_BYTES) {
    throw new FlashInputError(`${nameOf(app)} is ${app.data.length} bytes, larger than the ${OTA_SLOT_BYTES}-byte app slot at ${hex(APP_OFFSET)}`);
  }
}

// ---------------------------------------------------------------------------------------------
// esptool-js, adapted

/** esptool-js's Transport prints its trace through console.log even with tracing off ("readLoop exited", fault 4). */
class QuietTransport extends Transport {
  override trace(): void {}
}

const WRITE_REG = 0x09;
const READ_REG = 0x0a;
const FLASH_DEFL_BEGIN = 0x10;
const FLASH_DEFL_DATA = 0x11;
const OPCODE_NAMES: Record<number, string> = {
  0x05: "MEM_BEGIN",
  0x06: "MEM_END",
  0x07: "MEM_DATA (stub upload)",
  0x08: "SYNC",
  0x09: "WRITE_REG",
  0x0a: "READ_REG",
  0x0f: "CHANGE_BAUDRATE",
  0x10: "FLASH_DEFL_BEGIN",
  0x11: "FLASH_DEFL_DATA",
  0x12: "FLASH_DEFL_END",
  0x13: "SPI_FLASH_MD5",
  0x14: "GET_SECURITY_INFO",
};

const u32 = (bytes: Uint8Array, at: number) => new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(at, true);

/** An ESPLoader that remembers what it last asked the chip and what the flash's MD5 was, so a failure can say where it stopped. */
class TrackedLoader extends ESPLoader {
  lastCommand: { op: number; data: Uint8Array } | null = null;
  deflateBlocks = 0;
  lastFlashMd5 = "";

  override async command(op: number | null = null, data = new Uint8Array(0), chk = 0, waitResponse = true, timeout = this.DEFAULT_TIMEOUT) {
    if (op !== null) {
      this.lastCommand = { op, data };
      if (op === FLASH_DEFL_BEGIN) this.deflateBlocks = u32(data, 4);
    }
    return super.command(op, data, chk, waitResponse, timeout);
  }

  override async flashMd5sum(address: number, size: number): Promise<string> {
    this.lastFlashMd5 = await super.flashMd5sum(address, size);
    return this.lastFlashMd5;
  }

  describeLastCommand(): string {
    if (!this.lastCommand) return "the first command";
    const { op, data } = this.lastCommand;
    const name = OPCODE_NAMES[op] ?? `command ${hex(op)}`;
    if (op === FLASH_DEFL_DATA) return `${name} block ${u32(data, 4) + 1} of ${this.deflateBlocks}`;
    if (op === WRITE_REG || op === READ_REG) return `${name} ${hex(u32(data, 0))}`;
    return name;
  }
}

/** Terminal output of esptool-js, a line at a time, to `log`. */
function terminalFor(log: (line: string) => void): IEspLoaderTerminal {
  const write = (text: string) => {
    const line = text.trim();
    if (line !== "") log(line);
  };
  return { clean: () => {}, writeLine: write, write };
}

// ---------------------------------------------------------------------------------------------
// Flashing

/**
 * Connects (reset into the ROM loader, chip check, stub upload, baud switch), writes every image
 * compressed and checks its MD5, then resets the chip into its app. Whatever happens, the port
 * is closed before this returns or throws a FlashError that names what failed.
 */
export async function flashBadge(options: FlashBadgeOptions): Promise<FlashResult> {
  if ((options.port === undefined) === (options.adapter === undefined)) throw new TypeError("give flashBadge either port or adapter");
  checkFlashImages(options.images);
  const adapter = options.adapter ?? new WebSerialAdapter({ path: options.port!, ignoreSignalErrors: options.ignoreSignalErrors });
  const log = options.log ?? (() => {});
  const progress = options.onProgress ?? (() => {});
  const transport = new QuietTransport(adapter);
  const loader = new TrackedLoader({
    transport,
    baudrate: options.baudRate ?? DEFAULT_FLASH_BAUD_RATE,
    romBaudrate: ROM_BAUD_RATE,
    terminal: terminalFor(log),
  });
  const images = options.images;
  const bytesTotal = images.reduce((sum, image) => sum + image.data.length, 0);
  const bytesBefore = (index: number) => images.slice(0, index).reduce((sum, image) => sum + image.data.length, 0);
  let current: number | null = null;
  const fileMd5s: string[] = [];

  const started = performance.now();
  const marks = { connected: started, written: started };
  try {
    progress({ stage: "connecting", image: null, bytesDone: 0, bytesTotal });
    const chip = await loader.main("default_reset");
    await checkFlashSize(loader, images);
    marks.connected = performance.now();

    await loader.writeFlash({
      fileArray: images.map(({ data, address }) => ({ data, address })),
      // "keep": the bootloader's header goes in unchanged (anything else makes esptool-js rewrite
      // it and recompute its digest, through an image reader that gets the digest wrong).
      flashMode: "keep",
      flashFreq: "keep",
      flashSize: "keep",
      eraseAll: false,
      compress: true,
      // The stub is always uploaded, so its MD5 answer is the one esptool-js can read (fault 1).
      calculateMD5Hash: (data) => {
        fileMd5s.push(md5Hex(data));
        return fileMd5s.at(-1)!;
      },
      reportProgress: (index, sent, compressedTotal) => {
        current = index;
        const done = bytesBefore(index) + Math.floor((images[index]!.data.length * sent) / compressedTotal);
        progress({ stage: sent === compressedTotal ? "verifying" : "writing", image: index, bytesDone: done, bytesTotal });
      },
    });
    current = null;
    marks.written = performance.now();

    progress({ stage: "resetting", image: null, bytesDone: bytesTotal, bytesTotal });
    const signalErrorsBefore = adapter.ignoredSignalErrors;
    await loader.after("custom_reset", false, RESET_INTO_APP);
    const finished = performance.now();
    return {
      port: adapter.path,
      chip,
      images: images.map((image, index) => ({ address: image.address, bytes: image.data.length, md5: fileMd5s[index]!, verified: true })),
      resetIntoApp: adapter.ignoredSignalErrors === signalErrorsBefore,
      timing: {
        connectMs: marks.connected - started,
        writeMs: marks.written - marks.connected,
        resetMs: finished - marks.written,
        totalMs: finished - started,
      },
    };
  } catch (error) {
    const image = current === null ? null : images[current]!;
    throw failureOf(error, { port: adapter.path, loader, image, fileMd5: fileMd5s.at(-1) });
  } finally {
    if (adapter.isOpen) await transport.disconnect();
  }
}

/** Writing past the end of the flash wraps around to its start, over the bootloader. */
async function checkFlashSize(loader: ESPLoader, images: FlashImage[]): Promise<void> {
  const size = await loader.detectFlashSize();
  if (size === undefined) throw new FlashError("device_error", "the flash chip's id names no known size: is the flash connected?");
  // detectFlashSize answers with one of esptool-js's own size names ("4MB").
  const flashBytes = loader.flashSizeBytes(size as FlashSizeValues);
  for (const image of images) {
    const end = image.address + image.data.length;
    if (end > flashBytes) throw new FlashError("flash_too_small", `${nameOf(image)} ends at ${hex(end)}, past the end of the ${size} flash`);
  }
}

const NO_ANSWER = /Serial data stream stopped|No serial data received/;

function failureOf(error: unknown, at: { port: string; loader: TrackedLoader; image: FlashImage | null; fileMd5: string | undefined }): FlashError {
  if (error instanceof FlashError) return error;
  if (error instanceof SerialPortOpenError) {
    const code = error.reason === "no_such_port" ? "no_such_port" : error.reason === "port_busy" ? "port_busy" : "port_error";
    return new FlashError(code, error.message, { cause: error });
  }
  const message = (error as Error)?.message ?? String(error);
  const where = at.image ? ` (writing ${nameOf(at.image)} at ${hex(at.image.address)})` : "";
  if (error instanceof ESPError) {
    if (message === "Failed to connect with the device") {
      return new FlashError(
        "no_answer",
        `no answer to SYNC on ${at.port} after 7 resets into download mode: is the badge plugged in? (a board without auto-reset needs BOOT held while it resets)`,
        { cause: error },
      );
    }
    if (NO_ANSWER.test(message)) {
      return new FlashError("no_answer", `no answer to ${at.loader.describeLastCommand()} on ${at.port}${where}: the badge stopped answering`, { cause: error });
    }
    if (/MD5 of file does not match/.test(message) && at.image) {
      return new FlashError(
        "md5_mismatch",
        `MD5 mismatch after writing ${nameOf(at.image)} at ${hex(at.image.address)}: the file's is ${at.fileMd5}, the flash's ${at.loader.lastFlashMd5}`,
        { cause: error },
      );
    }
    return new FlashError("device_error", `the badge on ${at.port} refused ${at.loader.describeLastCommand()}${where}: ${message}`, { cause: error });
  }
  return new FlashError("port_error", message.includes(at.port) ? message : `${at.port}: ${message}`, { cause: error });
}
