// The reference badge's C core (firmware/reference-badge): its unit tests and the fuzz of its
// answer and command parsers run under AddressSanitizer and UndefinedBehaviorSanitizer (`make
// build/test`), and everything the core printed on its console while they ran is read back with
// the TypeScript console codec and followed by the model oracle: the C printer and the badge
// statechart agree line for line, not only the C tests with themselves.
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { parseConsoleLine, type ConsoleEvent } from "../../firmware/index.ts";
import { ModelOracle } from "../../hil/model-oracle.ts";

const DIR = join(import.meta.dirname, "../../firmware/reference-badge");
const scratch = mkdtempSync(join(tmpdir(), "reference-badge-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** Builds a target with make (quietly), failing with the compiler's output. */
function buildReferenceBadge(target: string): string {
  execFileSync("make", ["--no-print-directory", "-C", DIR, target], { stdio: ["ignore", "pipe", "pipe"] });
  return join(DIR, target);
}

describe("the reference badge's C core under sanitizers", () => {
  it("passes its unit tests and 200,000 fuzzed answers and command lines with the sanitizers quiet", { timeout: 120_000 }, () => {
    const binary = buildReferenceBadge("build/test");
    const console = join(scratch, "console.txt");
    const seed = String(1 + Math.floor(Math.random() * 2 ** 40));
    const run = spawnSync(binary, [console, "200000", seed], { encoding: "utf8", env: { ...process.env, ASAN_OPTIONS: "detect_leaks=1:abort_on_error=0" } });
    const output = `${run.stdout}${run.stderr}`;
    expect(run.status, `seed ${seed}:\n${output}`).toBe(0);
    expect(output).toMatch(/^fuzz: 200000 rounds, [1-9]\d* parsed as offers$/m);
    expect(output).toMatch(/^\d+ checks, 0 failed$/m);
    expect(output).not.toMatch(/Sanitizer|runtime error/);

    // Every @bb line the core printed parses with firmware/console.ts, and the model allows each in turn.
    const lines = readFileSync(console, "utf8").split("\r\n");
    const oracle = new ModelOracle();
    const events: ConsoleEvent[] = [];
    for (const line of lines) {
      const parsed = parseConsoleLine(line);
      if (parsed === null) continue;
      expect(parsed, line).toMatchObject({ ok: true });
      if (!parsed.ok) continue;
      events.push(parsed.event);
      const deviation = oracle.observe(parsed.event);
      expect(deviation?.message ?? null, `after ${events.length} events`).toBeNull();
    }
    const kinds = new Set(events.map((event) => event.kind));
    for (const kind of ["boot", "state", "screen", "progress", "md5", "switch", "report.stored", "report.sent", "report.cleared", "token.cleared", "tap.queued", "status", "refused"]) {
      expect(kinds, kind).toContain(kind);
    }
  });

  it("the test binary is instrumented by AddressSanitizer and UndefinedBehaviorSanitizer", () => {
    const binary = buildReferenceBadge("build/test");
    const symbols = execFileSync("nm", ["-u", binary], { encoding: "utf8" });
    expect(symbols).toMatch(/__asan_/);
    expect(symbols).toMatch(/__ubsan_/);
  });
});
