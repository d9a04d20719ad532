// ESP-IDF panics on the console (issue 25): `PanicWatcher` recognizes the panic handler's report
// among the lines a badge prints (the `Guru Meditation Error: Core N panic'ed (REASON)` line, the
// register dump, `Backtrace: PC:SP ...`; `abort() was called at PC ...`; the task watchdog's
// `task_wdt: Task watchdog got triggered`) and turns it into one crash; `decodeBacktrace` reads
// the backtrace's function names and file:line from the release's ELF with binutils' addr2line
// (readelf first checks the ELF is for the badge's architecture). Nothing is guessed: an address
// no symbol covers is said to be so.
import { execFile } from "node:child_process";
import fs from "node:fs";
import { promisify } from "node:util";
import { z } from "zod";

/** The CPU a badge's firmware is built for, and how readelf names it. */
const MACHINES = {
  xtensa: /Xtensa/i,
  riscv: /RISC-V/i,
  "x86-64": /X86-64/i,
  aarch64: /AArch64/i,
} as const;
export type ElfArch = keyof typeof MACHINES;

/** Where the firmware's ELF is per release: `path` may hold `{version}`. */
export const elfSchema = z.strictObject({
  path: z.string().min(1, 'expected the ELF\'s path, such as "build/badge-{version}.elf"'),
  /** the badge's CPU: xtensa (ESP32, ESP32-S3), riscv (ESP32-C3/C6), x86-64 or aarch64 (a host build) */
  arch: z.enum(Object.keys(MACHINES) as [ElfArch, ...ElfArch[]]).default("xtensa"),
  /** the addr2line that reads this architecture (default: xtensa-esp32-elf-addr2line, riscv32-esp-elf-addr2line, or binutils' addr2line) */
  addr2line: z.string().min(1).optional(),
});
export type ElfConfig = z.output<typeof elfSchema>;

const DEFAULT_ADDR2LINE: Record<ElfArch, string> = { xtensa: "xtensa-esp32-elf-addr2line", riscv: "riscv32-esp-elf-addr2line", "x86-64": "addr2line", aarch64: "addr2line" };

export interface BacktraceFrame {
  pc: string;
  sp: string;
}

export interface Crash {
  /** what crashed it: `LoadProhibited`, `abort() at 0x400d1234`, `Interrupt wdt timeout on CPU0`, `task watchdog` */
  reason: string;
  core: number | null;
  /** the report's lines as printed */
  lines: string[];
  frames: BacktraceFrame[];
  /** what was wrong with the report (a line cut in the middle, a backtrace cut), or null */
  damaged: string | null;
}

const GURU = /^Guru Meditation Error: Core\s+(\d+) panic'ed \((.+)\)\.?/;
const ABORT = /^abort\(\) was called at PC (0x[0-9a-fA-F]+) on core (\d+)/;
const TASK_WDT = /task_wdt: Task watchdog got triggered/;
/** the start of one of them, as far as a cut line still shows it */
const STARTS = [/^Guru Meditation/, /^abort\(\)/, TASK_WDT];
const BACKTRACE = /^Backtrace:(.*)$/;
const FRAME = /^(0x[0-9a-fA-F]+):(0x[0-9a-fA-F]+)$/;
/** where a report is over without its backtrace: the restart, the boot ROM's banner, the next boot */
const OVER = /^(Rebooting\.\.\.|ets [A-Z][a-z]{2} |rst:0x|@bb boot )/;

/** Follows console lines; `line()` returns the crash when a panic report is complete. */
export class PanicWatcher {
  #open: Crash | null = null;

  line(raw: string): Crash | null {
    const text = raw.replace(/\r$/, "").replace(/^\s+/, "");
    if (this.#open) {
      const crash = this.#open;
      const backtrace = BACKTRACE.exec(text);
      if (backtrace) {
        crash.lines.push(text);
        readFrames(crash, backtrace[1]!);
        return this.#close();
      }
      if (OVER.test(text)) return this.#close("the report ended without a backtrace");
      // the register dump, and a second start (the task watchdog's abort), belong to the same crash
      crash.lines.push(text);
      return null;
    }
    const start = startOf(text);
    if (start) this.#open = start;
    return null;
  }

  /** The report in progress when the console went quiet or the session ended, or null. */
  flush(): Crash | null {
    return this.#open ? this.#close("the report was cut off before its backtrace") : null;
  }

  #close(damage?: string): Crash {
    const crash = this.#open!;
    this.#open = null;
    if (damage && crash.frames.length === 0) crash.damaged = [crash.damaged, damage].filter(Boolean).join("; ");
    return crash;
  }
}

function startOf(text: string): Crash | null {
  const guru = GURU.exec(text);
  if (guru) return { reason: guru[2]!, core: Number(guru[1]), lines: [text], frames: [], damaged: null };
  const abort = ABORT.exec(text);
  if (abort) return { reason: `abort() at ${abort[1]}`, core: Number(abort[2]), lines: [text], frames: [], damaged: null };
  if (TASK_WDT.test(text)) return { reason: "task watchdog", core: null, lines: [text], frames: [], damaged: null };
  if (STARTS.some((start) => start.test(text))) {
    return { reason: "unknown", core: null, lines: [text], frames: [], damaged: `its first line was cut in the middle: ${JSON.stringify(text)}` };
  }
  return null;
}

function readFrames(crash: Crash, text: string): void {
  for (const word of text.trim().split(/\s+/)) {
    if (word === "" || word === "|<-CORRUPTED") continue;
    const frame = FRAME.exec(word);
    if (!frame) {
      crash.damaged = `the backtrace was cut at ${JSON.stringify(word)} after ${crash.frames.length} frames`;
      return;
    }
    crash.frames.push({ pc: frame[1]!, sp: frame[2]! });
  }
}

/** An ELF that cannot decode the backtrace: missing, of another architecture, unreadable. One line. */
export class ElfError extends Error {
  override name = "ElfError";
}

export interface DecodedFrame {
  pc: string;
  /** innermost first when calls were inlined; empty when no symbol of the ELF covers the address */
  functions: Array<{ name: string; file: string | null; line: number | null }>;
}

const run = promisify(execFile);

/** The ELF of `version` as the rig file names it. */
export function elfPath(elf: ElfConfig, version: string): string {
  return elf.path.replaceAll("{version}", version);
}

/** Checks the ELF is there and built for `elf.arch` (readelf's Machine), then decodes each frame's PC with addr2line. */
export async function decodeBacktrace(elf: ElfConfig, version: string, frames: BacktraceFrame[]): Promise<DecodedFrame[]> {
  const file = elfPath(elf, version);
  if (!fs.existsSync(file)) throw new ElfError(`the ELF of ${version} is not at ${file} (the rig file's elf.path)`);
  let header: string;
  try {
    header = (await run("readelf", ["-h", file])).stdout;
  } catch (error) {
    throw new ElfError(`${file} is not an ELF readelf can read: ${oneLine(error)}`);
  }
  const machine = /Machine:\s*(.+)/.exec(header)?.[1]?.trim() ?? "unknown";
  if (!MACHINES[elf.arch].test(machine)) {
    throw new ElfError(`${file} is built for ${machine}, and the badge is ${elf.arch} (the rig file's elf.arch): point elf.path at the release's own ELF`);
  }
  if (frames.length === 0) return [];
  const program = elf.addr2line ?? DEFAULT_ADDR2LINE[elf.arch];
  let output: string;
  try {
    output = (await run(program, ["-e", file, "-f", "-i", "-C", "-a", ...frames.map((frame) => frame.pc)])).stdout;
  } catch (error) {
    throw new ElfError(`${program} could not read ${file}: ${oneLine(error)}`);
  }
  return readAddr2line(output, frames);
}

/** addr2line -a -f -i: each address on a line of its own, then a function and a file:line per (inlined) call. */
function readAddr2line(output: string, frames: BacktraceFrame[]): DecodedFrame[] {
  const lines = output.trimEnd().split("\n");
  const decoded: DecodedFrame[] = [];
  let index = 0;
  for (const frame of frames) {
    index++; // the address line
    const functions: DecodedFrame["functions"] = [];
    while (index < lines.length && !/^0x[0-9a-f]+$/.test(lines[index]!)) {
      const name = lines[index]!;
      const where = lines[index + 1] ?? "??:0";
      index += 2;
      if (name === "??") continue;
      const at = /^(.*):(\d+)(?: \(discriminator \d+\))?$/.exec(where);
      functions.push({ name, file: at && at[1] !== "??" ? at[1]! : null, line: at ? Number(at[2]) : null });
    }
    decoded.push({ pc: frame.pc, functions });
  }
  return decoded;
}

/** The crash in one paragraph: what, where, and each frame decoded (or why not). */
export function describeCrash(crash: Crash, decoded: DecodedFrame[] | ElfError | null): string {
  const core = crash.core === null ? "" : ` on core ${crash.core}`;
  const lines = [`the badge crashed${core}: ${crash.reason}${crash.damaged ? ` (${crash.damaged})` : ""}`];
  if (crash.frames.length === 0) return lines[0]!;
  if (decoded === null) lines.push(`backtrace (no elf in the rig file to decode it): ${crash.frames.map((frame) => frame.pc).join(" ")}`);
  else if (decoded instanceof ElfError) lines.push(`backtrace not decoded: ${decoded.message}: ${crash.frames.map((frame) => frame.pc).join(" ")}`);
  else {
    lines.push("backtrace:");
    for (const [index, frame] of decoded.entries()) {
      const where = frame.functions.map((fn) => `${fn.name}${fn.file ? ` at ${fn.file}:${fn.line ?? "?"}` : ""}`).join(" inlined in ");
      lines.push(`  #${index} ${frame.pc} ${where || "(no symbol of the ELF covers this address)"}`);
    }
  }
  return lines.join("\n");
}

const oneLine = (error: unknown) => ((error as { stderr?: string }).stderr || (error as Error).message).trim().split("\n")[0];
