// `badgebench hil flash --port P [FILE@OFFSET ...]`: flashes a badge over USB serial with
// esptool-js (hil/flasher.ts) and says what was written, where, with which MD5. Progress goes to
// stderr (one updating line on a terminal, plain lines otherwise), the result to stdout.
import fs from "node:fs";
import { flashBadge, FlashError, FlashInputError, parseFlashArgs, type FlashImage, type FlashProgress, type FlashResult } from "../../hil/flasher.ts";

export interface HilFlashOptions {
  port: string;
  /** FILE@OFFSET arguments, or one app FILE (flashed at 0x10000) */
  files: string[];
  baudRate?: number;
  json: boolean;
  /** an updating progress bar on stderr; otherwise one plain line per step */
  progress: boolean;
}

/** Exit status: 0 flashed and verified, 1 the flash failed (the port is released), 2 bad arguments (nothing sent). */
export async function runHilFlash(options: HilFlashOptions): Promise<number> {
  let images: FlashImage[];
  try {
    images = parseFlashArgs(options.files);
  } catch (error) {
    if (!(error instanceof FlashInputError)) throw error;
    return reportError(options, "bad_arguments", error.message, 2);
  }
  const progress = options.progress ? progressBar(images) : progressLines(images, options.port);
  // A pty has no modem lines: flash without the resets rather than fail (the result says so).
  const pty = isPseudoTerminal(options.port);
  let result: FlashResult;
  try {
    result = await flashBadge({ port: options.port, images, baudRate: options.baudRate, ignoreSignalErrors: pty, onProgress: progress.update });
  } catch (error) {
    progress.end();
    if (!(error instanceof FlashError)) throw error;
    return reportError(options, error.code, error.message, 1);
  }
  progress.end();
  report(options, images, result);
  return 0;
}

function isPseudoTerminal(port: string): boolean {
  try {
    return fs.realpathSync(port).startsWith("/dev/pts/");
  } catch {
    return false;
  }
}

const KiB = 1024;
const hex = (value: number) => `0x${value.toString(16)}`;
const kib = (bytes: number) => Math.round(bytes / KiB);

function reportError(options: HilFlashOptions, code: string, message: string, status: number): number {
  if (options.json) process.stdout.write(`${JSON.stringify({ error: { code, message } })}\n`);
  else process.stderr.write(`badgebench: ${message}\n`);
  return status;
}

function report(options: HilFlashOptions, images: FlashImage[], result: FlashResult): void {
  const bytes = result.images.reduce((sum, image) => sum + image.bytes, 0);
  const kibPerS = bytes / KiB / (result.timing.writeMs / 1000);
  if (options.json) {
    const json = {
      object: "hil_flash",
      port: result.port,
      chip: result.chip,
      images: result.images.map((image, index) => ({ file: images[index]!.name, address: hex(image.address), bytes: image.bytes, md5: image.md5, verified: image.verified })),
      reset_into_app: result.resetIntoApp,
      timing_ms: Object.fromEntries(Object.entries(result.timing).map(([name, ms]) => [name.replace(/Ms$/, ""), Math.round(ms)])),
      kib_per_s: Math.round(kibPerS),
    };
    process.stdout.write(`${JSON.stringify(json)}\n`);
    return;
  }
  const lines = result.images.map((image, index) => `${hex(image.address).padEnd(8)} ${images[index]!.name}  ${image.bytes} bytes  md5 ${image.md5}  verified`);
  const reset = result.resetIntoApp ? "reset into the app" : `NOT reset: ${result.port} has no DTR/RTS lines, reset the badge by hand`;
  lines.push(
    `flashed ${result.images.length} image${result.images.length === 1 ? "" : "s"} (${kib(bytes)} KiB) to ${result.chip} on ${result.port} in ` +
      `${(result.timing.totalMs / 1000).toFixed(1)} s (writing ${(result.timing.writeMs / 1000).toFixed(1)} s, ${Math.round(kibPerS)} KiB/s); ${reset}`,
  );
  process.stdout.write(`${lines.join("\n")}\n`);
}

interface ProgressView {
  update: (progress: FlashProgress) => void;
  end: () => void;
}

function stepOf(progress: FlashProgress, images: FlashImage[]): string {
  const image = progress.image === null ? null : images[progress.image]!;
  const what = image ? `${image.name} at ${hex(image.address)}` : "";
  return progress.stage === "connecting" ? "connecting" : progress.stage === "resetting" ? "resetting into the app" : `${progress.stage} ${what}`;
}

/** One line on stderr, redrawn in place: `[#########...........]  45%  writing app.bin at 0x10000  880/1920 KiB`. */
function progressBar(images: FlashImage[]): ProgressView {
  const WIDTH = 30;
  let drawn = false;
  return {
    update(progress) {
      const share = progress.bytesTotal === 0 ? 0 : progress.bytesDone / progress.bytesTotal;
      const filled = Math.round(share * WIDTH);
      const bar = `[${"#".repeat(filled)}${".".repeat(WIDTH - filled)}] ${String(Math.floor(share * 100)).padStart(3)}%`;
      process.stderr.write(`\r\x1b[2K${bar}  ${stepOf(progress, images)}  ${kib(progress.bytesDone)}/${kib(progress.bytesTotal)} KiB`);
      drawn = true;
    },
    end() {
      if (drawn) process.stderr.write("\r\x1b[2K");
    },
  };
}

/** A plain line on stderr each time the step changes (for logs and CI). */
function progressLines(images: FlashImage[], port: string): ProgressView {
  let last = "";
  return {
    update(progress) {
      const step = stepOf(progress, images);
      if (step === last) return;
      last = step;
      process.stderr.write(`${step === "connecting" ? `connecting to ${port}` : step}\n`);
    },
    end() {},
  };
}
