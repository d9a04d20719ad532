// Benchmarks the console's expect latency (hil/serial-console.ts): from the moment the badge
// side writes an `@bb` event (an ESP-IDF log line or two before it, one after) to the moment the
// host's `SerialConsole.expectEvent` resolves with it, one event at a time, `--events` events
// per transport (after a warm-up that is not counted): in this process over
// @serialport/binding-mock, and across a socat pty pair through the platform's binding (both
// ends in this process, so both timestamps come from one clock). Median and p99.
// The same-run baseline is the bare serial path without the driver: a node-serialport stream on
// the same transport and binding, whose `data` listener waits for the same bytes up to the end
// of the event line. The gap is what SerialConsole costs (UTF-8 stream decoding, line splitting,
// noise skipping, parsing the event, the transcript). Driver and baseline alternate in blocks so
// a slow moment of the machine does not land on one side only.
// Usage: npx tsx scripts/bench/bench-hil-console.ts [--events 2000] [--json]
import { performance } from "node:perf_hooks";
import { SerialPortStream } from "@serialport/stream";
import { SerialPort, SerialPortMock } from "serialport";
import { formatConsoleEvent } from "../../firmware/index.ts";
import { SerialConsole, type SerialBinding } from "../../hil/serial-console.ts";
import { openPtyPair } from "../../hil/pty-pair.ts";
import { commandLine, log, percentile, round, cpusAndNode, type CpusAndNode } from "./bench-common.ts";
import { benchArgs, positiveInt, writeReport } from "./bench-cli.ts";

const MockBinding = SerialPortMock.binding;
const BAUD_RATE = 115200;
const BLOCK_EVENTS = 500;
const WARMUP_EVENTS = 100;

type TransportName = "in_process" | "pty";
type Side = "driver" | "baseline";

/** What the badge prints for event `n`: log noise, the event line, more noise; and where the event line ends. */
function badgeOutput(n: number): { bytes: Buffer; eventEnd: number } {
  const before =
    `\x1b[0;32mI (${1000 + n}) http: GET /v1/firmware/check 200\x1b[0m\r\n` + `\x1b[0;32mI (${1001 + n}) ota: wrote ${n * 4096} bytes to ota_1\x1b[0m\r\n`;
  const event = `${formatConsoleEvent({ kind: "progress", bytes: n * 4096, total: 4096 * 1_000_000 })}\r\n`;
  const after = `\x1b[0;33mW (${1002 + n}) wifi: rssi -67 dBm\x1b[0m\r\n`;
  return { bytes: Buffer.from(before + event + after), eventEnd: Buffer.byteLength(before + event) };
}

/** One transport: the host opens `path` with `binding`; `write` is the badge side printing. */
interface Transport {
  path: string;
  binding: SerialBinding;
  write(bytes: Buffer): void;
  close(): Promise<void>;
}

let mockPorts = 0;

function mockTransport(): Transport {
  const path = `/dev/ttyBENCHCONSOLE${++mockPorts}`;
  MockBinding.createPort(path);
  let port: Awaited<ReturnType<typeof MockBinding.open>> | null = null;
  const binding: SerialBinding = {
    list: () => MockBinding.list(),
    async open(options) {
      port = await MockBinding.open(options);
      return port;
    },
  };
  return {
    path,
    binding,
    write: (bytes) => port!.emitData(bytes),
    close: async () => {},
  };
}

async function ptyTransport(): Promise<Transport> {
  const pair = await openPtyPair();
  const badge = new SerialPort({ path: pair.device, baudRate: BAUD_RATE, autoOpen: false, lock: false });
  await new Promise<void>((resolve, reject) => badge.open((error) => (error ? reject(error) : resolve())));
  badge.on("error", () => {});
  return {
    path: pair.host,
    binding: SerialPort.binding,
    write: (bytes) => badge.write(bytes),
    close: async () => {
      if (badge.isOpen) await new Promise((resolve) => badge.close(resolve));
      await pair.close();
    },
  };
}

/** The driver: SerialConsole.expectEvent for each event; latencies in ms. */
async function driverBlock(transport: Transport, first: number, count: number): Promise<number[]> {
  const serial = await SerialConsole.open({ port: transport.path, binding: transport.binding, baudRate: BAUD_RATE });
  const samples: number[] = [];
  try {
    for (let n = first; n < first + count; n++) {
      const { bytes } = badgeOutput(n);
      const want = n * 4096;
      const started = performance.now();
      const waiting = serial.expectEvent((event) => event.kind === "progress" && event.bytes === want, { timeoutMs: 5000 });
      transport.write(bytes);
      await waiting;
      samples.push(performance.now() - started);
    }
  } finally {
    await serial.close();
  }
  return samples;
}

/** The baseline: a bare node-serialport stream on the same path and binding, waiting for the same bytes. */
async function baselineBlock(transport: Transport, first: number, count: number): Promise<number[]> {
  const port = new SerialPortStream({ binding: transport.binding, path: transport.path, baudRate: BAUD_RATE, autoOpen: false });
  await new Promise<void>((resolve, reject) => port.open((error) => (error ? reject(error) : resolve())));
  let received = 0;
  let waitingFor = Infinity;
  let arrived: (() => void) | null = null;
  port.on("data", (chunk: Buffer) => {
    received += chunk.length;
    if (received >= waitingFor && arrived) {
      const done = arrived;
      arrived = null;
      done();
    }
  });
  const samples: number[] = [];
  // Bytes the badge side wrote in this block: an event has arrived when the count passes its line's end.
  let written = 0;
  try {
    for (let n = first; n < first + count; n++) {
      const { bytes, eventEnd } = badgeOutput(n);
      const started = performance.now();
      waitingFor = written + eventEnd;
      written += bytes.length;
      const waiting = received >= waitingFor ? Promise.resolve() : new Promise<void>((resolve) => (arrived = resolve));
      transport.write(bytes);
      await waiting;
      samples.push(performance.now() - started);
    }
  } finally {
    await new Promise((resolve) => port.close(resolve));
  }
  return samples;
}

interface Latency {
  events: number;
  median_ms: number;
  p99_ms: number;
  max_ms: number;
}

const summary = (samples: number[]): Latency => ({
  events: samples.length,
  median_ms: round(percentile(samples, 50), 3),
  p99_ms: round(percentile(samples, 99), 3),
  max_ms: round(Math.max(...samples), 3),
});

interface TransportReport {
  driver: Latency;
  baseline: Latency;
  /** driver median minus baseline median: what SerialConsole adds per event */
  driver_cost_median_ms: number;
}

async function benchTransport(name: TransportName, events: number): Promise<TransportReport> {
  const transport = name === "in_process" ? mockTransport() : await ptyTransport();
  const samples: Record<Side, number[]> = { driver: [], baseline: [] };
  try {
    log(`${name}: warm-up (${WARMUP_EVENTS} events each)`);
    await driverBlock(transport, 0, WARMUP_EVENTS);
    await baselineBlock(transport, 0, WARMUP_EVENTS);
    for (let done = 0; done < events; done += BLOCK_EVENTS) {
      const count = Math.min(BLOCK_EVENTS, events - done);
      log(`${name}: events ${done + 1}-${done + count} of ${events}, driver then baseline`);
      samples.driver.push(...(await driverBlock(transport, WARMUP_EVENTS + done, count)));
      samples.baseline.push(...(await baselineBlock(transport, WARMUP_EVENTS + done, count)));
    }
  } finally {
    await transport.close();
  }
  const driver = summary(samples.driver);
  const baseline = summary(samples.baseline);
  return { driver, baseline, driver_cost_median_ms: round(driver.median_ms - baseline.median_ms, 3) };
}

interface Report {
  figure: "hil_console_expect_latency";
  events_per_transport: number;
  event_line: string;
  bytes_per_event: number;
  machine: CpusAndNode;
  transports: Record<TransportName, TransportReport>;
  command: string;
}

function table(r: Report): string[] {
  const row = (name: string, t: TransportReport) =>
    `  ${name.padEnd(20)}${t.driver.median_ms.toFixed(3).padStart(10)}${t.driver.p99_ms.toFixed(3).padStart(10)}` +
    `${t.baseline.median_ms.toFixed(3).padStart(12)}${t.baseline.p99_ms.toFixed(3).padStart(12)}`;
  return [
    `badgebench console expect latency: an @bb event printed on the badge side to SerialConsole.expectEvent resolving,`,
    `${r.events_per_transport} events per transport (${r.bytes_per_event} bytes each with its noise lines), ms; ${r.machine.cpus} CPUs, node ${r.machine.node}`,
    "",
    `  ${"".padEnd(20)}${"median".padStart(10)}${"p99".padStart(10)}${"raw median".padStart(12)}${"raw p99".padStart(12)}`,
    row("in-process (mock)", r.transports.in_process),
    row("socat pty pair", r.transports.pty),
    "",
    "  raw: the same bytes seen by a bare node-serialport `data` listener on the same transport (no driver)",
  ];
}

async function main(): Promise<void> {
  const values = benchArgs({ events: { type: "string", default: "2000" } });
  const events = positiveInt("events", values.events);
  const sample = badgeOutput(1);
  const report: Report = {
    figure: "hil_console_expect_latency",
    events_per_transport: events,
    event_line: sample.bytes.toString().split("\r\n")[2]!,
    bytes_per_event: sample.bytes.length,
    machine: cpusAndNode(),
    transports: { in_process: await benchTransport("in_process", events), pty: await benchTransport("pty", events) },
    command: commandLine("bench-hil-console.ts"),
  };
  writeReport(report, values.json, table);
}

await main();
