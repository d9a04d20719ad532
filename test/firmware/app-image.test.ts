import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  APP_DESC_MAGIC,
  buildAppImage,
  containsBytes,
  CRASH_ON_BOOT_MARKER,
  findVersionString,
  IMAGE_MAGIC,
  ImageOptionsError,
  inspectAppImage,
  md5Hex,
  sha256Hex,
} from "../../firmware/app-image.ts";
import { OTA_SLOT_BYTES } from "../../firmware/manifest.ts";

const ascii = (text: string) => new TextEncoder().encode(text);

/** A copy of `image` with `change` applied, so one test cannot spoil another's image. */
function altered(image: Uint8Array, change: (copy: Uint8Array) => void): Uint8Array {
  const copy = image.slice();
  change(copy);
  return copy;
}

describe("buildAppImage then inspectAppImage", () => {
  it.each([
    ["the smallest", 368],
    ["4 KiB", 4096],
    ["64 KiB (the default)", undefined],
    ["1 MiB", 1024 * 1024],
    ["just under the OTA slot", OTA_SLOT_BYTES - 4096],
    ["exactly the OTA slot", OTA_SLOT_BYTES],
  ])("round-trips %s", (_name, size) => {
    const image = buildAppImage({ version: "1.4.0", size, projectName: "attendance-badge" });
    expect(image.length).toBe(size ?? 64 * 1024);
    const inspection = inspectAppImage(image);
    expect(inspection.problems).toEqual([]);
    expect(inspection.magic).toBe(IMAGE_MAGIC);
    expect(inspection.segmentCount).toBe(2);
    expect(inspection.hashAppended).toBe(true);
    expect(inspection.chipId).toBe(0);
    expect(inspection.entryAddress).toBe(0x400d1234);
    expect(inspection.segments.map((s) => s.loadAddress)).toEqual([0x3f400020, 0x400d0020]);
    expect(inspection.segments[0]!.offset).toBe(0x20);
    for (const segment of inspection.segments) expect(segment.length % 4).toBe(0);
    expect(inspection.appDesc).toEqual({
      magic: APP_DESC_MAGIC,
      secureVersion: 0,
      version: "1.4.0",
      projectName: "attendance-badge",
      time: "12:00:00",
      date: "Nov 22 2026",
      idfVersion: "v5.1.4",
    });
    expect(inspection.checksum!.stored).toBe(inspection.checksum!.computed);
    expect(inspection.sha256!.stored).toBe(inspection.sha256!.computed);
  });

  it("checks the footer independently: 3 zero bytes, the checksum, then SHA-256 of bytes 0..checksum", () => {
    const image = buildAppImage({ version: "2.0.0", size: 8192 });
    const checksumOffset = image.length - 33;
    expect((checksumOffset + 1) % 16).toBe(0);
    expect([...image.subarray(checksumOffset - 3, checksumOffset)]).toEqual([0, 0, 0]);
    let checksum = 0xef;
    for (const segment of inspectAppImage(image).segments) {
      for (const byte of image.subarray(segment.offset, segment.offset + segment.length)) checksum ^= byte;
    }
    expect(image[checksumOffset]).toBe(checksum);
    const digest = createHash("sha256").update(image.subarray(0, checksumOffset + 1)).digest("hex");
    expect(Buffer.from(image.subarray(checksumOffset + 1)).toString("hex")).toBe(digest);
  });

  it("writes the header fields the bootloader reads", () => {
    const image = buildAppImage({ version: "1.0.0", chipId: 5 });
    expect(image[0]).toBe(0xe9);
    expect(image[1]).toBe(2);
    expect(image[8]).toBe(0xee);
    expect(image[0x17]).toBe(1);
    expect(inspectAppImage(image).chipId).toBe(5);
  });

  it("builds an image without the appended digest", () => {
    const image = buildAppImage({ version: "1.0.0", size: 4096, hashAppended: false });
    expect(image.length).toBe(4096);
    const inspection = inspectAppImage(image);
    expect(inspection.problems).toEqual([]);
    expect(inspection.hashAppended).toBe(false);
    expect(inspection.sha256).toBeNull();
    expect(image[0x17]).toBe(0);
  });

  it("rounds a size that is not a multiple of 16 down to one", () => {
    for (const size of [4097, 4100, 4111]) expect(buildAppImage({ version: "1.0.0", size }).length).toBe(4096);
    const image = buildAppImage({ version: "1.0.0", size: Math.floor(1.9 * 1024 * 1024) });
    expect(image.length).toBe(1992288);
    expect(inspectAppImage(image).problems).toEqual([]);
  });

  it("gives the same bytes for the same options, and other filler for another seed", () => {
    const a = buildAppImage({ version: "1.4.0", size: 4096 });
    expect(md5Hex(buildAppImage({ version: "1.4.0", size: 4096 }))).toBe(md5Hex(a));
    expect(md5Hex(buildAppImage({ version: "1.4.0", size: 4096, seed: 7 }))).not.toBe(md5Hex(a));
  });

  it("puts the version in plain text as well as in the descriptor", () => {
    const image = buildAppImage({ version: "3.1.4-rc.2", size: 4096, projectName: "badge" });
    expect(containsBytes(image, ascii("badge firmware 3.1.4-rc.2\0"))).toBe(true);
  });

  it.each<[string, Parameters<typeof buildAppImage>[0], RegExp]>([
    ["a size below the minimum", { version: "1.0.0", size: 352 }, /size 352 is too small: these options need at least 368 bytes/],
    ["a size that is not whole", { version: "1.0.0", size: 4096.5 }, /size 4096.5 must be a whole number/],
    ["a size above 16 MiB", { version: "1.0.0", size: 32 * 1024 * 1024 }, /at most 16777216/],
    ["an empty version", { version: "" }, /version "" must be 1 to 31 bytes/],
    ["a version of 32 bytes", { version: "1.0.0-" + "a".repeat(26) }, /must be 1 to 31 bytes/],
    ["a version with a NUL", { version: "1.0.0\0" }, /no control characters/],
    ["a project name of 32 bytes", { version: "1.0.0", projectName: "p".repeat(32) }, /projectName/],
    ["a Wi-Fi password of 7 characters", { version: "1.0.0", wifiPassword: "short12" }, /wifiPassword must be a WPA2 passphrase/],
    ["a chip id above 0xFFFF", { version: "1.0.0", chipId: 0x10000 }, /chipId 65536/],
  ])("refuses %s with an ImageOptionsError", (_name, options, message) => {
    expect(() => buildAppImage(options)).toThrow(ImageOptionsError);
    expect(() => buildAppImage(options)).toThrow(message);
  });

  it("leaves a password out unless asked, and never finds it in the filler by chance", () => {
    const password = "hunter22";
    const clean = buildAppImage({ version: "1.4.0", size: 1024 * 1024 });
    const leaky = buildAppImage({ version: "1.4.0", size: 1024 * 1024, wifiPassword: password });
    expect(containsBytes(clean, ascii(password))).toBe(false);
    expect(containsBytes(leaky, ascii(password))).toBe(true);
    expect(containsBytes(leaky, ascii(`WIFI_PASS=${password}\0`))).toBe(true);
    expect(inspectAppImage(leaky).problems).toEqual([]);
  });

  it("embeds the crash-on-boot marker only when asked", () => {
    const marker = ascii(CRASH_ON_BOOT_MARKER);
    const crashing = buildAppImage({ version: "1.4.0", crashOnBoot: true });
    expect(containsBytes(crashing, marker)).toBe(true);
    expect(inspectAppImage(crashing).problems).toEqual([]);
    expect(containsBytes(buildAppImage({ version: "1.4.0" }), marker)).toBe(false);
    expect(containsBytes(buildAppImage({ version: "1.4.0", crashOnBoot: false }), marker)).toBe(false);
  });

  it("keeps a short version out of the filler, where it would appear by chance", () => {
    // Two random bytes in 1 MiB: about 16 chance occurrences unless the builder removes them.
    const image = buildAppImage({ version: "42", size: 1024 * 1024 });
    const filler = inspectAppImage(image).segments[1]!;
    expect(containsBytes(image.subarray(filler.offset, filler.offset + filler.length), ascii("42"))).toBe(false);
  });
});

describe("inspectAppImage problems", () => {
  const image = buildAppImage({ version: "1.4.0", size: 16 * 1024 });
  const { segments } = inspectAppImage(image);
  const filler = segments[1]!;

  it("reports a checksum and a SHA-256 mismatch when one byte of segment data changes", () => {
    const corrupt = altered(image, (copy) => (copy[filler.offset + 100]! ^= 0x01));
    const { problems } = inspectAppImage(corrupt);
    expect(problems).toHaveLength(2);
    expect(problems[0]).toMatch(/^checksum mismatch: stored 0x[0-9A-F]{2}, segment data gives 0x[0-9A-F]{2}$/);
    expect(problems[1]).toMatch(/^SHA-256 mismatch/);
  });

  it("reports only the SHA-256 when the checksum still adds up", () => {
    // Flipping the same bit in two bytes of segment data leaves the xor checksum unchanged.
    const corrupt = altered(image, (copy) => {
      copy[filler.offset]! ^= 0x10;
      copy[filler.offset + 1]! ^= 0x10;
    });
    expect(inspectAppImage(corrupt).problems).toEqual([expect.stringMatching(/^SHA-256 mismatch: stored [0-9a-f]{64}, bytes 0\.\.16351 give [0-9a-f]{64}$/)]);
  });

  it("names 0xE9 when the first byte is wrong", () => {
    const { problems } = inspectAppImage(altered(image, (copy) => (copy[0] = 0x7f)));
    expect(problems[0]).toBe("first byte is 0x7F not 0xE9");
  });

  it.each([
    ["inside the second segment", 8000, /^segment 1 \(\d+ bytes at offset \d+\) runs past the end of the 8000-byte file \(truncated\)$/],
    ["inside a segment header", filler.offset - 4, new RegExp(`^segment 1 header at offset ${filler.offset - 8} runs past the end of the ${filler.offset - 4}-byte file \\(truncated\\)$`)],
    ["before the checksum", 16 * 1024 - 34, /^checksum byte at offset 16351 is missing: the file ends at 16350 \(truncated\)$/],
    ["inside the digest", 16 * 1024 - 1, /^SHA-256 digest \(32 bytes at offset 16352\) is missing: the file ends at 16383 \(truncated\)$/],
    ["inside the header", 10, /^image is 10 bytes, shorter than the 24-byte header \(truncated\)$/],
  ])("says truncated when the file ends %s", (_name, length, message) => {
    const { problems } = inspectAppImage(image.subarray(0, length));
    expect(problems).toEqual([expect.stringMatching(message)]);
  });

  it("reports an empty file", () => {
    expect(inspectAppImage(new Uint8Array(0)).problems).toEqual(["image is empty (0 bytes)"]);
  });

  it("reports trailing bytes, as in a dump of the whole partition", () => {
    const padded = new Uint8Array(image.length + 100).fill(0xff);
    padded.set(image);
    const inspection = inspectAppImage(padded);
    expect(inspection.problems).toEqual(["100 trailing bytes after the image, which ends at offset 16384"]);
    expect(inspection.appDesc?.version).toBe("1.4.0");
  });

  it("reports more than 16 segments", () => {
    const { problems } = inspectAppImage(altered(image, (copy) => (copy[1] = 17)));
    expect(problems).toEqual(["too many segments: the header says 17, at most 16 are allowed"]);
  });

  it("reports a hash flag other than 0 or 1", () => {
    const { problems } = inspectAppImage(altered(image, (copy) => (copy[0x17] = 2)));
    expect(problems).toContain("hash flag at offset 0x17 is 0x02, expected 0 or 1");
  });

  it("reports a missing app descriptor magic and gives no descriptor", () => {
    const inspection = inspectAppImage(altered(image, (copy) => (copy[0x20] = 0)));
    expect(inspection.appDesc).toBeNull();
    expect(inspection.problems).toContain("app descriptor magic is 0xABCD5400 not 0xABCD5432 (no esp_app_desc_t at offset 32)");
  });

  it("reports an image with no segments, which has no app descriptor", () => {
    // Header, no segments, 7 zero bytes, checksum 0xEF (of no data) at offset 31, digest.
    const bare = new Uint8Array(64);
    bare[0] = IMAGE_MAGIC;
    bare[0x17] = 1;
    bare[31] = 0xef;
    bare.set(createHash("sha256").update(bare.subarray(0, 32)).digest(), 32);
    expect(inspectAppImage(bare).problems).toEqual(["no app descriptor: the image has no segments"]);
  });

  it("reports a first segment too short for the descriptor", () => {
    const short = altered(image, (copy) => new DataView(copy.buffer).setUint32(0x1c, 16, true));
    expect(inspectAppImage(short).problems).toContain("first segment is 16 bytes, too short for the 256-byte app descriptor");
  });

  it("reads images inside a larger buffer (a Uint8Array view at an offset)", () => {
    const backing = new Uint8Array(image.length + 10);
    backing.set(image, 7);
    const view = backing.subarray(7, 7 + image.length);
    expect(inspectAppImage(view).problems).toEqual([]);
    expect(findVersionString(view, "1.4.0")).toBe(true);
  });

  it("never throws on random bytes, short or long, with or without a plausible header", () => {
    let state = 12345;
    const random = () => {
      state = (Math.imul(state, 1103515245) + 12345) >>> 0;
      return state >>> 8;
    };
    for (let round = 0; round < 2000; round++) {
      const length = round < 100 ? round : random() % 3000;
      const bytes = new Uint8Array(length).map(() => random() & 0xff);
      if (round % 2 === 0 && length > 0) bytes[0] = 0xe9;
      if (round % 4 === 0 && length > 1) bytes[1] = random() % 4; // few segments, so they get walked
      const inspection = inspectAppImage(bytes);
      expect(inspection.size).toBe(length);
      expect(inspection.problems.length).toBeGreaterThan(0);
    }
  });

  it("never throws on a valid image cut at every length near its structure", () => {
    for (const length of [...Array(400).keys(), ...Array.from({ length: 60 }, (_, i) => image.length - 60 + i)]) {
      expect(() => inspectAppImage(image.subarray(0, length))).not.toThrow();
      expect(inspectAppImage(image.subarray(0, length)).problems.some((p) => p.includes("truncated") || p.includes("empty"))).toBe(true);
    }
  });
});

describe("findVersionString", () => {
  it.each([
    ["1.2.3", "1.2.3", true],
    ["v1.2.3", "1.2.3", true],
    ["fw 1.2.3\0", "1.2.3", true],
    ["1.2.3-rc1", "1.2.3", true],
    ["1.2.3+abc", "1.2.3", true],
    ["(1.2.3)", "1.2.3", true],
    ["11.2.34", "1.2.3", false],
    ["1.2.34", "1.2.3", false],
    ["21.2.3", "1.2.3", false],
    ["1.2.3.4", "1.2.3", false],
    ["0.1.2.3", "1.2.3", false],
    ["11.2.34 and later 1.2.3\0", "1.2.3", true],
    ["1.2.30 1.2.3", "1.2.3", true],
    ["1.2.3-rc10", "1.2.3-rc1", false],
    ["1.2.3-rc1 ", "1.2.3-rc1", true],
    ["1.2.4", "1.2.3", false],
    ["anything", "", false],
  ])("%j contains %j: %s", (text, version, expected) => {
    expect(findVersionString(ascii(text), version)).toBe(expected);
  });

  it("finds the version of a built image and not a neighbouring one", () => {
    const image = buildAppImage({ version: "1.4.0", size: 1024 * 1024 });
    expect(findVersionString(image, "1.4.0")).toBe(true);
    expect(findVersionString(image, "1.4.1")).toBe(false);
    expect(findVersionString(image, "1.4")).toBe(false);
  });
});

describe("containsBytes", () => {
  it("finds a needle anywhere, including at either end", () => {
    const haystack = ascii("WIFI_PASS=secret\0");
    expect(containsBytes(haystack, ascii("WIFI"))).toBe(true);
    expect(containsBytes(haystack, ascii("secret\0"))).toBe(true);
    expect(containsBytes(haystack, ascii("secrets"))).toBe(false);
    expect(containsBytes(ascii("ab"), ascii("abc"))).toBe(false);
  });

  it("never finds an empty needle", () => {
    expect(containsBytes(ascii("abc"), new Uint8Array(0))).toBe(false);
    expect(containsBytes(new Uint8Array(0), new Uint8Array(0))).toBe(false);
  });
});

describe("hash helpers", () => {
  it("give lowercase hex digests", () => {
    expect(md5Hex(ascii("abc"))).toBe("900150983cd24fb0d6963f7d28e17f72");
    expect(sha256Hex(ascii("abc"))).toBe("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  });
});
