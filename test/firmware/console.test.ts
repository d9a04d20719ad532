import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  BOOT_CAUSES,
  ConsoleFormatError,
  formatConsoleCommand,
  formatConsoleEvent,
  OTA_SLOTS,
  parseConsoleCommand,
  parseConsoleLine,
  POWER_SOURCES,
  TOKEN_REQUESTS,
  type ConsoleCommand,
  type ConsoleEvent,
} from "../../firmware/index.ts";

const MD5 = "0123456789abcdef0123456789abcdef";

describe("console events", () => {
  it.each<[ConsoleEvent, string]>([
    [{ kind: "boot", slot: "ota_1", version: "1.5.0", cause: "restart" }, "@bb boot slot=ota_1 version=1.5.0 cause=restart"],
    [{ kind: "state", path: "online.downloading" }, "@bb state path=online.downloading"],
    [{ kind: "progress", bytes: 65536, total: 262144 }, "@bb progress bytes=65536 total=262144"],
    [{ kind: "md5", result: "mismatch", got: MD5, want: MD5.replace("0", "f") }, `@bb md5 result=mismatch got=${MD5} want=f${MD5.slice(1)}`],
    [{ kind: "switch", slot: "ota_0" }, "@bb switch slot=ota_0"],
    [
      { kind: "screen", text: "Updating to 1.5.0\nDownloading 25% (64 of 256 KiB)" },
      '@bb screen text="Updating to 1.5.0\\nDownloading 25% (64 of 256 KiB)"',
    ],
    [{ kind: "screen", text: "" }, '@bb screen text=""'],
    [{ kind: "report.sent", report: "ok|1.5.0" }, "@bb report.sent report=ok|1.5.0"],
    [{ kind: "token.cleared", request: "sync" }, "@bb token.cleared request=sync"],
    [{ kind: "tap.queued", n: 3, uid: "04A1B2C3D0", at: 1795000000 }, "@bb tap.queued n=3 uid=04A1B2C3D0 at=1795000000"],
    [
      { kind: "status", version: "1.4.0", slot: "ota_0", state: "awake.idle", mv: 3950, power: "charging", token: true, report: null, taps: 0 },
      "@bb status version=1.4.0 slot=ota_0 state=awake.idle mv=3950 power=charging token=yes taps=0",
    ],
    [{ kind: "refused", command: "check now", reason: 'unknown command "check now"' }, '@bb refused command="check now" reason="unknown command \\"check now\\""'],
  ])("writes %j as %s and reads it back", (event, line) => {
    expect(formatConsoleEvent(event)).toBe(line);
    expect(parseConsoleLine(line)).toEqual({ ok: true, event });
  });

  it("escapes control characters, quotes and backslashes so any text stays one line", () => {
    const line = formatConsoleEvent({ kind: "screen", text: 'a\tb\\c"d\u0000\u001b[0m\u0085é' });
    expect(line).toBe('@bb screen text="a\\tb\\\\c\\"d\\x00\\x1b[0m\\x85é"');
    expect(parseConsoleLine(line)).toEqual({ ok: true, event: { kind: "screen", text: 'a\tb\\c"d\u0000\u001b[0m\u0085é' } });
  });

  it("reads CRLF line ends, upper-case hex escapes and a quoted value that needs no quotes", () => {
    expect(parseConsoleLine('@bb state path="awake.idle"\r')).toEqual({ ok: true, event: { kind: "state", path: "awake.idle" } });
    expect(parseConsoleLine('@bb screen text="\\x41\\x7E"')).toEqual({ ok: true, event: { kind: "screen", text: "A~" } });
  });

  it.each([
    "I (312) cpu_start: Starting scheduler on PRO CPU.",
    "\u001b[0;32mI (412) badge: @bb boot slot=ota_0\u001b[0m",
    "ets Jun  8 2016 00:22:57",
    "rst:0x1 (POWERON_RESET),boot:0x13 (SPI_FAST_FLASH_BOOT)",
    "",
    "\uFFFD\uFFFD\u0000x",
    "@bbq state path=x",
    " @bb state path=awake.idle",
    // a power cut in the middle of an event line: the boot ROM's banner follows on the same line
    '@bb screen text="Updating to 1.5.0\\nDownloading 19% (49 of 256 KiB)"ets Jul 29 2019 12:21:46\r',
    '@bb screen text="Updating to 1.5.0\\nDownloadets Jun  8 2016 00:22:57',
    "@bb progress bytes=50ESP-ROM:esp32s3-20210327",
  ])("takes %j as noise", (line) => {
    expect(parseConsoleLine(line)).toBeNull();
  });

  it("reads an event whose quoted text mentions a boot ROM banner: only a banner ending the line is a reset", () => {
    expect(parseConsoleLine('@bb screen text="ESP-ROM:esp32s3 seen; ets Jul 29 2019 12:21:46"')).toEqual({
      ok: true,
      event: { kind: "screen", text: "ESP-ROM:esp32s3 seen; ets Jul 29 2019 12:21:46" },
    });
  });

  it("takes a status without a pending report as report: null, and one with a report", () => {
    const line = '@bb status version=1.4.0 slot=ota_0 state=asleep mv=3700 power=battery token=no report="err|1.5.0|MD5 mismatch" taps=2';
    expect(parseConsoleLine(line)).toMatchObject({ ok: true, event: { token: false, report: "err|1.5.0|MD5 mismatch", taps: 2 } });
  });

  it.each([
    ["@bb", "expected an event kind"],
    ["@bb ", "expected an event kind"],
    ["@bb Boot", "expected an event kind"],
    ["@bb reboot", 'unknown event kind "reboot"; the kinds are boot, state'],
    ["@bb state", "state needs path="],
    ["@bb state path=", 'path= has no value; an empty one is written ""'],
    ["@bb state  path=awake.idle", "expected key=value"],
    ["@bb state path=awake.idle ", "expected key=value"],
    ["@bb state path=awake.idle\tx", 'expected a space before the next key=value, got "\\t"'],
    ["@bb state path=a path=b", "path appears twice"],
    ["@bb state path=awake.idle extra=1", "state has no field extra; its fields are path"],
    ["@bb state path=awake.idle constructor=1", "state has no field constructor"],
    ["@bb state Path=awake.idle", "expected key=value with a lowercase key"],
    ["@bb state path=Awake", 'path="Awake" is not a dotted state path'],
    ["@bb boot slot=ota_2 version=1.4.0 cause=restart", 'slot="ota_2" is not one of ota_0, ota_1'],
    ["@bb boot slot=ota_0 version=1.4 cause=restart", 'version="1.4" is not a version such as 1.4.0'],
    ["@bb boot slot=ota_0 version=1.4.0 cause=reset", 'cause="reset" is not one of power-on, restart'],
    ["@bb progress bytes=-1 total=5", 'bytes="-1" is not a whole number'],
    ["@bb progress bytes=007 total=5", "is not a whole number"],
    [`@bb md5 result=ok got=${MD5.toUpperCase()} want=${MD5}`, "is not 32 lowercase hex digits"],
    ["@bb tap.queued n=1 uid=04a1b2c3d0 at=0", "is not a card UID of 8 to 20 upper-case hex digits"],
    ["@bb status version=1.4.0 slot=ota_0 state=asleep mv=3700 power=battery token=1 taps=0", 'token="1" is not yes or no'],
    ['@bb report.sent report="ok\\n1.5.0"', "is not text without control characters"],
    ['@bb screen text="never closed', "the quoted value opened at character 17 is never closed"],
    ['@bb screen text="a\\qb"', "unknown escape \\q"],
    ['@bb screen text="a\\x4"', "unknown escape \\x"],
    ['@bb screen text="a\tb"', "a raw control character inside quotes"],
    ['@bb screen text="a"b', "expected a space before the next key=value"],
    ["@bb screen text=a\\b", "expected a space before the next key=value"],
  ])("refuses %j", (line, message) => {
    const parsed = parseConsoleLine(line);
    expect(parsed).toMatchObject({ ok: false });
    if (parsed?.ok !== false) return;
    expect(parsed.message).toContain(message);
    expect(parsed.message).toMatch(/^console line "/);
  });

  it.each<[string, ConsoleEvent]>([
    ["a number that is not whole", { kind: "progress", bytes: 1.5, total: 2 }],
    ["a NaN", { kind: "progress", bytes: Number.NaN, total: 2 }],
    ["a bad slot", { kind: "switch", slot: "factory" as "ota_0" }],
    ["a report with a newline", { kind: "report.stored", report: "err|1.5.0|a\nb" }],
    ["an unknown kind", { kind: "nope" } as unknown as ConsoleEvent],
  ])("refuses to write %s", (_, event) => {
    expect(() => formatConsoleEvent(event)).toThrow(ConsoleFormatError);
  });
});

const kindPath = fc.stringMatching(/^[a-z][A-Za-z]{0,8}(\.[a-z][A-Za-z]{0,8}){0,2}$/);
const uid = fc.stringMatching(/^[0-9A-F]{8,20}$/);
const md5 = fc.stringMatching(/^[0-9a-f]{32}$/);
const whole = fc.nat({ max: Number.MAX_SAFE_INTEGER });
const anyText = fc.string({ unit: "binary", maxLength: 80 });
const oneLine = anyText.filter((text) => !/\p{Cc}/u.test(text));
const versionText = fc.tuple(fc.nat(999), fc.nat(999), fc.nat(999), fc.constantFrom("", "-rc.1", "+build.7")).map(([a, b, c, suffix]) => `${a}.${b}.${c}${suffix}`);

const anyEvent: fc.Arbitrary<ConsoleEvent> = fc.oneof(
  fc.record({ kind: fc.constant("boot" as const), slot: fc.constantFrom(...OTA_SLOTS), version: versionText, cause: fc.constantFrom(...BOOT_CAUSES) }),
  fc.record({ kind: fc.constant("state" as const), path: kindPath }),
  fc.record({ kind: fc.constant("screen" as const), text: anyText }),
  fc.record({ kind: fc.constant("progress" as const), bytes: whole, total: whole }),
  fc.record({ kind: fc.constant("md5" as const), result: fc.constantFrom("ok" as const, "mismatch" as const), got: md5, want: md5 }),
  fc.record({ kind: fc.constant("switch" as const), slot: fc.constantFrom(...OTA_SLOTS) }),
  fc.record({ kind: fc.constantFrom("report.stored" as const, "report.sent" as const, "report.cleared" as const), report: oneLine }),
  fc.record({ kind: fc.constant("token.cleared" as const), request: fc.constantFrom(...TOKEN_REQUESTS) }),
  fc.record({ kind: fc.constant("tap.queued" as const), n: whole, uid, at: whole }),
  fc.record({
    kind: fc.constant("status" as const),
    version: versionText,
    slot: fc.constantFrom(...OTA_SLOTS),
    state: kindPath,
    mv: whole,
    power: fc.constantFrom(...POWER_SOURCES),
    token: fc.boolean(),
    report: fc.option(oneLine, { nil: null }),
    taps: whole,
  }),
  fc.record({ kind: fc.constant("refused" as const), command: anyText, reason: anyText }),
);

describe("console round trip", () => {
  it("reads back every event it writes, as one line with the prefix", () => {
    fc.assert(
      fc.property(anyEvent, (event) => {
        const line = formatConsoleEvent(event);
        expect(line).toMatch(/^@bb [a-z0-9.]+( |$)/);
        expect(line).not.toMatch(/[\n\r]/);
        expect(parseConsoleLine(line)).toEqual({ ok: true, event });
      }),
      { numRuns: 500 },
    );
  });

  it("never throws on arbitrary input after the prefix", () => {
    fc.assert(
      fc.property(anyText, (rest) => {
        const parsed = parseConsoleLine(`@bb ${rest}`);
        expect(parsed).not.toBeNull();
      }),
      { numRuns: 500 },
    );
  });
});

describe("console commands", () => {
  it.each<[ConsoleCommand, string]>([
    [{ name: "check" }, "check"],
    [{ name: "sync" }, "sync"],
    [{ name: "tap", uid: "04A1B2C3D4E5F6" }, "tap 04A1B2C3D4E5F6"],
    [{ name: "reboot" }, "reboot"],
    [{ name: "status" }, "status"],
    [{ name: "plug" }, "plug"],
    [{ name: "unplug" }, "unplug"],
  ])("writes %j as %s and reads it back", (command, line) => {
    expect(formatConsoleCommand(command)).toBe(line);
    expect(parseConsoleCommand(line)).toEqual({ ok: true, command });
  });

  it("reads what a person types: extra spaces, tabs, CR", () => {
    expect(parseConsoleCommand("  tap\t04A1B2C3D0 \r")).toEqual({ ok: true, command: { name: "tap", uid: "04A1B2C3D0" } });
    expect(parseConsoleCommand("\r")).toBeNull();
    expect(parseConsoleCommand("")).toBeNull();
  });

  it.each([
    ["Check", 'unknown command "Check"; the commands are check, sync, tap'],
    ["tap", "tap takes one card UID"],
    ["tap 04a1b2c3d0", "tap takes one card UID"],
    ["tap 04A1B2C3D0 04A1B2C3D1", "tap takes one card UID"],
    ["sync now", 'sync takes no arguments (got "now")'],
  ])("refuses %j", (line, message) => {
    expect(parseConsoleCommand(line)).toEqual({ ok: false, message: expect.stringContaining(message) });
  });

  it("refuses to write a bad UID or an unknown command", () => {
    expect(() => formatConsoleCommand({ name: "tap", uid: "04 A1" })).toThrow(ConsoleFormatError);
    expect(() => formatConsoleCommand({ name: "format" } as unknown as ConsoleCommand)).toThrow(/unknown console command "format"/);
  });
});
