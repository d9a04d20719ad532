// The reference badge's C core (firmware/reference-badge): its unit tests and the fuzz of its
// answer and command parsers run under AddressSanitizer and UndefinedBehaviorSanitizer (`make
// build/test`), and everything the core printed on its console while they ran is read back with
// the TypeScript console codec and followed by the model oracle: the C printer and the badge
// statechart agree line for line, not only the C tests with themselves.
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { closeSync, constants, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, writeSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildAppImage, md5Hex, parseConsoleLine, type ConsoleEvent } from "../../firmware/index.ts";
import { ModelOracle } from "../../hil/model-oracle.ts";
import { openPtyPair } from "../../hil/pty-pair.ts";
import { SerialConsole } from "../../hil/serial-console.ts";

const DIR = join(import.meta.dirname, "../../firmware/reference-badge");
const scratch = mkdtempSync(join(tmpdir(), "reference-badge-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** Builds a target with make (quietly), failing with the compiler's output. */
function buildReferenceBadge(target: string): string {
  execFileSync("make", ["--no-print-directory", "-C", DIR, target], { stdio: ["ignore", "pipe", "pipe"] });
  return join(DIR, target);
}

describe("the reference badge's C core under sanitizers", () => {
  it("passes its unit tests and 200,000 fuzzed answers and command lines with the sanitizers quiet", () => {
    const binary = buildReferenceBadge("build/test");
    const console = join(scratch, "console.txt");
    const seed = String(1 + Math.floor(Math.random() * 2 ** 40));
    const run = spawnSync(binary, [console, "200000", seed], { encoding: "utf8", env: { ...process.env, ASAN_OPTIONS: "detect_leaks=1:abort_on_error=0" } });
    const output = `${run.stdout}${run.stderr}`;
    expect(run.status, `seed ${seed}:\n${output}`).toBe(0);
    expect(output).toMatch(/^fuzz: 200000 rounds, [1-9]\d* parsed as offers, [1-9]\d* of them signed$/m);
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

/** A server that answers each connection with the next raw bytes of `answers`, then closes. */
async function badServer(answers: Array<string | Buffer>): Promise<{ port: number; requests: string[]; close(): Promise<void> }> {
  const requests: string[] = [];
  const server = net.createServer((socket) => {
    let head = "";
    socket.on("data", (chunk) => {
      head += chunk.toString("latin1");
      if (!head.includes("\r\n\r\n") || head === "") return;
      requests.push(head.split("\r\n")[0]!);
      const answer = answers.shift() ?? "HTTP/1.0 500 Internal Server Error\r\n\r\n";
      head = "";
      socket.end(answer);
    });
    socket.on("error", () => {});
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { port: (server.address() as net.AddressInfo).port, requests, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

const http = (body: string | Buffer, head = "HTTP/1.0 200 OK") => Buffer.concat([Buffer.from(`${head}\r\nContent-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n`), Buffer.from(body)]);
const OFFER_MD5 = md5Hex(buildAppImage({ version: "1.5.0", size: 65536 }));
const offer = (lines: string) => http(`V1\nS 3600\n${lines}\n.\n`);

describe("the host badge under sanitizers against a server that answers badly", () => {
  it("refuses every bad answer the way SPEC 3.4 says, keeps its firmware, and goes on answering its console", async () => {
    const binary = buildReferenceBadge("build/reference-badge-asan");
    const dir = mkdtempSync(join(scratch, "host-"));
    const image = join(dir, "badge-1.4.0.bin");
    writeFileSync(image, buildAppImage({ version: "1.4.0", size: 65536 }));
    const flash = join(dir, "flash.bin");
    const nvs = join(dir, "nvs.txt");
    execFileSync(binary, ["flash", "--flash", flash, image], { stdio: "ignore" });
    const cases: Array<[string, Buffer | string, RegExp]> = [
      ["an answer cut after its head", Buffer.concat([Buffer.from("HTTP/1.0 200 OK\r\nContent-Length: 100\r\n\r\n"), Buffer.from("V1\nS 3600\nU 1.5.0")]), /Update check failed: answer cut after 17 bytes/],
      ["an answer without its final line", http("V1\nS 3600\nU 1.5.0\nZ 65536\n"), /Update check failed: unreadable answer \(HTTP 200\): the answer was cut/],
      ["an M that is not hex", offer(`U 1.5.0\nZ 65536\nM ${"g".repeat(32)}\nP /api/badge/ota/download?v=1.5.0`), /Update check failed: offer of 1.5.0 has no valid M/],
      ["a Z of -1", offer(`U 1.5.0\nZ -1\nM ${OFFER_MD5}\nP /d`), /no valid Z/],
      ["a 10,000-byte line", offer(`U 1.5.0\nL ${"x".repeat(10_000)}`), /Update check failed: the answer is larger than 4096 bytes/],
      ["a U not newer than what runs", offer(`U 1.4.0\nZ 65536\nM ${OFFER_MD5}\nP /d`), /Ignored offer: 1.4.0 is not newer than 1.4.0/],
      ["an S of 10^20", http("V1\nS 100000000000000000000\nN 1.5.0\n.\n"), /Up to date \(latest release 1.5.0\)/],
      ["bytes that are not HTTP", Buffer.from([0xff, 0xfe, 0x00, 0x41, 0x0d, 0x0a, 0x0d, 0x0a]), /Update check failed: not an HTTP response/],
      // the headers a resume reads (issue 23), garbled on any answer: a date for Retry-After, a
      // Content-Range too long to keep, and one with a NUL that hides the rest of the head from strstr
      [
        "a Retry-After date and garbled Content-Range headers",
        http("V1\nS 900\nN 1.5.0\n.\n", `HTTP/1.0 200 OK\r\nRetry-After: Fri, 07 Nov 2025 10:00:00 GMT\r\nContent-Range: bytes ${"9".repeat(200)}\r\nContent-Range: bytes 1-2/3\u0000 junk`),
        /Up to date \(latest release 1\.5\.0\)/,
      ],
      // a NUL in a header before Content-Length must not hide the lines after it: read as a string,
      // the head ended there, and the body was read to the close, past its end into the junk
      [
        "a NUL in a header before Content-Length, and bytes past the body",
        Buffer.concat([http("V1\nS 900\nN 1.5.0\n.\n", "HTTP/1.0 200 OK\r\nX-Junk: a\u0000b"), Buffer.from("junk past the Content-Length\n")]),
        /Up to date \(latest release 1\.5\.0\)/,
      ],
      ["a head that never ends", `HTTP/1.0 200 OK\r\n${"X-Pad: y\r\n".repeat(2000)}`, /Update check failed: response head longer than 16384 bytes/],
    ];
    const server = await badServer([http("V1\nS 900\nT 1795000000\n.\n"), ...cases.map(([, answer]) => answer)]);
    execFileSync(binary, ["provision", "--nvs", nvs, "--server", `http://127.0.0.1:${server.port}`, "--token", "dtk_test_badserver"], { stdio: "ignore" });
    const pair = await openPtyPair();
    // the host end first: what the badge prints before anyone listens is not kept
    const serial = await SerialConsole.open({ port: pair.host });
    const badge = spawn(binary, ["run", "--console", pair.device, "--flash", flash, "--nvs", nvs, "--flash-timing", "off", "--link-kib-s", "0", "--stall-ms", "2000"], { stdio: ["ignore", "ignore", "pipe"] });
    let stderr = "";
    badge.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
    const exited = new Promise<number | null>((resolve) => badge.once("close", resolve));
    const oracle = new ModelOracle();
    /** reads events (each one through the oracle) until `until` holds; returns the screens shown */
    const readUntil = async (until: (event: ConsoleEvent) => boolean) => {
      const screens: string[] = [];
      for (;;) {
        const event = await serial.expectEvent(() => true, { timeoutMs: 10_000 });
        expect(oracle.observe(event)?.message ?? null).toBeNull();
        if (event.kind === "screen") screens.push(event.text);
        if (until(event)) return screens;
      }
    };
    /** until the screen the badge shows once it is back in awake.idle */
    const idleScreen = () => {
      let idle = false;
      return (event: ConsoleEvent) => {
        if (event.kind === "state") idle = event.path === "awake.idle";
        return idle && event.kind === "screen";
      };
    };
    try {
      await readUntil(idleScreen());
      for (const [name, , notice] of cases) {
        await serial.send({ name: "check" });
        const screens = await readUntil(idleScreen());
        expect(screens.at(-1), name).toMatch(notice);
      }
      // garbage on the console's command side: each line refused or (a NUL ends a C string) empty, none acted on
      const requestsBefore = server.requests.length;
      const console = openSync(pair.host, constants.O_WRONLY | constants.O_NOCTTY);
      writeSync(console, Buffer.concat([Buffer.from([0x01, 0xff, 0x1b]), Buffer.from("[A\n\0check\nplug\n"), Buffer.from("y".repeat(300)), Buffer.from("\nstatus\n")]));
      closeSync(console);
      const refusals: string[] = [];
      let status: ConsoleEvent | null = null;
      await readUntil((event) => {
        if (event.kind === "refused") refusals.push(event.reason);
        if (event.kind === "status") status = event;
        return event.kind === "status";
      });
      expect(refusals).toEqual([expect.stringMatching(/^unknown command/), expect.stringMatching(/^the simulated badge only/), "the line is longer than 255 bytes"]);
      expect(status).toMatchObject({ version: "1.4.0", slot: "ota_0", state: "awake.idle", token: true });
      expect(server.requests.length).toBe(requestsBefore);
      expect(server.requests.filter((line) => line.startsWith("GET"))).toEqual([]);
    } finally {
      await serial.close();
      badge.kill("SIGTERM");
      await exited;
      await pair.close();
      await server.close();
    }
    expect(await exited).toBe(0);
    expect(stderr).not.toMatch(/Sanitizer|runtime error/);
  });
});

describe("the host badge's clock factor", () => {
  // make takes seconds on a busy machine: once, before the cases, with its own time
  let binary = "";
  beforeAll(() => {
    binary = buildReferenceBadge("build/reference-badge");
  });

  it.each(["0", "2.5", "ten", "1001", ""])("refuses --clock-factor %j with one line and exit 2, before it opens anything", (factor) => {
    const run = spawnSync(binary, ["run", "--console", "/nonexistent/tty", "--flash", "/nonexistent/flash.bin", "--nvs", "/nonexistent/nvs.txt", "--clock-factor", factor], { encoding: "utf8" });
    expect(run.status).toBe(2);
    expect(run.stderr).toBe(`reference-badge: --clock-factor is a whole number from 1 to 1000, got ${factor}\n`);
  });
});
