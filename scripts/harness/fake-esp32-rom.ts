// A fake ESP32 for flashing tests: the ROM serial loader and the flasher stub as esptool-js
// 0.7.0 talks to them (shared notes/esptool-js-in-node.md), with 4 MiB of flash as bytes. It is
// driven by bytes in and out, so it can sit behind binding-mock in this process
// (`fakeChipBinding`, signals included) or on the far end of a socat pty pair (`attachToPty`).
// Only what esptool-js sends on the way to a compressed, verified write is implemented.
import { createHash } from "node:crypto";
import { finished } from "node:stream/promises";
import zlib from "node:zlib";
import { SerialPort, SerialPortMock } from "serialport";
import type { BindingInterface } from "../../hil/web-serial-adapter.ts";

export const FLASH_BYTES = 4 * 1024 * 1024;
/** Winbond W25Q32: manufacturer 0xEF, device 0x4016; 0x16 says 4 MB. */
export const FLASH_ID = 0x1640ef;
const SECTOR_BYTES = 4096;
const ROM_BAUD_RATE = 115200;

export const OP = {
  MEM_BEGIN: 0x05,
  MEM_END: 0x06,
  MEM_DATA: 0x07,
  SYNC: 0x08,
  WRITE_REG: 0x09,
  READ_REG: 0x0a,
  CHANGE_BAUDRATE: 0x0f,
  FLASH_DEFL_BEGIN: 0x10,
  FLASH_DEFL_DATA: 0x11,
  FLASH_DEFL_END: 0x12,
  SPI_FLASH_MD5: 0x13,
  GET_SECURITY_INFO: 0x14,
} as const;

const ROM_OPS = new Set<number>([OP.MEM_BEGIN, OP.MEM_END, OP.MEM_DATA, OP.SYNC, OP.WRITE_REG, OP.READ_REG, OP.CHANGE_BAUDRATE]);
const STUB_OPS = new Set<number>([...ROM_OPS, OP.FLASH_DEFL_BEGIN, OP.FLASH_DEFL_DATA, OP.FLASH_DEFL_END, OP.SPI_FLASH_MD5]);

const ERROR = { INVALID_MESSAGE: 0x05, BAD_DATA_LENGTH: 0x06, BAD_CHECKSUM: 0x07, DEFLATE: 0x0b } as const;

// Registers esptool-js reads to identify the chip: an ESP32-D0WD-V3 (revision 3), MAC
// 24:0a:c4:12:34:56, and a 40 MHz crystal (UART_CLKDIV 347 at 115200 baud).
const CHIP_MAGIC_REG = 0x40001000;
const EFUSE_BASE = 0x3ff5a000;
const SPI_BASE = 0x3ff42000;
const SPI_CMD_REG = SPI_BASE;
const SPI_USR2_REG = SPI_BASE + 0x24;
const SPI_W0_REG = SPI_BASE + 0x80;
const SPI_CMD_USR = 1 << 18;
const SPIFLASH_RDID = 0x9f;
const INITIAL_REGISTERS: [number, number][] = [
  [CHIP_MAGIC_REG, 0x00f01d83],
  [EFUSE_BASE + 4 * 1, 0xc4123456],
  [EFUSE_BASE + 4 * 2, 0x0000240a],
  [EFUSE_BASE + 4 * 3, 0x00008200], // package 1 (D0WD), revision bit 0
  [EFUSE_BASE + 4 * 5, 0x00100000], // revision bit 1
  [0x3ff6607c, 0x80000000], // APB_CTL_DATE: revision bit 2
  [0x3ff40014, 347], // UART_CLKDIV
];

const BOOT_BANNER = "ets Jun  8 2016 00:22:57\r\n\r\nrst:0x1 (POWERON_RESET),";
const DOWNLOAD_BANNER = `${BOOT_BANNER}boot:0x3 (DOWNLOAD_BOOT(UART0/UART1/SDIO_REI_REO_V2))\r\nwaiting for download\r\n`;
const APP_BANNER = `${BOOT_BANNER}boot:0x13 (SPI_FAST_FLASH_BOOT)\r\n`;

/** What sits on the far end of a serial line. The modem lines and the host's baud rate reach it only in-process. */
export interface SerialDevice {
  receive(bytes: Uint8Array): void;
  /** Returns a function that detaches the listener. */
  onOutput(listener: (bytes: Uint8Array) => void): () => void;
  setSignals?(lines: { dtr: boolean; rts: boolean }): void;
  setHostBaudRate?(baudRate: number): void;
}

export interface FakeEsp32RomOptions {
  /**
   * "app": running its firmware, so only the DTR/RTS reset gets it into download mode.
   * "download": already there, as when held in it by the BOOT button; the only way over a pty,
   * which has no modem lines. Default "app".
   */
  startIn?: "app" | "download";
  faults?: {
    /** Answer this many FLASH_DEFL_DATA blocks, then nothing at all. */
    silentAfterDataBlocks?: number;
    /** Flip the bits of this flash byte once a write covering it ends, so its MD5 no longer matches. */
    corruptByteAt?: number;
  };
}

type Mode = "reset" | "app" | "rom" | "stub";

interface RamSegment {
  offset: number;
  blockSize: number;
  data: Uint8Array;
}

interface DeflateWrite {
  start: number;
  end: number;
  next: number;
  blocks: number;
  seq: number;
  inflater: zlib.Inflate;
  problem: string | null;
}

export class FakeEsp32Rom implements SerialDevice {
  readonly flash = new Uint8Array(FLASH_BYTES).fill(0xff);
  /** Every opcode received in download mode, in order. */
  readonly commands: number[] = [];
  /** DTR/RTS as the chip saw them, each time they changed. */
  readonly lineChanges: { dtr: boolean; rts: boolean }[] = [];
  /** How the chip came out of each reset: into the ROM loader or into the app in flash. */
  readonly boots: ("download" | "app")[] = [];
  /** Failures inside the fake itself; a test that sees one has found a bug here, not in the flasher. */
  readonly errors: Error[] = [];
  #options: FakeEsp32RomOptions;
  #mode: Mode;
  #silent = false;
  #lines = { dtr: false, rts: false };
  #chipBaudRate = ROM_BAUD_RATE;
  #hostBaudRate: number | null = null;
  #registers = new Map(INITIAL_REGISTERS);
  #ram: RamSegment[] = [];
  #write: DeflateWrite | null = null;
  #dataBlocksAnswered = 0;
  #listeners = new Set<(bytes: Uint8Array) => void>();
  #frame: number[] | null = null;
  #escaping = false;
  // Frames are handled one at a time, in order; inflating a block is asynchronous.
  #work: Promise<void> = Promise.resolve();

  constructor(options: FakeEsp32RomOptions = {}) {
    this.#options = options;
    this.#mode = options.startIn === "download" ? "rom" : "app";
  }

  get mode(): Mode {
    return this.#mode;
  }

  onOutput(listener: (bytes: Uint8Array) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * The usual auto-reset circuit: EN is low only while RTS=1 and DTR=0, IO0 only while DTR=1
   * and RTS=0. EN rising boots the chip, into the ROM loader if IO0 is low then.
   */
  setSignals(lines: { dtr: boolean; rts: boolean }): void {
    const wasInReset = this.#mode === "reset";
    if (lines.dtr !== this.#lines.dtr || lines.rts !== this.#lines.rts) this.lineChanges.push({ ...lines });
    this.#lines = { ...lines };
    const enLow = lines.rts && !lines.dtr;
    if (enLow) this.#mode = "reset";
    else if (wasInReset) this.#boot(lines.dtr && !lines.rts ? "download" : "app");
  }

  /** Bytes sent at another baud rate than the chip's arrive as noise; here they are lost. */
  setHostBaudRate(baudRate: number): void {
    this.#hostBaudRate = baudRate;
  }

  receive(bytes: Uint8Array): void {
    if (this.#hostBaudRate !== null && this.#hostBaudRate !== this.#chipBaudRate) return;
    for (const byte of bytes) this.#slipByte(byte);
  }

  #boot(into: "download" | "app"): void {
    this.#mode = into === "download" ? "rom" : "app";
    this.boots.push(into);
    this.#chipBaudRate = ROM_BAUD_RATE;
    this.#ram = [];
    this.#write = null;
    this.#emit(new TextEncoder().encode(into === "download" ? DOWNLOAD_BANNER : APP_BANNER));
  }

  #slipByte(byte: number): void {
    if (this.#frame === null) {
      if (byte === 0xc0) this.#frame = [];
      return;
    }
    if (this.#escaping) {
      this.#escaping = false;
      this.#frame.push(byte === 0xdc ? 0xc0 : byte === 0xdd ? 0xdb : byte);
    } else if (byte === 0xdb) {
      this.#escaping = true;
    } else if (byte === 0xc0) {
      // An empty frame is a second delimiter: the next frame starts here.
      if (this.#frame.length === 0) return;
      const frame = Uint8Array.from(this.#frame);
      this.#frame = null;
      this.#work = this.#work.then(() => this.#handle(frame)).catch((error: Error) => void this.errors.push(error));
    } else {
      this.#frame.push(byte);
    }
  }

  async #handle(frame: Uint8Array): Promise<void> {
    // The app and a chip held in reset do not speak the protocol; a silent chip says nothing.
    if ((this.#mode !== "rom" && this.#mode !== "stub") || this.#silent || frame.length < 8 || frame[0] !== 0x00) return;
    const view = new DataView(frame.buffer, frame.byteOffset, frame.byteLength);
    const op = frame[1]!;
    const payload = frame.subarray(8);
    const checksum = view.getUint32(4, true);
    this.commands.push(op);
    if (view.getUint16(2, true) !== payload.length) return this.#fail(op, ERROR.BAD_DATA_LENGTH);
    if (!(this.#mode === "stub" ? STUB_OPS : ROM_OPS).has(op)) return this.#unsupported();
    const payloadView = new DataView(payload.buffer, payload.byteOffset, payload.byteLength);
    const word = (index: number) => payloadView.getUint32(4 * index, true);
    switch (op) {
      case OP.SYNC:
        // The ROM answers a SYNC eight times; the stub once, with value 0.
        for (let i = 0; i < (this.#mode === "rom" ? 8 : 1); i++) this.#reply(op, this.#mode === "rom" ? 0x20120707 : 0);
        return;
      case OP.READ_REG:
        return this.#reply(op, this.#registers.get(word(0)) ?? 0);
      case OP.WRITE_REG:
        return this.#writeRegisters(payload);
      case OP.MEM_BEGIN:
        // size, blocks, block size, offset
        this.#ram.push({ offset: word(3), blockSize: word(2), data: new Uint8Array(word(0)) });
        return this.#reply(op);
      case OP.MEM_DATA:
        return this.#memData(payload, checksum);
      case OP.MEM_END:
        return this.#memEnd(word(0) !== 0, word(1));
      case OP.CHANGE_BAUDRATE:
        // The answer still goes out at the old rate; the new one applies from the next byte.
        this.#reply(op);
        this.#chipBaudRate = word(0);
        return;
      case OP.FLASH_DEFL_BEGIN:
        // size, blocks, block size, offset
        return this.#deflateBegin(word(0), word(1), word(3));
      case OP.FLASH_DEFL_DATA:
        return this.#deflateData(payload, checksum);
      case OP.FLASH_DEFL_END:
        return this.#deflateEnd();
      case OP.SPI_FLASH_MD5: {
        const [address, size] = [word(0), word(1)];
        if (address + size > FLASH_BYTES) return this.#fail(op, ERROR.INVALID_MESSAGE);
        // The stub answers with the 16 raw bytes (the ROM would send 32 hex characters).
        return this.#reply(op, 0, createHash("md5").update(this.flash.subarray(address, address + size)).digest());
      }
    }
  }

  #writeRegisters(payload: Uint8Array): void {
    const view = new DataView(payload.buffer, payload.byteOffset, payload.byteLength);
    for (let at = 0; at + 16 <= payload.length; at += 16) {
      const address = view.getUint32(at, true);
      const mask = view.getUint32(at + 8, true);
      const value = ((this.#registers.get(address) ?? 0) & ~mask) | (view.getUint32(at + 4, true) & mask);
      this.#registers.set(address, value >>> 0);
    }
    // Setting SPI_CMD_USR runs the user command in SPI_USR2; it is done when the bit reads 0.
    const command = this.#registers.get(SPI_CMD_REG) ?? 0;
    if (command & SPI_CMD_USR) {
      if (((this.#registers.get(SPI_USR2_REG) ?? 0) & 0xff) === SPIFLASH_RDID) this.#registers.set(SPI_W0_REG, FLASH_ID);
      this.#registers.set(SPI_CMD_REG, command & ~SPI_CMD_USR);
    }
    this.#reply(OP.WRITE_REG);
  }

  #memData(payload: Uint8Array, checksum: number): void {
    const { length, seq, data } = dataBlock(payload);
    const segment = this.#ram.at(-1);
    if (!segment || data.length !== length) return this.#fail(OP.MEM_DATA, ERROR.BAD_DATA_LENGTH);
    if (xorChecksum(data) !== checksum) return this.#fail(OP.MEM_DATA, ERROR.BAD_CHECKSUM);
    if (seq * segment.blockSize + length > segment.data.length) return this.#fail(OP.MEM_DATA, ERROR.INVALID_MESSAGE);
    segment.data.set(data, seq * segment.blockSize);
    this.#reply(OP.MEM_DATA);
  }

  #memEnd(noEntry: boolean, entry: number): void {
    if (noEntry) return this.#reply(OP.MEM_END);
    const runsLoadedCode = this.#ram.some((segment) => entry >= segment.offset && entry < segment.offset + segment.data.length);
    if (!runsLoadedCode) return this.#fail(OP.MEM_END, ERROR.INVALID_MESSAGE);
    this.#reply(OP.MEM_END);
    // The stub announces itself with an unsolicited frame, and from then on answers with 2 status bytes.
    this.#mode = "stub";
    this.#emit(slipEncode(new TextEncoder().encode("OHAI")));
  }

  #deflateBegin(size: number, blocks: number, offset: number): void {
    if (offset % SECTOR_BYTES !== 0 || offset + size > FLASH_BYTES) return this.#fail(OP.FLASH_DEFL_BEGIN, ERROR.INVALID_MESSAGE);
    this.flash.fill(0xff, offset, offset + Math.ceil(size / SECTOR_BYTES) * SECTOR_BYTES);
    const write: DeflateWrite = { start: offset, end: offset + size, next: offset, blocks, seq: 0, inflater: zlib.createInflate(), problem: null };
    // One zlib stream spans every block, so it is inflated as a stream, not block by block.
    write.inflater.on("data", (chunk: Buffer) => {
      if (write.next + chunk.length > write.end) write.problem ??= `inflates past the ${size} bytes announced`;
      else this.flash.set(chunk, write.next);
      write.next += chunk.length;
    });
    write.inflater.on("error", (error) => (write.problem ??= error.message));
    this.#write = write;
    this.#reply(OP.FLASH_DEFL_BEGIN);
  }

  async #deflateData(payload: Uint8Array, checksum: number): Promise<void> {
    const silentAfter = this.#options.faults?.silentAfterDataBlocks;
    if (silentAfter !== undefined && this.#dataBlocksAnswered >= silentAfter) {
      this.#silent = true;
      return;
    }
    const write = this.#write;
    const { length, seq, data } = dataBlock(payload);
    if (!write || data.length !== length) return this.#fail(OP.FLASH_DEFL_DATA, ERROR.BAD_DATA_LENGTH);
    if (xorChecksum(data) !== checksum) return this.#fail(OP.FLASH_DEFL_DATA, ERROR.BAD_CHECKSUM);
    if (seq !== write.seq || seq >= write.blocks) return this.#fail(OP.FLASH_DEFL_DATA, ERROR.INVALID_MESSAGE);
    await new Promise<void>((resolve) => write.inflater.write(data, () => resolve()));
    write.seq++;
    this.#dataBlocksAnswered++;
    if (write.problem) return this.#fail(OP.FLASH_DEFL_DATA, ERROR.DEFLATE);
    this.#reply(OP.FLASH_DEFL_DATA);
  }

  async #deflateEnd(): Promise<void> {
    const write = this.#write;
    if (!write) return this.#fail(OP.FLASH_DEFL_END, ERROR.INVALID_MESSAGE);
    this.#write = null;
    write.inflater.end();
    await finished(write.inflater).catch(() => {});
    if (write.problem || write.next !== write.end) return this.#fail(OP.FLASH_DEFL_END, ERROR.DEFLATE);
    const corrupt = this.#options.faults?.corruptByteAt;
    if (corrupt !== undefined && corrupt >= write.start && corrupt < write.end) this.flash[corrupt] = this.flash[corrupt]! ^ 0xff;
    this.#reply(OP.FLASH_DEFL_END);
  }

  /** `01, op, size, value, data, status`: the ROM sends 4 status bytes, the stub 2. */
  #reply(op: number, value = 0, data: Uint8Array = new Uint8Array(0), error = 0): void {
    const status = this.#mode === "stub" ? [error ? 1 : 0, error] : [error ? 1 : 0, error, 0, 0];
    const body = new Uint8Array(8 + data.length + status.length);
    const view = new DataView(body.buffer);
    body[0] = 0x01;
    body[1] = op;
    view.setUint16(2, data.length + status.length, true);
    view.setUint32(4, value >>> 0, true);
    body.set(data, 8);
    body.set(status, 8 + data.length);
    this.#emit(slipEncode(body));
  }

  #fail(op: number, error: number): void {
    this.#reply(op, 0, new Uint8Array(0), error);
  }

  /**
   * The ESP32 ROM does not know GET_SECURITY_INFO. Its "invalid message" answer does not carry
   * the opcode asked for, which is how esptool tells an unsupported command from a failed one.
   */
  #unsupported(): void {
    this.#reply(0x00, 0, new Uint8Array(0), ERROR.INVALID_MESSAGE);
  }

  #emit(bytes: Uint8Array): void {
    if (this.#hostBaudRate !== null && this.#hostBaudRate !== this.#chipBaudRate) return;
    for (const listener of this.#listeners) listener(bytes);
  }
}

/** A *_DATA payload: length, sequence number, two zero words, then the bytes. */
function dataBlock(payload: Uint8Array): { length: number; seq: number; data: Uint8Array } {
  const view = new DataView(payload.buffer, payload.byteOffset, payload.byteLength);
  return { length: view.getUint32(0, true), seq: view.getUint32(4, true), data: payload.subarray(16) };
}

function xorChecksum(data: Uint8Array): number {
  let checksum = 0xef;
  for (const byte of data) checksum ^= byte;
  return checksum;
}

function slipEncode(packet: Uint8Array): Uint8Array {
  const out = [0xc0];
  for (const byte of packet) {
    if (byte === 0xc0) out.push(0xdb, 0xdc);
    else if (byte === 0xdb) out.push(0xdb, 0xdd);
    else out.push(byte);
  }
  out.push(0xc0);
  return Uint8Array.from(out);
}

// ---------------------------------------------------------------------------------------------
// Where the fake sits: behind binding-mock in this process, or behind a socat pty pair.

/**
 * A node-serialport binding whose one port, `portPath`, is wired to `device`: what the host
 * writes reaches it, what it sends arrives as read data, set() moves its DTR/RTS lines, and
 * the baud rate the host opens with or changes to is the one it hears.
 */
export function fakeChipBinding(device: SerialDevice, portPath: string): BindingInterface {
  // @serialport/binding-mock, by way of serialport, whose types for it resolve under NodeNext.
  const MockBinding = SerialPortMock.binding;
  MockBinding.createPort(portPath);
  return {
    list: () => MockBinding.list(),
    async open(options) {
      const port = await MockBinding.open(options);
      device.setHostBaudRate?.(options.baudRate);
      const detach = device.onOutput((bytes) => {
        if (port.isOpen) port.emitData(Buffer.from(bytes));
      });
      const { write, set, update, close } = port;
      port.write = async (buffer) => {
        await write.call(port, buffer);
        device.receive(buffer);
      };
      port.set = async (flags) => {
        await set.call(port, flags);
        // node-serialport's own default for a line left out is "asserted".
        device.setSignals?.({ dtr: flags.dtr ?? true, rts: flags.rts ?? true });
      };
      port.update = async (options) => {
        await update.call(port, options);
        device.setHostBaudRate?.(options.baudRate);
      };
      port.close = async () => {
        detach();
        await close.call(port);
      };
      return port;
    },
  };
}

/** Puts `device` on the pty at `ptyPath` through a real node-serialport port; resolves with its detach. */
export async function attachToPty(device: SerialDevice, ptyPath: string): Promise<() => Promise<void>> {
  const port = new SerialPort({ path: ptyPath, baudRate: ROM_BAUD_RATE, autoOpen: false });
  await new Promise<void>((resolve, reject) => port.open((error) => (error ? reject(error) : resolve())));
  port.on("data", (chunk: Buffer) => device.receive(chunk));
  const detach = device.onOutput((bytes) => port.write(Buffer.from(bytes)));
  return async () => {
    detach();
    await new Promise<void>((resolve) => port.close(() => resolve()));
  };
}
