// Flashing with unmodified esptool-js through the Web Serial adapter, end to end against the
// fake ESP32 ROM loader: in this process over binding-mock (modem lines included), and across a
// socat pty pair through the real serial binding (no modem lines, so no resets).
import { createHash } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { SerialPort } from "serialport";
import { buildAppImage, md5Hex } from "../../firmware/index.ts";
import { APP_OFFSET, flashBadge, FlashError, FlashInputError, parseFlashArgs, type FlashImage, type FlashProgress } from "../../hil/flasher.ts";
import { WebSerialAdapter, type BindingInterface } from "../../hil/web-serial-adapter.ts";
import { runHilFlash, type HilFlashOptions } from "../../scripts/cli/hil-flash.ts";
import { attachToPty, FakeEsp32Rom, fakeChipBinding, OP, type FakeEsp32RomOptions } from "../../scripts/harness/fake-esp32-rom.ts";
import { openPtyPair, type PtyPair } from "../../hil/pty-pair.ts";

const BOOTLOADER_OFFSET = 0x1000;
const PARTITION_TABLE_OFFSET = 0x8000;
const APP_BYTES = 256 * 1024;

/** arduino-esp32's min_spiffs table as ESP-IDF writes it: 32-byte entries, an MD5 entry, 0xFF to 3 KiB. */
function partitionTable(): Uint8Array {
  const entries: [label: string, type: number, subtype: number, offset: number, size: number][] = [
    ["nvs", 1, 0x02, 0x9000, 0x5000],
    ["otadata", 1, 0x00, 0xe000, 0x2000],
    ["app0", 0, 0x10, 0x10000, 0x1e0000],
    ["app1", 0, 0x11, 0x1f0000, 0x1e0000],
    ["spiffs", 1, 0x82, 0x3d0000, 0x20000],
    ["coredump", 1, 0x03, 0x3f0000, 0x10000],
  ];
  const table = Buffer.alloc(0xc00, 0xff);
  entries.forEach(([label, type, subtype, offset, size], index) => {
    const at = index * 32;
    table.fill(0, at, at + 32);
    table.set([0xaa, 0x50, type, subtype], at);
    table.writeUInt32LE(offset, at + 4);
    table.writeUInt32LE(size, at + 8);
    table.write(label, at + 12, "ascii");
  });
  const md5At = entries.length * 32;
  table.set([0xeb, 0xeb], md5At);
  createHash("md5").update(table.subarray(0, md5At)).digest().copy(table, md5At + 16);
  return table;
}

const bootloader = buildAppImage({ version: "bootloader", projectName: "bootloader", size: 0x6000 });
const table = partitionTable();
const app = buildAppImage({ version: "1.4.0", size: APP_BYTES });
const IMAGES: FlashImage[] = [
  { name: "bootloader.bin", address: BOOTLOADER_OFFSET, data: bootloader },
  { name: "partitions.bin", address: PARTITION_TABLE_OFFSET, data: table },
  { name: "app.bin", address: APP_OFFSET, data: app },
];

function expectFlashHolds(fake: FakeEsp32Rom, images: FlashImage[]): void {
  for (const image of images) {
    const written = fake.flash.subarray(image.address, image.address + image.data.length);
    expect(md5Hex(written), `${image.name} at 0x${image.address.toString(16)}`).toBe(md5Hex(image.data));
  }
  expect(fake.errors).toEqual([]);
}

describe("parseFlashArgs", () => {
  const files = new Map<string, Uint8Array>([
    ["bootloader.bin", bootloader],
    ["partitions.bin", table],
    ["app.bin", app],
    ["empty.bin", new Uint8Array(0)],
  ]);
  const readFile = (file: string) => {
    const data = files.get(file);
    if (!data) throw Object.assign(new Error(`ENOENT: ${file}`), { code: "ENOENT" });
    return data;
  };
  const parse = (...args: string[]) => parseFlashArgs(args, readFile);
  const refusal = (...args: string[]) => {
    try {
      parse(...args);
    } catch (error) {
      expect(error).toBeInstanceOf(FlashInputError);
      return (error as Error).message;
    }
    throw new Error(`parseFlashArgs accepted ${args.join(" ")}`);
  };

  it("flashes a lone file as the app at 0x10000", () => {
    expect(parse("app.bin").map(({ name, address }) => ({ name, address }))).toEqual([{ name: "app.bin", address: 0x10000 }]);
  });

  it("reads offsets in 0x hex or decimal", () => {
    const images = parse("bootloader.bin@0x1000", "partitions.bin@32768", "app.bin@0x10000");
    expect(images.map(({ name, address }) => ({ name, address }))).toEqual([
      { name: "bootloader.bin", address: 0x1000 },
      { name: "partitions.bin", address: 0x8000 },
      { name: "app.bin", address: 0x10000 },
    ]);
    expect(images[2]!.data).toBe(app);
  });

  it("refuses, naming the argument and the reason", () => {
    expect(refusal()).toMatch(/name the images to flash/);
    expect(refusal("bootloader.bin@0x1000", "app.bin")).toMatch(/app\.bin has no @OFFSET/);
    expect(refusal("app.bin@0x1g000")).toMatch(/app\.bin@0x1g000: the offset "0x1g000" is not a number/);
    expect(refusal("app.bin@")).toMatch(/the offset "" is not a number/);
    expect(refusal("@0x1000")).toMatch(/names no file/);
    expect(refusal("missing.bin@0x1000")).toBe("cannot read missing.bin: no such file");
    expect(refusal("empty.bin@0x1000")).toBe("empty.bin is empty");
    expect(refusal("bootloader.bin@0x1001")).toMatch(/bootloader\.bin at 0x1001: the offset must be a multiple of 0x1000/);
    expect(refusal("bootloader.bin@0x1000", "partitions.bin@0x6000")).toBe("bootloader.bin (0x1000 to 0x7000) overlaps partitions.bin at 0x6000");
    expect(refusal("partitions.bin@0x10000")).toMatch(/^partitions\.bin at 0x10000 is not a valid ESP32 app image: first byte is 0xAA not 0xE9/);
  });

  it("refuses an app built for another chip or too big for the app slot", () => {
    files.set("s3.bin", buildAppImage({ version: "1.4.0", chipId: 9 }));
    files.set("big.bin", buildAppImage({ version: "1.4.0", size: 0x1e0000 + 16 }));
    expect(refusal("s3.bin")).toBe("s3.bin at 0x10000 is built for chip id 9, not the ESP32 (0)");
    expect(refusal("big.bin")).toBe("big.bin is 1966096 bytes, larger than the 1966080-byte app slot at 0x10000");
  });
});

describe("flashing in this process, over binding-mock", () => {
  let portNumber = 0;
  function fakeOnMockPort(options: FakeEsp32RomOptions = {}) {
    const fake = new FakeEsp32Rom(options);
    const path = `/dev/fake-esp32-${++portNumber}`;
    const binding = fakeChipBinding(fake, path);
    return { fake, binding, adapter: new WebSerialAdapter({ path, binding }) };
  }
  /** The port is free again: binding-mock refuses a second open while one is in use. */
  async function expectReleased(binding: BindingInterface, adapter: WebSerialAdapter) {
    expect(adapter.isOpen).toBe(false);
    const again = await binding.open({ path: adapter.path, baudRate: 115200 });
    await again.close();
  }

  it("writes bootloader, partition table and app, verifies each MD5 and resets into the app", async () => {
    const { fake, binding, adapter } = fakeOnMockPort();
    const progress: FlashProgress[] = [];
    const result = await flashBadge({ adapter, images: IMAGES, onProgress: (p) => progress.push(p) });

    expectFlashHolds(fake, IMAGES);
    expect(result.chip).toBe("ESP32-D0WD-V3 (revision 3)");
    expect(result.images).toEqual(IMAGES.map((image) => ({ address: image.address, bytes: image.data.length, md5: md5Hex(image.data), verified: true })));
    // From its app into download mode by the classic DTR/RTS reset, and back into the app at the end.
    expect(fake.lineChanges).toEqual([
      { dtr: false, rts: true }, // EN low: held in reset
      { dtr: true, rts: false }, // EN released while IO0 is low: the ROM loader
      { dtr: false, rts: false },
      { dtr: false, rts: true }, // EN low
      { dtr: false, rts: false }, // EN released with IO0 high: the app
    ]);
    expect(fake.boots).toEqual(["download", "app"]);
    expect(fake.mode).toBe("app");
    expect(result.resetIntoApp).toBe(true);
    expect(fake.commands).toContain(OP.CHANGE_BAUDRATE);
    expect(fake.commands.filter((op) => op === OP.SPI_FLASH_MD5)).toHaveLength(3);

    const total = IMAGES.reduce((sum, image) => sum + image.data.length, 0);
    expect(progress[0]).toEqual({ stage: "connecting", image: null, bytesDone: 0, bytesTotal: total });
    expect(progress.at(-1)).toEqual({ stage: "resetting", image: null, bytesDone: total, bytesTotal: total });
    const done = progress.map((p) => p.bytesDone);
    expect(done).toEqual([...done].sort((a, b) => a - b));
    expect(result.timing.totalMs).toBeGreaterThanOrEqual(result.timing.connectMs + result.timing.writeMs);
    await expectReleased(binding, adapter);
  });

  it("names the block a badge stopped answering at, and releases the port", async () => {
    const { fake, binding, adapter } = fakeOnMockPort({ faults: { silentAfterDataBlocks: 3 } });
    const images = [{ name: "app.bin", address: APP_OFFSET, data: app }];
    // The app's filler hardly compresses: 256 KiB go in 16 blocks of up to 16 KiB.
    const failure = flashBadge({ adapter, images });
    await expect(failure).rejects.toThrow(FlashError);
    await expect(failure).rejects.toMatchObject({
      code: "no_answer",
      message: `no answer to FLASH_DEFL_DATA block 4 of 16 on ${adapter.path} (writing app.bin at 0x10000): the badge stopped answering`,
    });
    expect(fake.errors).toEqual([]);
    await expectReleased(binding, adapter);
  });

  it("reports an MD5 mismatch with both sums, and releases the port", async () => {
    const { binding, adapter } = fakeOnMockPort({ faults: { corruptByteAt: APP_OFFSET + 1000 } });
    const corrupted = Uint8Array.from(app);
    corrupted[1000] = corrupted[1000]! ^ 0xff;
    await expect(flashBadge({ adapter, images: IMAGES })).rejects.toMatchObject({
      code: "md5_mismatch",
      message: `MD5 mismatch after writing app.bin at 0x10000: the file's is ${md5Hex(app)}, the flash's ${md5Hex(corrupted)}`,
    });
    await expectReleased(binding, adapter);
  });

  it("refuses an image that runs past the end of the 4 MB flash before writing anything", async () => {
    const { fake, adapter } = fakeOnMockPort();
    const images = [{ name: "tail.bin", address: 0x3ff000, data: new Uint8Array(0x2000) }];
    await expect(flashBadge({ adapter, images })).rejects.toMatchObject({
      code: "flash_too_small",
      message: "tail.bin ends at 0x401000, past the end of the 4MB flash",
    });
    expect(fake.commands).not.toContain(OP.FLASH_DEFL_BEGIN);
    expect(adapter.isOpen).toBe(false);
  });
});

describe("flashing across a socat pty pair", () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
  async function fakeOnPty(): Promise<{ fake: FakeEsp32Rom; pair: PtyPair }> {
    const pair = await openPtyPair();
    cleanups.push(pair.close);
    // A pty carries no modem lines, so the chip waits in download mode, as if BOOT were held.
    const fake = new FakeEsp32Rom({ startIn: "download" });
    cleanups.push(await attachToPty(fake, pair.device));
    return { fake, pair };
  }

  it("writes and verifies the same images; the reset cannot reach the chip", async () => {
    const { fake, pair } = await fakeOnPty();
    const result = await flashBadge({ port: pair.host, images: IMAGES, ignoreSignalErrors: true });
    expectFlashHolds(fake, IMAGES);
    expect(result.images.every((image) => image.verified)).toBe(true);
    expect(result.resetIntoApp).toBe(false);
    expect(fake.boots).toEqual([]);
    // Released: the port opens again.
    const again = await SerialPort.binding.open({ path: pair.host, baudRate: 115200 });
    await again.close();
  });

  it("says a busy port is busy", async () => {
    const { pair } = await fakeOnPty();
    const holder = await SerialPort.binding.open({ path: pair.host, baudRate: 115200 });
    cleanups.push(() => holder.close());
    await expect(flashBadge({ port: pair.host, images: IMAGES, ignoreSignalErrors: true })).rejects.toMatchObject({
      code: "port_busy",
      message: `cannot open serial port ${pair.host}: the port is busy (another program has it open)`,
    });
  });

  it("says a port that does not exist does not exist", async () => {
    await expect(flashBadge({ port: "/dev/ttyUSB-badgebench-none", images: IMAGES })).rejects.toMatchObject({
      code: "no_such_port",
      message: "cannot open serial port /dev/ttyUSB-badgebench-none: no such port (is the badge plugged in?)",
    });
  });

  describe("badgebench hil flash (runHilFlash)", () => {
    let dir: string;
    let appFile: string;
    beforeAll(() => {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), "badgebench-flash-"));
      appFile = path.join(dir, "app.bin");
      fs.writeFileSync(appFile, app);
    });
    afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

    async function run(options: Omit<HilFlashOptions, "json" | "progress"> & { json?: boolean }) {
      const out = { stdout: "", stderr: "" };
      vi.spyOn(process.stdout, "write").mockImplementation((chunk) => ((out.stdout += String(chunk)), true));
      vi.spyOn(process.stderr, "write").mockImplementation((chunk) => ((out.stderr += String(chunk)), true));
      try {
        return { status: await runHilFlash({ json: false, progress: false, ...options }), ...out };
      } finally {
        vi.restoreAllMocks();
      }
    }

    it("flashes a lone app file at 0x10000 and prints one JSON object", async () => {
      const { fake, pair } = await fakeOnPty();
      const { status, stdout, stderr } = await run({ port: pair.host, files: [appFile], json: true });
      expect(status).toBe(0);
      expectFlashHolds(fake, [{ address: APP_OFFSET, data: app }]);
      expect(JSON.parse(stdout)).toMatchObject({
        object: "hil_flash",
        port: pair.host,
        chip: "ESP32-D0WD-V3 (revision 3)",
        images: [{ file: appFile, address: "0x10000", bytes: APP_BYTES, md5: md5Hex(app), verified: true }],
        reset_into_app: false,
      });
      expect(stderr).toBe(`connecting to ${pair.host}\nwriting ${appFile} at 0x10000\nverifying ${appFile} at 0x10000\nresetting into the app\n`);
    });

    it("exits 2 on bad arguments, having opened nothing", async () => {
      const { status, stdout } = await run({ port: "/dev/ttyUSB-badgebench-none", files: [`${appFile}@0x1001`], json: true });
      expect(status).toBe(2);
      expect(JSON.parse(stdout)).toEqual({
        error: { code: "bad_arguments", message: `${appFile} at 0x1001: the offset must be a multiple of 0x1000 (the 4 KiB flash sector)` },
      });
    });

    it("exits 1 with the reason when flashing fails", async () => {
      const { status, stdout, stderr } = await run({ port: "/dev/ttyUSB-badgebench-none", files: [appFile] });
      expect(status).toBe(1);
      expect(stdout).toBe("");
      expect(stderr).toBe(
        "connecting to /dev/ttyUSB-badgebench-none\nbadgebench: cannot open serial port /dev/ttyUSB-badgebench-none: no such port (is the badge plugged in?)\n",
      );
    });
  });
});
