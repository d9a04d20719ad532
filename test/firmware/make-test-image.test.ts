// Runs scripts/cli/make-test-image.ts as a user would (node --import tsx) into a temporary directory,
// and checks the size parser it exports.
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { containsBytes, CRASH_ON_BOOT_MARKER, inspectAppImage, md5Hex, sha256Hex } from "../../firmware/index.ts";
import { parseSize } from "../../scripts/cli/make-test-image.ts";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const SCRIPT = path.join(ROOT, "scripts/cli/make-test-image.ts");
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "badgebench-test-image-"));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function makeImage(...args: string[]) {
  const result = spawnSync(process.execPath, ["--import", "tsx", SCRIPT, ...args], { cwd: ROOT, encoding: "utf8", timeout: 20_000 });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

describe("make-test-image script", () => {
  it("writes a valid image and prints one JSON object describing it", () => {
    const out = path.join(dir, "canary.bin");
    const result = makeImage("--version", "1.4.0-rc.1", "--out", out, "--size", "1.9MiB", "--project", "badge-fw", "--json");
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout.trimEnd().split("\n")).toHaveLength(1);
    const bytes = new Uint8Array(fs.readFileSync(out));
    expect(JSON.parse(result.stdout)).toEqual({ path: out, version: "1.4.0-rc.1", size: 1992288, md5: md5Hex(bytes), sha256: sha256Hex(bytes) });
    const inspection = inspectAppImage(bytes);
    expect(inspection.problems).toEqual([]);
    expect(inspection.appDesc).toMatchObject({ version: "1.4.0-rc.1", projectName: "badge-fw" });
  });

  it("prints one line by default, and says when it rounded the size", () => {
    const out = path.join(dir, "plain.bin");
    const result = makeImage("--version", "1.0.0", "--out", out, "--size", "0x1001");
    expect(result.code, result.stderr).toBe(0);
    const md5 = md5Hex(new Uint8Array(fs.readFileSync(out)));
    expect(result.stdout).toBe(`wrote ${out}: version 1.0.0, 4096 bytes (rounded down from 4097: image sizes are multiples of 16), md5 ${md5}\n`);
  });

  it("embeds the Wi-Fi password and the crash marker, and leaves out the digest, when asked", () => {
    const out = path.join(dir, "leaky.bin");
    const result = makeImage("--version", "1.5.0", "--out", out, "--size", "64KiB", "--wifi-password", "lab-wifi-2026", "--crash-on-boot", "--no-hash");
    expect(result.code, result.stderr).toBe(0);
    const bytes = new Uint8Array(fs.readFileSync(out));
    expect(bytes.length).toBe(65536);
    expect(containsBytes(bytes, Buffer.from("WIFI_PASS=lab-wifi-2026"))).toBe(true);
    expect(containsBytes(bytes, Buffer.from(CRASH_ON_BOOT_MARKER))).toBe(true);
    const inspection = inspectAppImage(bytes);
    expect(inspection.problems).toEqual([]);
    expect(inspection.hashAppended).toBe(false);
  });

  it.each([
    [["--out", "x.bin"], /Missing required argument: version/],
    [["--version", "1.0.0", "--out", "x.bin", "--size", "big"], /--size 'big' is not a size/],
    [["--version", "1.0.0", "--out", "x.bin", "--size", "100"], /size 100 is too small: these options need at least 368 bytes/],
    [["--version", "1.0.0", "--out", "x.bin", "--wifi-password", "short"], /wifiPassword must be a WPA2 passphrase/],
    [["--version", "1.0.0", "--out", "x.bin", "--colour"], /Unknown argument: colour/],
  ])("refuses %j as a usage mistake (exit 2) and writes nothing", (args, message) => {
    const result = makeImage(...args);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(message);
    expect(result.stdout).toBe("");
    expect(fs.existsSync(path.join(ROOT, "x.bin"))).toBe(false);
  });

  it("creates the output's directory", () => {
    const out = path.join(dir, "build", "nested", "x.bin");
    const result = makeImage("--version", "1.0.0", "--out", out, "--json");
    expect(result.code).toBe(0);
    expect(fs.statSync(out).size).toBe(JSON.parse(result.stdout).size);
  });

  it("reports a file it cannot write as one JSON error (exit 1)", () => {
    const notADirectory = path.join(dir, "plain-file");
    fs.writeFileSync(notADirectory, "");
    const result = makeImage("--version", "1.0.0", "--out", path.join(notADirectory, "x.bin"), "--json");
    expect(result.code).toBe(1);
    expect(JSON.parse(result.stdout)).toEqual({ error: { code: "write_failed", message: expect.stringContaining("EEXIST") } });
  });
});

describe("parseSize", () => {
  it.each([
    ["65536", 65536],
    ["0x1E0000", 0x1e0000],
    ["0x1e0000", 0x1e0000],
    ["64KiB", 65536],
    ["1.9MiB", 1992294],
    ["2 MiB", 2 * 1024 * 1024],
  ])("reads %s as %d", (text, bytes) => {
    expect(parseSize(text)).toBe(bytes);
  });

  it.each(["", "big", "-5", "1.5", "64kb", "0x", "1e6", "2GiB"])("refuses %j", (text) => {
    expect(parseSize(text)).toBeNull();
  });
});
