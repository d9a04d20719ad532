// Benchmarks flashing with esptool-js (hil/flasher.ts flashBadge): an app image of exactly the
// OTA slot, 0x1E0000 = 1,966,080 bytes, written to the fake ESP32 ROM loader
// (scripts/harness/fake-esp32-rom.ts) in this process over binding-mock, and across a socat pty pair
// through the real serial binding, `--runs` times each. Per path: the total time (connect,
// stub upload, write with MD5 check, reset) and the write throughput in KiB/s (image bytes over
// the write-and-verify time), medians. The same-run baseline writes the same number of bytes
// raw through the same path (the Web Serial adapter's writable, to a receiver that only counts
// them): no esptool-js, no protocol, so the gap is what esptool-js and its round trips cost.
// Neither path has a baud rate that limits anything: these are software ceilings. On a badge at
// 921600 baud the wire is the limit (8N1: 90 KiB/s at most, before compression).
// The app's filler is pseudo-random, so it hardly compresses: the worst case for the wire.
// Usage: npx tsx scripts/bench/bench-hil-flash.ts [--runs 3] [--json]
import { performance } from "node:perf_hooks";
import { buildAppImage, md5Hex, OTA_SLOT_BYTES } from "../../firmware/index.ts";
import { APP_OFFSET, flashBadge, type FlashResult } from "../../hil/flasher.ts";
import { WebSerialAdapter } from "../../hil/web-serial-adapter.ts";
import { attachToPty, FakeEsp32Rom, fakeChipBinding, type SerialDevice } from "../harness/fake-esp32-rom.ts";
import { openPtyPair } from "../../hil/pty-pair.ts";
import { commandLine, log, median, round, cpusAndNode, type CpusAndNode } from "./bench-common.ts";
import { benchArgs, positiveInt, writeReport } from "./bench-cli.ts";

const KiB = 1024;
const RAW_CHUNK_BYTES = 16 * KiB;
const BAUD_RATE = 921600;

type PathName = "in_process" | "pty";

/** Somewhere to flash: a fresh fake chip (or a byte counter) behind an adapter, and its teardown. */
interface Line {
  adapter: WebSerialAdapter;
  close(): Promise<void>;
}

let mockPorts = 0;

async function lineTo(path: PathName, device: SerialDevice): Promise<Line> {
  if (path === "in_process") {
    const portPath = `/dev/bench-esp32-${++mockPorts}`;
    return { adapter: new WebSerialAdapter({ path: portPath, binding: fakeChipBinding(device, portPath) }), close: async () => {} };
  }
  const pair = await openPtyPair();
  const detach = await attachToPty(device, pair.device);
  return {
    adapter: new WebSerialAdapter({ path: pair.host, ignoreSignalErrors: true }),
    close: async () => {
      await detach();
      await pair.close();
    },
  };
}

interface FlashRun {
  total_ms: number;
  connect_ms: number;
  write_ms: number;
  reset_ms: number;
  write_kib_per_s: number;
}

async function flashOnce(path: PathName, image: Uint8Array): Promise<FlashRun> {
  // In-process the chip starts in its app and the DTR/RTS reset takes it to the loader; a pty
  // has no modem lines, so there it waits in download mode.
  const fake = new FakeEsp32Rom({ startIn: path === "pty" ? "download" : "app" });
  const line = await lineTo(path, fake);
  let result: FlashResult;
  try {
    result = await flashBadge({ adapter: line.adapter, images: [{ name: "app.bin", address: APP_OFFSET, data: image }], baudRate: BAUD_RATE });
  } finally {
    await line.close();
  }
  if (md5Hex(fake.flash.subarray(APP_OFFSET, APP_OFFSET + image.length)) !== md5Hex(image) || fake.errors.length > 0) {
    throw new Error(`the fake's flash does not hold the image after a ${path} run (${fake.errors.join("; ")})`);
  }
  const { totalMs, connectMs, writeMs, resetMs } = result.timing;
  return {
    total_ms: round(totalMs, 1),
    connect_ms: round(connectMs, 1),
    write_ms: round(writeMs, 1),
    reset_ms: round(resetMs, 1),
    write_kib_per_s: round(image.length / KiB / (writeMs / 1000), 1),
  };
}

interface RawRun {
  ms: number;
  kib_per_s: number;
}

/** The same bytes through the same adapter and path, raw: timed until the far end has them all. */
async function rawOnce(path: PathName, bytes: number): Promise<RawRun> {
  let received = 0;
  let allArrived!: () => void;
  const arrived = new Promise<void>((resolve) => (allArrived = resolve));
  const counter: SerialDevice = {
    receive: (chunk) => {
      received += chunk.length;
      if (received >= bytes) allArrived();
    },
    onOutput: () => () => {},
  };
  const line = await lineTo(path, counter);
  try {
    await line.adapter.open({ baudRate: BAUD_RATE });
    const writer = line.adapter.writable!.getWriter();
    const chunk = new Uint8Array(RAW_CHUNK_BYTES).fill(0x55);
    const started = performance.now();
    for (let sent = 0; sent < bytes; sent += RAW_CHUNK_BYTES) await writer.write(chunk.subarray(0, Math.min(RAW_CHUNK_BYTES, bytes - sent)));
    await arrived;
    const ms = performance.now() - started;
    writer.releaseLock();
    return { ms: round(ms, 1), kib_per_s: round(bytes / KiB / (ms / 1000), 1) };
  } finally {
    if (line.adapter.isOpen) await line.adapter.close();
    await line.close();
  }
}

interface PathReport {
  flash: { runs: FlashRun[]; total_ms: number; write_ms: number; write_kib_per_s: number };
  raw: { runs: RawRun[]; ms: number; kib_per_s: number };
  /** raw KiB/s over esptool-js's write KiB/s on the same path */
  raw_over_flash: number;
}

interface Report {
  figure: "hil_flash";
  image_bytes: number;
  runs: number;
  baud_rate: number;
  machine: CpusAndNode;
  paths: Record<PathName, PathReport>;
  command: string;
}

async function benchPath(path: PathName, image: Uint8Array, runs: number): Promise<PathReport> {
  const flashRuns: FlashRun[] = [];
  const rawRuns: RawRun[] = [];
  // Alternating, so a slow moment of the machine does not land on one side only.
  for (let i = 0; i < runs; i++) {
    log(`${path} run ${i + 1}/${runs}: esptool-js flash`);
    flashRuns.push(await flashOnce(path, image));
    log(`${path} run ${i + 1}/${runs}: raw write (flash took ${flashRuns.at(-1)!.total_ms} ms)`);
    rawRuns.push(await rawOnce(path, image.length));
  }
  const writeKibPerS = median(flashRuns.map((r) => r.write_kib_per_s));
  const rawKibPerS = median(rawRuns.map((r) => r.kib_per_s));
  return {
    flash: {
      runs: flashRuns,
      total_ms: median(flashRuns.map((r) => r.total_ms)),
      write_ms: median(flashRuns.map((r) => r.write_ms)),
      write_kib_per_s: writeKibPerS,
    },
    raw: { runs: rawRuns, ms: median(rawRuns.map((r) => r.ms)), kib_per_s: rawKibPerS },
    raw_over_flash: round(rawKibPerS / writeKibPerS, 1),
  };
}

function table(r: Report): string[] {
  const row = (name: string, p: PathReport) =>
    `  ${name.padEnd(22)}${(p.flash.total_ms / 1000).toFixed(2).padStart(9)}${(p.flash.write_ms / 1000).toFixed(2).padStart(9)}` +
    `${p.flash.write_kib_per_s.toFixed(0).padStart(12)}${p.raw.kib_per_s.toFixed(0).padStart(12)}${`${p.raw_over_flash}x`.padStart(10)}`;
  return [
    `badgebench flashing benchmark: a ${r.image_bytes}-byte app image to the fake ESP32 ROM loader with esptool-js,`,
    `${r.runs} runs per path, medians; ${r.machine.cpus} CPUs, node ${r.machine.node}`,
    "",
    `  ${"".padEnd(22)}${"total s".padStart(9)}${"write s".padStart(9)}${"write KiB/s".padStart(12)}${"raw KiB/s".padStart(12)}${"raw/flash".padStart(10)}`,
    row("in-process (mock)", r.paths.in_process),
    row("socat pty pair", r.paths.pty),
    "",
    "  total: connect, stub upload, write with MD5 check, reset; write: writeFlash (compression, blocks, MD5)",
    "  raw: the same bytes through the same adapter and path without esptool-js",
  ];
}

async function main(): Promise<void> {
  const values = benchArgs({ runs: { type: "string", default: "3" } });
  const runs = positiveInt("runs", values.runs);
  const image = buildAppImage({ version: "1.4.0", size: OTA_SLOT_BYTES });
  const report: Report = {
    figure: "hil_flash",
    image_bytes: image.length,
    runs,
    baud_rate: BAUD_RATE,
    machine: cpusAndNode(),
    paths: { in_process: await benchPath("in_process", image, runs), pty: await benchPath("pty", image, runs) },
    command: commandLine("bench-hil-flash.ts"),
  };
  writeReport(report, values.json, table);
}

await main();
