// Publish refuses (SPEC 4.10, issue 3 item 3), naming every condition that holds, with a real
// generated image each time, and writes nothing when it refuses: <data>/releases is byte for byte
// what it was, and a clean release is still accepted afterwards.
import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildAppImage, OTA_SLOT_BYTES, type ReleaseEntry } from "../../firmware/index.ts";
import { publishRelease, WIFI_PASSWORD_ENV, type PublishInput } from "../../server/releases/publishing.ts";
import { FileReleaseStore } from "../../server/releases/release-store.ts";
import { createDevice, revokeDevice } from "../../server/services/devices.ts";
import { type Store } from "../../server/store/database.ts";
import { tempDirs } from "./cli-process.ts";
import { DEV_WIFI_PASSWORD, NOTE_40, NOTE_41, writeFile, snapshot, readManifestFile, refusalOf, codesOf, openDataDir } from "./publish-fixture.ts";

const tempDir = tempDirs("publish-refusals");

describe("publish refuses, naming the condition, and changes nothing", () => {
  let dataDir: string;
  let store: Store;
  let releases: FileReleaseStore;
  let src: string;
  let canaryRevoked: string;
  let published: ReleaseEntry;

  beforeAll(async () => {
    ({ dataDir, store, releases } = await openDataDir(tempDir("refusals")));
    src = tempDir("refusals-src");
    published = await publishRelease(store.db, releases, {
      imagePath: writeFile(src, "1.4.0.bin", buildAppImage({ version: "1.4.0" })),
      version: "1.4.0",
      notes: [],
      devWifiPassword: DEV_WIFI_PASSWORD,
    });
    const device = await createDevice(store.db, { mode: "test", room: "R1", model: "BB-1" });
    await revokeDevice(store.db, device.id);
    canaryRevoked = device.id;
  });
  afterAll(async () => {
    await store?.close();
  });

  const image = (name: string, version: string, options: Partial<Parameters<typeof buildAppImage>[0]> = {}) =>
    writeFile(src, name, buildAppImage({ version, ...options }));

  interface Case {
    name: string;
    /** Writes the image file (or not) and returns its path. */
    image: () => string;
    /** Overrides of the input (version 1.5.0, no notes, the password configured); a function when it needs the setup. */
    input?: Partial<PublishInput> | (() => Partial<PublishInput>);
    codes: string[];
    message: RegExp | (() => RegExp);
  }

  const cases: Case[] = [
    {
      name: "a version like 1.2",
      image: () => image("v1.2.bin", "1.2"),
      input: { version: "1.2" },
      codes: ["version_invalid"],
      message: /version '1\.2' is not three dotted numbers/,
    },
    {
      name: "four release notes",
      image: () => image("notes4.bin", "1.5.0"),
      input: { notes: ["one", "two", "three", "four"] },
      codes: ["notes_too_many"],
      message: /4 release notes given; at most 3/,
    },
    {
      name: "a release note of 41 characters",
      image: () => image("note41.bin", "1.5.0"),
      input: { notes: [NOTE_40, NOTE_41] },
      codes: ["note_invalid"],
      message: /release note 2 is 41 characters; a note is 1 to 40 characters/,
    },
    {
      // A C1 control passed publish once and made manifest.json unreadable (parseManifest
      // refuses \p{Cc}), so every badge check and every later publish failed.
      name: "a release note with a C1 control character (U+0085, next line)",
      image: () => image("note-c1.bin", "1.5.0"),
      input: { notes: ["fine", "next\u0085line"] },
      codes: ["note_invalid"],
      message: /release note 2 is 9 characters; a note is 1 to 40 characters on one line/,
    },
    {
      name: "a display string with a control character",
      image: () => image("display-control.bin", "1.5.0"),
      input: { display: "Badge\u009b1.5" },
      codes: ["display_invalid"],
      message: /display string is 9 characters; it is 1 to 40 characters on one line/,
    },
    {
      name: "a display string of 41 characters",
      image: () => image("display41.bin", "1.5.0"),
      input: { display: "D".repeat(41) },
      codes: ["display_invalid"],
      message: /display string is 41 characters/,
    },
    {
      name: "no developer Wi-Fi password configured (fail closed, even for a clean image)",
      image: () => image("clean-unconfigured.bin", "1.5.0"),
      input: { devWifiPassword: undefined },
      codes: ["wifi_password_unconfigured"],
      message: new RegExp(`no developer Wi-Fi password is configured.*set ${WIFI_PASSWORD_ENV} or pass --wifi-password-file`),
    },
    {
      name: "an empty developer Wi-Fi password (the same as none)",
      image: () => image("clean-empty-password.bin", "1.5.0"),
      input: { devWifiPassword: "" },
      codes: ["wifi_password_unconfigured"],
      message: /no developer Wi-Fi password is configured/,
    },
    {
      name: "a missing file",
      image: () => path.join(src, "missing.bin"),
      codes: ["image_unreadable"],
      message: () => new RegExp(`cannot read image ${escapeRegExp(path.join(src, "missing.bin"))}: ENOENT`),
    },
    {
      name: "a directory",
      image: () => {
        const dir = path.join(src, "a-directory.bin");
        fs.mkdirSync(dir, { recursive: true });
        return dir;
      },
      codes: ["image_unreadable"],
      message: /a-directory\.bin is not a regular file/,
    },
    {
      name: "a 0-byte file",
      image: () => writeFile(src, "empty.bin", new Uint8Array(0)),
      codes: ["image_empty"],
      message: /empty\.bin is empty \(0 bytes\)/,
    },
    {
      name: "a valid image 16 bytes larger than the 0x1E0000 OTA slot",
      image: () => {
        const file = image("too-large.bin", "1.5.0", { size: OTA_SLOT_BYTES + 16 });
        expect(fs.statSync(file).size).toBe(OTA_SLOT_BYTES + 16);
        return file;
      },
      codes: ["image_too_large"],
      message: new RegExp(`image is ${OTA_SLOT_BYTES + 16} bytes and does not fit the 0x1E0000 \\(${OTA_SLOT_BYTES}\\) byte OTA slot`),
    },
    {
      name: "a first byte other than 0xE9 (an ELF file's 0x7F)",
      image: () => {
        const bytes = buildAppImage({ version: "1.5.0" });
        bytes[0] = 0x7f;
        return writeFile(src, "elf-magic.bin", bytes);
      },
      codes: ["image_magic"],
      message: /image starts with byte 0x7F, not 0xE9/,
    },
    {
      name: "a truncated image (last 100 bytes cut off)",
      image: () => {
        const bytes = buildAppImage({ version: "1.5.0" });
        return writeFile(src, "truncated.bin", bytes.subarray(0, bytes.length - 100));
      },
      codes: ["image_corrupt"],
      message: /image is truncated or corrupt: .*truncated/,
    },
    {
      name: "one flipped byte in segment data",
      image: () => {
        const bytes = buildAppImage({ version: "1.5.0" });
        bytes[Math.floor(bytes.length / 2)]! ^= 0x01;
        return writeFile(src, "flipped.bin", bytes);
      },
      codes: ["image_corrupt"],
      message: /image is truncated or corrupt: checksum mismatch: .*; SHA-256 mismatch/,
    },
    {
      name: "an image without its own version string (1.4.0 build published as 1.5.0)",
      image: () => image("old-build.bin", "1.4.0", { seed: 7 }),
      codes: ["image_version_missing"],
      message: /image does not contain its own version string '1\.5\.0'/,
    },
    {
      name: "an image containing the developer Wi-Fi password",
      image: () => image("with-password.bin", "1.5.0", { wifiPassword: DEV_WIFI_PASSWORD }),
      codes: ["image_contains_wifi_password"],
      message: /image contains the developer Wi-Fi password; build the release configuration without it/,
    },
    {
      name: "an already published version (the same file again)",
      image: () => path.join(src, "1.4.0.bin"),
      input: { version: "1.4.0" },
      codes: ["version_exists"],
      message: /version 1\.4\.0 is already published; a published image never changes/,
    },
    {
      name: "an already published version (a different build of it)",
      image: () => image("1.4.0-rebuilt.bin", "1.4.0", { seed: 99 }),
      input: { version: "1.4.0" },
      codes: ["version_exists"],
      message: /version 1\.4\.0 is already published/,
    },
    {
      name: "a version older than the latest",
      image: () => image("1.3.9.bin", "1.3.9"),
      input: { version: "1.3.9" },
      codes: ["version_not_newer"],
      message: /version 1\.3\.9 is not strictly newer than the latest published version 1\.4\.0/,
    },
    {
      name: "a pre-release of the latest version (equal by its three numbers)",
      image: () => image("1.4.0-rc2.bin", "1.4.0-rc2"),
      input: { version: "1.4.0-rc2" },
      codes: ["version_not_newer"],
      message: /version 1\.4\.0-rc2 is not strictly newer than the latest published version 1\.4\.0/,
    },
    {
      name: "an unknown canary device",
      image: () => image("canary-unknown.bin", "1.5.0"),
      input: { canary: "dev_nope" },
      codes: ["canary_unknown"],
      message: /canary dev_nope is not a known device/,
    },
    {
      name: "a canary whose token was revoked",
      image: () => image("canary-revoked.bin", "1.5.0"),
      input: () => ({ canary: canaryRevoked }),
      codes: ["canary_revoked"],
      message: /has a revoked token/,
    },
    {
      name: "several conditions at once: every one is named",
      image: () => {
        const bytes = buildAppImage({ version: "1.4.0", wifiPassword: DEV_WIFI_PASSWORD, seed: 3 });
        bytes[bytes.length - 40]! ^= 0xff; // segment data, just before the checksum
        return writeFile(src, "everything-wrong.bin", bytes);
      },
      input: { version: "1.3.0", notes: [NOTE_41, "", "c", "d"] },
      codes: ["image_contains_wifi_password", "image_corrupt", "image_version_missing", "note_invalid", "note_invalid", "notes_too_many", "version_not_newer"],
      message: /release note 2 is 0 characters[\s\S]*checksum mismatch.*SHA-256 mismatch[\s\S]*own version string '1\.3\.0'[\s\S]*developer Wi-Fi password[\s\S]*not strictly newer/,
    },
  ];

  for (const testCase of cases) {
    it(`refuses ${testCase.name}`, async () => {
      const imagePath = testCase.image();
      const before = snapshot(dataDir);
      expect(before.manifest).not.toBeNull();
      const input: PublishInput = {
        imagePath,
        version: "1.5.0",
        notes: [],
        devWifiPassword: DEV_WIFI_PASSWORD,
        ...(typeof testCase.input === "function" ? testCase.input() : testCase.input),
      };
      const refusal = await refusalOf(publishRelease(store.db, releases, input));
      expect(codesOf(refusal)).toEqual([...testCase.codes].sort());
      const message = typeof testCase.message === "function" ? testCase.message() : testCase.message;
      expect(refusal.message).toMatch(message);
      expect(refusal.message).toMatch(new RegExp(`^refused to publish ${escapeRegExp(input.version)}:\n`));
      for (const reason of refusal.reasons) expect(refusal.message).toContain(reason.message);
      if (testCase.codes.includes("canary_revoked")) expect(refusal.message).toContain(canaryRevoked);
      // The password itself is never echoed back.
      expect(refusal.message).not.toContain(DEV_WIFI_PASSWORD);

      expect(snapshot(dataDir)).toEqual(before);
      expect((await releases.read()).releases).toEqual([published]);
    });
  }

  it("still accepts a clean 1.5.0 afterwards (the refusals were about the images, not the store)", async () => {
    const entry = await publishRelease(store.db, releases, {
      imagePath: image("1.5.0.bin", "1.5.0"),
      version: "1.5.0",
      notes: [],
      devWifiPassword: DEV_WIFI_PASSWORD,
    });
    expect(entry.version).toBe("1.5.0");
    expect(readManifestFile(dataDir).releases.map((r) => r.version)).toEqual(["1.4.0", "1.5.0"]);
  });
});

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
