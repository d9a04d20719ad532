// The command line every benchmark shares: one option parser (`--json` always, the load options
// and `--cpu-prof` for those that load a server, whole numbers checked with the flag named) and
// one report writer (exactly one JSON object on stdout with `--json`, otherwise the benchmark's
// table ending with the line that reproduces the run; an invalid run exits 1).
import path from "node:path";
import { parseArgs, type ParseArgsConfig } from "node:util";
import type { SyncMode } from "../../server/store/database.ts";
import { log, type LoadSettings } from "./bench-common.ts";

type Options = NonNullable<ParseArgsConfig["options"]>;

/** A mistake on a benchmark's command line: one line on stderr and exit 2, never a stack trace. */
export class BenchUsageError extends Error {}

process.on("uncaughtException", (error) => {
  if (error instanceof BenchUsageError) {
    process.stderr.write(`${path.basename(process.argv[1] ?? "bench")}: ${error.message}\n`);
    process.exit(2);
  }
  process.stderr.write(`${error.stack ?? error}\n`);
  process.exit(1);
});

/** A positive whole number from a command-line flag, or an error naming the flag. */
export function positiveInt(name: string, value: string | undefined): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new BenchUsageError(`--${name} must be a positive whole number, got ${value}`);
  return n;
}

export function syncModeOf(value: string | undefined): SyncMode {
  if (value !== "full" && value !== "normal") throw new BenchUsageError(`--sync must be full or normal, got ${value}`);
  return value;
}

/** The benchmark's own options plus `--json`, parsed from the command line (an unknown flag is an error). */
export function benchArgs<const O extends Options>(options: O) {
  return parseChecked({ options: { ...options, json: { type: "boolean", default: false } } as const }).values as ReturnType<
    typeof parseArgs<{ options: O & { json: { type: "boolean"; default: false } } }>
  >["values"];
}

function parseChecked(config: ParseArgsConfig) {
  try {
    return parseArgs(config);
  } catch (error) {
    // node:util's own words (`Unknown option '--x'`, `Option '--runs <value>' argument missing`)
    throw new BenchUsageError((error as Error).message);
  }
}

/** Flags whose defaults are numbers: `numberOptions({ rooms: 10 })` is `{ rooms: { type: "string", default: "10" } }`. */
export function numberOptions<const D extends Record<string, number>>(defaults: D) {
  return Object.fromEntries(Object.entries(defaults).map(([name, n]) => [name, { type: "string", default: String(n) }])) as { [K in keyof D]: { type: "string"; default: string } };
}

/** autocannon's `--connections`, `--duration` and `--warmup` (seconds) with this benchmark's defaults. */
export const loadOptions = (defaults: { connections: number; duration: number; warmup: number }) => numberOptions(defaults);

/** The autocannon settings that `loadOptions` parsed. */
export function loadSettingsOf(values: { connections: string; duration: string; warmup: string }): LoadSettings {
  return {
    connections: positiveInt("connections", values.connections),
    durationS: positiveInt("duration", values.duration),
    warmupS: positiveInt("warmup", values.warmup),
  };
}

/** `--cpu-prof DIR`: where the server writes its .cpuprofile when it stops. */
export const CPU_PROF_OPTION = { "cpu-prof": { type: "string" } } as const;

export function cpuProfDirOf(values: { "cpu-prof"?: string }): string | undefined {
  return values["cpu-prof"] === undefined ? undefined : path.resolve(values["cpu-prof"]);
}

/**
 * Writes the report: one JSON object with `json`, otherwise `table`'s lines, a blank line and
 * `reproduce: COMMAND`. A report with `valid: false` (failed requests) sets exit code 1.
 */
export function writeReport<R extends { command: string; valid?: boolean }>(report: R, json: boolean, table: (report: R) => string[], cpuProfDir?: string): void {
  if (json) process.stdout.write(`${JSON.stringify(report)}\n`);
  else writeLines([...table(report), "", `reproduce: ${report.command}`]);
  if (cpuProfDir) log(`server CPU profile written to ${cpuProfDir}`);
  if (report.valid === false) process.exitCode = 1;
}

function writeLines(lines: string[]): void {
  process.stdout.write(`${lines.join("\n")}\n`);
}

/** `--sync full|normal` (checked by `syncModeOf`), full unless asked. */
export const SYNC_OPTION = { sync: { type: "string", default: "full" } } as const;

/** Each named flag as a positive whole number (`positiveInt`): `{ rooms: 10, taps: 30 }`. */
export function positiveInts<const N extends string>(values: { [K in N]: string }, names: readonly N[]): { [K in N]: number } {
  return Object.fromEntries(names.map((name) => [name, positiveInt(name, values[name])])) as { [K in N]: number };
}

/** A whole number, 0 or more, from a command-line flag (a warm-up that may be skipped), or an error naming the flag. */
export function wholeNumber(name: string, value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new BenchUsageError(`--${name} must be a whole number, 0 or more, got ${value}`);
  return n;
}
