// Publishing and promoting firmware releases (SPEC 4.10, issue 3 items 3 and 4): every refusal
// with a real generated image, and nothing written when refused; the stored image and the
// manifest after a publish; the manifest surviving a kill at any moment; the publish lock;
// canary first, then the fleet, with the badge endpoints answering accordingly.
//
// Most checks call publishRelease/promoteRelease directly against a real data directory (fast);
// a few spawn the real CLI (`badgebench publish`, `scripts/publish.ts`, `badgebench release
// promote`) to check the flags, the environment, the exit code and the --json output.
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  buildAppImage,
  md5Hex,
  OTA_SLOT_BYTES,
  parseManifest,
  parseResponse,
  type Manifest,
  type ReleaseEntry,
  type ResponseLine,
} from "../../firmware/index.ts";
import { promoteRelease, PublishRefusal, publishRelease, WIFI_PASSWORD_ENV, type PublishInput } from "../../server/releases/publishing.ts";
import { FileReleaseStore, ReleaseStoreError } from "../../server/releases/release-store.ts";
import { createDevice, revokeDevice } from "../../server/services/devices.ts";
import { importSchool } from "../../server/services/school-import.ts";
import { openStore, type Store } from "../../server/store/database.ts";
import { baseEnv, ROOT, run, tempDirs, type RunResult } from "./cli-process.ts";
import { killPublishLoop } from "./publish-loop.ts";
import { smallSchool, startHarness, type Harness } from "./harness.ts";

const DEV_WIFI_PASSWORD = "lab-wifi-s3cret!";
const NOTE_40 = "x".repeat(40);
const NOTE_41 = "y".repeat(41);
const CLI_TIMEOUT = { timeout: 30_000 };

// ---------------------------------------------------------------------------------------------
// Helpers

const tempDir = tempDirs("publish");

const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

/** Writes bytes (or a built image) to `dir/name` and returns the path. */
function writeFile(dir: string, name: string, bytes: Uint8Array): string {
  const file = path.join(dir, name);
  fs.writeFileSync(file, bytes);
  return file;
}

const releasesDir = (dataDir: string) => path.join(dataDir, "releases");
const manifestPath = (dataDir: string) => path.join(dataDir, "releases", "manifest.json");
const imagesDir = (dataDir: string) => path.join(dataDir, "releases", "images");

/** Every path under <data>/releases with its content hash ("dir" for directories), plus the manifest's bytes. */
interface Snapshot {
  manifest: Buffer | null;
  entries: Record<string, string>;
}
function snapshot(dataDir: string): Snapshot {
  const entries: Record<string, string> = {};
  const walk = (dir: string, prefix: string) => {
    if (!fs.existsSync(dir)) return;
    for (const dirent of fs.readdirSync(dir, { withFileTypes: true })) {
      const rel = `${prefix}${dirent.name}`;
      const full = path.join(dir, dirent.name);
      if (dirent.isDirectory()) {
        entries[rel] = "dir";
        walk(full, `${rel}/`);
      } else {
        entries[rel] = sha256(fs.readFileSync(full));
      }
    }
  };
  walk(releasesDir(dataDir), "");
  const file = manifestPath(dataDir);
  return { manifest: fs.existsSync(file) ? fs.readFileSync(file) : null, entries };
}

function readManifestFile(dataDir: string): Manifest {
  const parsed = parseManifest(JSON.parse(fs.readFileSync(manifestPath(dataDir), "utf8")));
  if (!parsed.ok) throw new Error(`manifest.json does not parse: ${parsed.message}`);
  return parsed.manifest;
}

/** Awaits a publish or promote that must be refused, and returns the refusal. */
async function refusalOf(work: Promise<unknown>): Promise<PublishRefusal> {
  try {
    await work;
  } catch (error) {
    expect(error).toBeInstanceOf(PublishRefusal);
    return error as PublishRefusal;
  }
  throw new Error("expected a PublishRefusal, but the call succeeded");
}

const codesOf = (refusal: { reasons: { code: string }[] }) => refusal.reasons.map((r) => r.code).sort();

/** The whole of stdout is one JSON object on one line. */
function singleJson<T = any>(result: RunResult): T {
  const lines = result.stdout.split("\n").filter((line) => line.length > 0);
  expect(lines, `expected one JSON line on stdout, got:\n${result.stdout}\nstderr: ${result.stderr}`).toHaveLength(1);
  return JSON.parse(lines[0]!) as T;
}

interface CliRefusal {
  error: { code: string; message: string; reasons?: { code: string; message: string }[] };
}

/** The environment without the developer Wi-Fi password, so only what a test sets counts. */
function envWithout(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = baseEnv(extra);
  if (!(WIFI_PASSWORD_ENV in extra)) delete env[WIFI_PASSWORD_ENV];
  return env;
}

/** Runs scripts/publish.ts itself (node with the tsx loader), as an operator would. */
function runPublishScript(args: string[], env: NodeJS.ProcessEnv): Promise<RunResult> {
  return run(args, { env, program: ["--import", "tsx", "scripts/publish.ts"] });
}

/** A data directory with the small school (room R1) in test mode and an open store over it. */
async function openDataDir(label: string): Promise<{ dataDir: string; store: Store; releases: FileReleaseStore }> {
  const dataDir = tempDir(label);
  const store = await openStore({ dataDir, sync: "normal" });
  await importSchool(store.db, smallSchool(), { mode: "test" });
  return { dataDir, store, releases: new FileReleaseStore(dataDir) };
}

// ---------------------------------------------------------------------------------------------

describe("publish refuses, naming the condition, and changes nothing", () => {
  let dataDir: string;
  let store: Store;
  let releases: FileReleaseStore;
  let src: string;
  let canaryRevoked: string;
  let published: ReleaseEntry;

  beforeAll(async () => {
    ({ dataDir, store, releases } = await openDataDir("refusals"));
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

// ---------------------------------------------------------------------------------------------

describe("a successful publish", () => {
  let dataDir: string;
  let store: Store;
  let releases: FileReleaseStore;
  let src: string;
  let first: ReleaseEntry;
  let firstBytes: Buffer;
  let firstStat: fs.Stats;

  beforeAll(async () => {
    ({ dataDir, store, releases } = await openDataDir("success"));
    src = tempDir("success-src");
  });
  afterAll(async () => {
    await store?.close();
  });

  it("stores the image read-only, byte for byte, and describes it truly in the manifest", async () => {
    const input = buildAppImage({ version: "1.4.0", size: 100_000 });
    const imagePath = writeFile(src, "badge-1.4.0.bin", input);
    const now = new Date("2026-11-22T09:00:00.000Z");
    first = await publishRelease(store.db, releases, {
      imagePath,
      version: "1.4.0",
      notes: ["Faster check-in", NOTE_40],
      display: "Badge 1.4.0 (Nov)",
      devWifiPassword: DEV_WIFI_PASSWORD,
      now,
    });

    const stored = path.join(imagesDir(dataDir), first.file);
    firstBytes = fs.readFileSync(stored);
    firstStat = fs.statSync(stored);
    expect(firstBytes.equals(Buffer.from(input))).toBe(true);
    expect(firstStat.mode & 0o777).toBe(0o444);
    expect(first).toEqual({
      version: "1.4.0",
      display: "Badge 1.4.0 (Nov)",
      file: first.file,
      size: 100_000,
      md5: md5Hex(input),
      sha256: sha256(input),
      notes: ["Faster check-in", NOTE_40],
      published_at: now.toISOString(),
      canary: null,
      promoted: null,
    });
    expect(first.size).toBe(firstStat.size);
    expect(first.md5).toBe(createHash("md5").update(firstBytes).digest("hex"));
    expect(first.sha256).toBe(sha256(firstBytes));
    // The stored name comes from the version and hash, not from the operator's file name.
    expect(first.file).toMatch(/^1\.4\.0-[0-9a-f]{16}\.bin$/);
    expect(first.file.startsWith("1.4.0-" + first.sha256.slice(0, 16))).toBe(true);

    const manifest = readManifestFile(dataDir);
    expect(manifest).toEqual({ format: 1, fleet: "1.4.0", releases: [first] });
  });

  it("a second, newer version keeps the first entry and image byte-identical", async () => {
    const manifestBefore = readManifestFile(dataDir);
    const second = await publishRelease(store.db, releases, {
      imagePath: writeFile(src, "badge-1.5.0.bin", buildAppImage({ version: "1.5.0" })),
      version: "1.5.0",
      notes: [],
      devWifiPassword: DEV_WIFI_PASSWORD,
    });
    const manifest = readManifestFile(dataDir);
    expect(manifest.fleet).toBe("1.5.0");
    expect(manifest.releases).toEqual([manifestBefore.releases[0], second]);
    expect(manifest.releases[0]).toEqual(first);

    const stored = path.join(imagesDir(dataDir), first.file);
    const stat = fs.statSync(stored);
    expect(fs.readFileSync(stored).equals(firstBytes)).toBe(true);
    expect(stat.ino).toBe(firstStat.ino);
    expect(stat.mtimeMs).toBe(firstStat.mtimeMs);
    expect(fs.readdirSync(imagesDir(dataDir)).sort()).toEqual([first.file, second.file].sort());
  });

  it("accepts an image of exactly 0x1E0000 bytes, and one carrying some other Wi-Fi password", async () => {
    const full = buildAppImage({ version: "1.6.0", size: OTA_SLOT_BYTES });
    expect(full.length).toBe(OTA_SLOT_BYTES);
    const entry = await publishRelease(store.db, releases, {
      imagePath: writeFile(src, "full-slot.bin", full),
      version: "1.6.0",
      notes: [],
      devWifiPassword: DEV_WIFI_PASSWORD,
    });
    expect(entry.size).toBe(OTA_SLOT_BYTES);

    const otherNetwork = await publishRelease(store.db, releases, {
      imagePath: writeFile(src, "other-password.bin", buildAppImage({ version: "1.7.0", wifiPassword: "school-guest-network" })),
      version: "1.7.0",
      notes: [],
      devWifiPassword: DEV_WIFI_PASSWORD,
    });
    expect(otherNetwork.version).toBe("1.7.0");
  });

  it("leaves no temporary file and no lock behind", () => {
    const manifest = readManifestFile(dataDir);
    expect(fs.readdirSync(releasesDir(dataDir)).sort()).toEqual(["images", "manifest.json"]);
    expect(fs.readdirSync(imagesDir(dataDir)).sort()).toEqual(manifest.releases.map((r) => r.file).sort());
    for (const entry of manifest.releases) {
      const bytes = fs.readFileSync(path.join(imagesDir(dataDir), entry.file));
      expect(bytes.length).toBe(entry.size);
      expect(sha256(bytes)).toBe(entry.sha256);
    }
  });
});

// ---------------------------------------------------------------------------------------------

describe("the publish lock", () => {
  it("a held publish.lock refuses publish and promote, naming the lock file, and is left in place", async () => {
    const { dataDir, store, releases } = await openDataDir("lock");
    try {
      const src = tempDir("lock-src");
      const device = await createDevice(store.db, { mode: "test", room: "R1", model: "BB-1" });
      await publishRelease(store.db, releases, {
        imagePath: writeFile(src, "1.4.0.bin", buildAppImage({ version: "1.4.0" })),
        version: "1.4.0",
        notes: [],
        canary: device.id,
        devWifiPassword: DEV_WIFI_PASSWORD,
      });
      // Held by a live process (this one), so it is not stale.
      const lockFile = path.join(releasesDir(dataDir), "publish.lock");
      const held = `${process.pid}\n`;
      fs.writeFileSync(lockFile, held);
      const before = snapshot(dataDir);

      const publishing = publishRelease(store.db, releases, {
        imagePath: writeFile(src, "1.5.0.bin", buildAppImage({ version: "1.5.0" })),
        version: "1.5.0",
        notes: [],
        devWifiPassword: DEV_WIFI_PASSWORD,
      });
      await expect(publishing).rejects.toThrow(ReleaseStoreError);
      await expect(publishing).rejects.toThrow(`another publish holds ${lockFile}`);
      const promoting = promoteRelease(store.db, releases, "1.4.0", { force: true });
      await expect(promoting).rejects.toThrow(`another publish holds ${lockFile}`);
      expect(snapshot(dataDir)).toEqual(before);
      expect(fs.readFileSync(lockFile, "utf8")).toBe(held);

      // Through the CLI: exit 1, one JSON error naming the lock file.
      const result = await run(
        ["publish", path.join(src, "1.5.0.bin"), "1.5.0", "--data", dataDir, "--json"],
        { env: envWithout({ [WIFI_PASSWORD_ENV]: DEV_WIFI_PASSWORD }) },
      );
      expect(result.code).toBe(1);
      const body = singleJson<CliRefusal>(result);
      expect(body.error.message).toContain(lockFile);
      expect(snapshot(dataDir)).toEqual(before);

      fs.rmSync(lockFile);
      const entry = await publishRelease(store.db, releases, {
        imagePath: path.join(src, "1.5.0.bin"),
        version: "1.5.0",
        notes: [],
        devWifiPassword: DEV_WIFI_PASSWORD,
      });
      expect(entry.version).toBe("1.5.0");
      expect(fs.existsSync(lockFile)).toBe(false);
    } finally {
      await store.close();
    }
  }, 30_000);

  it("a lock left by a killed publish is taken over, and its temp files are removed", async () => {
    const { dataDir, store, releases } = await openDataDir("stale-lock");
    try {
      const dead = spawn(process.execPath, ["-e", ""]);
      const deadPid = dead.pid!;
      await new Promise((resolve) => dead.on("exit", resolve));
      fs.mkdirSync(imagesDir(dataDir), { recursive: true });
      fs.writeFileSync(path.join(releasesDir(dataDir), "publish.lock"), `${deadPid}\n`);
      const leftovers = [path.join(releasesDir(dataDir), ".manifest.json.0a1b2c.tmp"), path.join(imagesDir(dataDir), ".1.4.0-abc.bin.0a1b2c.tmp")];
      for (const file of leftovers) fs.writeFileSync(file, "half-written");
      const src = tempDir("stale-lock-src");
      const entry = await publishRelease(store.db, releases, {
        imagePath: writeFile(src, "1.4.0.bin", buildAppImage({ version: "1.4.0" })),
        version: "1.4.0",
        notes: [],
        devWifiPassword: DEV_WIFI_PASSWORD,
      });
      expect(entry.version).toBe("1.4.0");
      for (const file of leftovers) expect(fs.existsSync(file)).toBe(false);
      expect(fs.existsSync(path.join(releasesDir(dataDir), "publish.lock"))).toBe(false);
    } finally {
      await store.close();
    }
  });
});

describe("promotion needs an ok report received after the publish", () => {
  it("an ota=ok|1.5.0 the canary sent before 1.5.0 was published does not count", async () => {
    const { dataDir, store, releases } = await openDataDir("early-report");
    try {
      const canary = await createDevice(store.db, { mode: "test", room: "R1", model: "BB-1" });
      await store.db
        .insertInto("ota_reports")
        .values({ id: "rpt_lab", device_id: canary.id, version: "1.5.0", outcome: "ok", message: null, report: "ok|1.5.0", received_at: new Date(Date.now() - 60_000).toISOString() })
        .execute();
      const src = tempDir("early-report-src");
      await publishRelease(store.db, releases, {
        imagePath: writeFile(src, "1.5.0.bin", buildAppImage({ version: "1.5.0" })),
        version: "1.5.0",
        notes: [],
        canary: canary.id,
        devWifiPassword: DEV_WIFI_PASSWORD,
      });
      const before = snapshot(dataDir);
      expect(codesOf(await refusalOf(promoteRelease(store.db, releases, "1.5.0")))).toEqual(["canary_not_confirmed"]);
      expect(snapshot(dataDir)).toEqual(before);
    } finally {
      await store.close();
    }
  });
});

// ---------------------------------------------------------------------------------------------

describe("the manifest is replaced atomically", () => {
  // A child process publishes (and force-promotes every other release) in a loop and is killed
  // with SIGKILL at random moments. After every kill the manifest must parse, every image it
  // names must be there with its hash, and every publish the child finished must be in it.
  const KILLS = 6;

  const childSource = (urls: Record<string, string>) => `
import fs from "node:fs";
import path from "node:path";
const { openStore } = await import(${JSON.stringify(urls.database)});
const { publishRelease, promoteRelease } = await import(${JSON.stringify(urls.publishing)});
const { FileReleaseStore } = await import(${JSON.stringify(urls.releaseStore)});
const { buildAppImage } = await import(${JSON.stringify(urls.firmware)});
const [dataDir, srcDir, canary, password] = process.argv.slice(2);
const store = await openStore({ dataDir, sync: "normal" });
const releases = new FileReleaseStore(dataDir);
for (;;) {
  const last = (await releases.read()).releases.at(-1);
  const patch = last ? Number(last.version.split(".")[2]) + 1 : 0;
  const version = "2.0." + patch;
  const file = path.join(srcDir, version + ".bin");
  fs.writeFileSync(file, buildAppImage({ version, size: 8192 }));
  const asCanary = patch % 2 === 1;
  await publishRelease(store.db, releases, { imagePath: file, version, notes: ["build " + patch], canary: asCanary ? canary : undefined, devWifiPassword: password });
  process.stdout.write("published " + version + "\\n");
  if (asCanary) {
    await promoteRelease(store.db, releases, version, { force: true, reason: "crash test" });
    process.stdout.write("promoted " + version + "\\n");
  }
}
`;

  it(`survives ${KILLS} kills at random moments with the old or the new manifest`, async () => {
    const { dataDir, store, releases } = await openDataDir("crash");
    try {
      const src = tempDir("crash-src");
      const device = await createDevice(store.db, { mode: "test", room: "R1", model: "BB-1" });
      const script = path.join(tempDir("crash-script"), "publish-loop.mjs");
      const url = (rel: string) => pathToFileURL(path.join(ROOT, rel)).href;
      fs.writeFileSync(
        script,
        childSource({
          database: url("server/store/database.ts"),
          publishing: url("server/releases/publishing.ts"),
          releaseStore: url("server/releases/release-store.ts"),
          firmware: url("firmware/index.ts"),
        }),
      );

      const published = new Set<string>();
      const promoted = new Set<string>();
      const lockFile = path.join(releasesDir(dataDir), "publish.lock");
      for (let kill = 0; kill < KILLS; kill++) {
        // A killed publish leaves its lock behind; the operator removes it, as its message says.
        fs.rmSync(lockFile, { force: true });
        const killed = await killPublishLoop(["--import", "tsx", script, dataDir, src, device.id, DEV_WIFI_PASSWORD], { startTimeoutMs: 10_000, maxDelayMs: 150 });
        for (const version of killed.published) published.add(version);
        for (const version of killed.promoted) promoted.add(version);

        // The manifest is whole and valid, and names only images that are there, intact.
        const manifest = readManifestFile(dataDir);
        expect(await releases.read()).toEqual(manifest);
        for (const entry of manifest.releases) {
          const bytes = fs.readFileSync(path.join(imagesDir(dataDir), entry.file));
          expect(bytes.length, entry.version).toBe(entry.size);
          expect(sha256(bytes), entry.version).toBe(entry.sha256);
        }
        // Every finished publish and promote is in it; each kill adds at most the one release
        // that was under way (written, but killed before it could say so).
        const versions = manifest.releases.map((r) => r.version);
        for (const version of published) expect(versions).toContain(version);
        for (const version of promoted) expect(manifest.releases.find((r) => r.version === version)?.promoted).not.toBeNull();
        expect(versions.filter((v) => !published.has(v)).length).toBeLessThanOrEqual(kill + 1);
      }
      expect(published.size).toBeGreaterThanOrEqual(KILLS);

      // The store keeps working after the crashes: leftovers do not get in the way.
      fs.rmSync(lockFile, { force: true });
      const last = readManifestFile(dataDir).releases.at(-1)!;
      const next = `3.0.0`;
      const entry = await publishRelease(store.db, releases, {
        imagePath: writeFile(src, "after.bin", buildAppImage({ version: next })),
        version: next,
        notes: [],
        devWifiPassword: DEV_WIFI_PASSWORD,
      });
      const after = readManifestFile(dataDir);
      expect(after.releases.at(-2)).toEqual(last);
      expect(after.releases.at(-1)).toEqual(entry);
      expect(after.fleet).toBe(next);
    } finally {
      await store.close();
    }
  }, 30_000);
});

// ---------------------------------------------------------------------------------------------

describe("badgebench publish and scripts/publish.ts", () => {
  let dataDir: string;
  let src: string;
  let passwordFile: string;

  beforeAll(() => {
    dataDir = tempDir("cli");
    src = tempDir("cli-src");
    passwordFile = path.join(src, "wifi-password.txt");
    fs.writeFileSync(passwordFile, `${DEV_WIFI_PASSWORD}\nthis second line is not part of it\n`);
    writeFile(src, "1.4.0.bin", buildAppImage({ version: "1.4.0" }));
    writeFile(src, "1.5.0-with-password.bin", buildAppImage({ version: "1.5.0", wifiPassword: DEV_WIFI_PASSWORD }));
  });

  it("with no Wi-Fi password configured refuses, says how to configure one, and creates nothing", CLI_TIMEOUT, async () => {
    const result = await run(["publish", path.join(src, "1.4.0.bin"), "1.4.0", "--data", dataDir, "--json"], { env: envWithout() });
    expect(result.code).toBe(1);
    const body = singleJson<CliRefusal>(result);
    expect(body.error.code).toBe("refused");
    expect(body.error.reasons?.map((r) => r.code)).toEqual(["wifi_password_unconfigured"]);
    expect(body.error.message).toContain(WIFI_PASSWORD_ENV);
    expect(body.error.message).toContain("--wifi-password-file");
    expect(fs.existsSync(releasesDir(dataDir))).toBe(false);
  });

  it("with --wifi-password-file publishes and prints the release entry", CLI_TIMEOUT, async () => {
    const result = await run(
      ["publish", path.join(src, "1.4.0.bin"), "1.4.0", "First fleet build", "--display", "Badge 1.4", "--wifi-password-file", passwordFile, "--data", dataDir, "--json"],
      { env: envWithout() },
    );
    expect(result.code, result.stderr).toBe(0);
    const entry = singleJson<ReleaseEntry>(result);
    const input = fs.readFileSync(path.join(src, "1.4.0.bin"));
    expect(entry).toMatchObject({
      version: "1.4.0",
      display: "Badge 1.4",
      size: input.length,
      md5: md5Hex(input),
      sha256: sha256(input),
      notes: ["First fleet build"],
      canary: null,
      promoted: null,
    });
    const stored = path.join(imagesDir(dataDir), entry.file);
    expect(fs.readFileSync(stored).equals(input)).toBe(true);
    expect(fs.statSync(stored).mode & 0o222).toBe(0);
    expect(readManifestFile(dataDir)).toEqual({ format: 1, fleet: "1.4.0", releases: [entry] });
  });

  it("uses the password from the file: an image containing it is refused, with every other reason", CLI_TIMEOUT, async () => {
    const before = snapshot(dataDir);
    const result = await run(
      [
        "publish", path.join(src, "1.5.0-with-password.bin"), "1.5.0", "ok", NOTE_41, "three", "four",
        "--display", "D".repeat(41), "--wifi-password-file", passwordFile, "--data", dataDir, "--json",
      ],
      // The environment's password differs: the file wins.
      { env: envWithout({ [WIFI_PASSWORD_ENV]: "not-the-one-in-the-image" }) },
    );
    expect(result.code).toBe(1);
    const body = singleJson<CliRefusal>(result);
    expect(body.error.code).toBe("refused");
    expect(codesOf(body.error as { reasons: { code: string }[] })).toEqual(
      ["display_invalid", "image_contains_wifi_password", "note_invalid", "notes_too_many"],
    );
    expect(body.error.message).toContain("4 release notes given; at most 3");
    expect(body.error.message).toContain("release note 2 is 41 characters");
    expect(body.error.message).toContain("display string is 41 characters");
    expect(body.error.message).toContain("image contains the developer Wi-Fi password");
    expect(result.stdout).not.toContain(DEV_WIFI_PASSWORD);
    expect(snapshot(dataDir)).toEqual(before);
  });

  it("scripts/publish.ts reads BADGE_DEV_WIFI_PASSWORD and refuses a version like 1.2", CLI_TIMEOUT, async () => {
    const before = snapshot(dataDir);
    const result = await runPublishScript(
      [path.join(src, "1.5.0-with-password.bin"), "1.2", "--data", dataDir, "--json"],
      envWithout({ [WIFI_PASSWORD_ENV]: DEV_WIFI_PASSWORD }),
    );
    expect(result.code, result.stderr).toBe(1);
    const body = singleJson<CliRefusal>(result);
    expect(codesOf(body.error as { reasons: { code: string }[] })).toEqual(["image_contains_wifi_password", "version_invalid"]);
    expect(body.error.message).toContain("version '1.2' is not three dotted numbers");
    expect(snapshot(dataDir)).toEqual(before);
  });
});

// ---------------------------------------------------------------------------------------------

describe("canary, then fleet", () => {
  let h: Harness;
  let releases: FileReleaseStore;
  let src: string;
  let passwordFile: string;
  let canary: { id: string; token: string };
  let other: { id: string; token: string };
  let canaryEntry: ReleaseEntry;
  let image150: Buffer;

  beforeAll(async () => {
    h = await startHarness();
    releases = new FileReleaseStore(h.dataDir);
    src = tempDir("canary-src");
    passwordFile = path.join(src, "wifi-password.txt");
    fs.writeFileSync(passwordFile, `${DEV_WIFI_PASSWORD}\n`);
    canary = await createDevice(h.server.store.db, { mode: "test", room: "R1", model: "BB-1", name: "canary" });
    other = await createDevice(h.server.store.db, { mode: "test", room: "R1", model: "BB-1", name: "other" });
    await publishRelease(h.server.store.db, releases, {
      imagePath: writeFile(src, "1.4.0.bin", buildAppImage({ version: "1.4.0" })),
      version: "1.4.0",
      notes: [],
      devWifiPassword: DEV_WIFI_PASSWORD,
    });
    image150 = Buffer.from(buildAppImage({ version: "1.5.0", size: 200_000 }));
    writeFile(src, "1.5.0.bin", image150);
  }, 30_000);
  afterAll(async () => {
    await h?.close();
  });

  const db = () => h.server.store.db;

  async function badge(method: "GET" | "POST", urlPath: string, token: string, body?: string) {
    const response = await fetch(`${h.url}${urlPath}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { "content-type": "text/plain" }) },
      body,
    });
    const bytes = Buffer.from(await response.arrayBuffer());
    return { status: response.status, headers: response.headers, bytes, text: bytes.toString("utf8") };
  }

  /** The response's lines after V1 and S, for a text answer. */
  function linesOf(text: string): ResponseLine[] {
    const parsed = parseResponse(text);
    if (!parsed.ok) throw new Error(`not a badge answer (${parsed.message}):\n${text}`);
    expect(parsed.version).toBe(1);
    expect(parsed.lines[0]?.letter).toBe("S");
    return parsed.lines.slice(1);
  }

  const check = (token: string, sv: string) => badge("POST", "/api/badge/ota/check", token, `v=1\nsv=${sv}\nbat=4.0\n`);
  const sync = (token: string, sv: string, ota: string) => badge("POST", "/api/badge/sync", token, `v=1\nsv=${sv}\nbat=4.0\nota=${ota}\n`);

  async function expectSynced(token: string, sv: string, ota: string) {
    const res = await sync(token, sv, ota);
    expect(res.status, res.text).toBe(200);
    expect(linesOf(res.text)).toContainEqual({ letter: "O", value: ota });
  }

  const offerLines = (entry: ReleaseEntry): ResponseLine[] => [
    { letter: "U", value: entry.version },
    { letter: "B", value: entry.display },
    { letter: "Z", value: String(entry.size) },
    { letter: "M", value: entry.md5 },
    { letter: "P", value: `/api/badge/ota/download?v=${entry.version}` },
    ...entry.notes.map((note) => ({ letter: "L", value: note })),
  ];

  it("publish --canary offers the release to that badge only; the fleet stays on 1.4.0", CLI_TIMEOUT, async () => {
    const result = await run(
      ["publish", path.join(src, "1.5.0.bin"), "1.5.0", "Canary build", "--canary", canary.id, "--wifi-password-file", passwordFile, "--data", h.dataDir, "--json"],
      { env: envWithout() },
    );
    expect(result.code, result.stderr).toBe(0);
    canaryEntry = singleJson<ReleaseEntry>(result);
    expect(canaryEntry).toMatchObject({ version: "1.5.0", canary: canary.id, promoted: null, md5: md5Hex(image150) });
    expect(readManifestFile(h.dataDir).fleet).toBe("1.4.0");

    const otherCheck = await check(other.token, "1.4.0");
    expect(otherCheck.status).toBe(200);
    expect(linesOf(otherCheck.text)).toEqual([{ letter: "N", value: "1.4.0" }]);

    const canaryCheck = await check(canary.token, "1.4.0");
    expect(canaryCheck.status).toBe(200);
    expect(linesOf(canaryCheck.text)).toEqual(offerLines(canaryEntry));

    const otherDownload = await badge("GET", "/api/badge/ota/download?v=1.5.0", other.token);
    expect(otherDownload.status).toBe(403);
    expect(linesOf(otherDownload.text)[0]?.value).toMatch(/^not_offered /);

    const canaryDownload = await badge("GET", "/api/badge/ota/download?v=1.5.0", canary.token);
    expect(canaryDownload.status).toBe(200);
    expect(canaryDownload.bytes.equals(image150)).toBe(true);
    expect(md5Hex(canaryDownload.bytes)).toBe(canaryEntry.md5);
  });

  it("release promote is refused until the canary reported ota=ok|1.5.0", CLI_TIMEOUT, async () => {
    const before = snapshot(h.dataDir);
    const result = await run(["release", "promote", "1.5.0", "--data", h.dataDir, "--json"], { env: envWithout() });
    expect(result.code).toBe(1);
    const body = singleJson<CliRefusal>(result);
    expect(body.error.code).toBe("refused");
    expect(body.error.reasons?.map((r) => r.code)).toEqual(["canary_not_confirmed"]);
    expect(body.error.message).toContain(`canary ${canary.id} has not reported ota=ok|1.5.0`);
    expect(snapshot(h.dataDir)).toEqual(before);
  });

  it("an ok report from another badge, or an err report from the canary, does not count", async () => {
    const before = snapshot(h.dataDir);
    await expectSynced(other.token, "1.5.0", "ok|1.5.0");
    expect(codesOf(await refusalOf(promoteRelease(db(), releases, "1.5.0")))).toEqual(["canary_not_confirmed"]);
    await expectSynced(canary.token, "1.4.0", "err|1.5.0|download cut at 65536 of 200000 bytes");
    expect(codesOf(await refusalOf(promoteRelease(db(), releases, "1.5.0")))).toEqual(["canary_not_confirmed"]);
    await expectSynced(canary.token, "1.4.0", "ok|1.4.0");
    expect(codesOf(await refusalOf(promoteRelease(db(), releases, "1.5.0")))).toEqual(["canary_not_confirmed"]);
    expect(snapshot(h.dataDir)).toEqual(before);
    expect(readManifestFile(h.dataDir).fleet).toBe("1.4.0");
  });

  it("after the canary's ok report, promote makes 1.5.0 the fleet's release, not forced", CLI_TIMEOUT, async () => {
    await expectSynced(canary.token, "1.5.0", "ok|1.5.0");
    const report = await db()
      .selectFrom("ota_reports")
      .selectAll()
      .where("device_id", "=", canary.id)
      .where("report", "=", "ok|1.5.0")
      .executeTakeFirstOrThrow();

    const result = await run(["release", "promote", "1.5.0", "--data", h.dataDir, "--json"], { env: envWithout() });
    expect(result.code, result.stderr + result.stdout).toBe(0);
    const entry = singleJson<ReleaseEntry>(result);
    expect(entry.promoted).toMatchObject({ forced: false, reason: null });
    expect(entry.promoted?.canary_report).toContain(report.id);

    const manifest = readManifestFile(h.dataDir);
    expect(manifest.fleet).toBe("1.5.0");
    const stored = manifest.releases.find((r) => r.version === "1.5.0")!;
    expect(stored).toEqual(entry);
    // Promotion changes who is offered the release, never what it is.
    const { promoted: _promoted, ...unchanged } = stored;
    const { promoted: _before, ...original } = canaryEntry;
    expect(unchanged).toEqual(original);
  });

  it("after promotion every badge is offered 1.5.0 and may download it", async () => {
    const promotedEntry = readManifestFile(h.dataDir).releases.find((r) => r.version === "1.5.0")!;
    for (const device of [other, canary]) {
      const res = await check(device.token, "1.4.0");
      expect(res.status).toBe(200);
      expect(linesOf(res.text)).toEqual(offerLines(promotedEntry));
    }
    const otherDownload = await badge("GET", "/api/badge/ota/download?v=1.5.0", other.token);
    expect(otherDownload.status).toBe(200);
    expect(otherDownload.bytes.equals(image150)).toBe(true);
    // A badge already on 1.5.0 is current.
    const current = await check(canary.token, "1.5.0");
    expect(linesOf(current.text)).toEqual([{ letter: "N", value: "1.5.0" }]);
  });

  it("promoting the fleet release again, an older fleet release or an unknown version is refused", async () => {
    const before = snapshot(h.dataDir);
    for (const version of ["1.5.0", "1.4.0"]) {
      const refusal = await refusalOf(promoteRelease(db(), releases, version, { force: true }));
      expect(codesOf(refusal)).toEqual(["release_already_fleet"]);
      expect(refusal.message).toContain(`${version} is already offered to the fleet`);
    }
    const unknown = await refusalOf(promoteRelease(db(), releases, "9.9.9", { force: true }));
    expect(codesOf(unknown)).toEqual(["release_unknown"]);
    expect(unknown.message).toContain("no published release 9.9.9");
    expect(snapshot(h.dataDir)).toEqual(before);
  });

  it("--force --reason promotes without a report and records both", CLI_TIMEOUT, async () => {
    await publishRelease(db(), releases, {
      imagePath: writeFile(src, "1.6.0.bin", buildAppImage({ version: "1.6.0" })),
      version: "1.6.0",
      notes: [],
      canary: canary.id,
      devWifiPassword: DEV_WIFI_PASSWORD,
    });
    expect(codesOf(await refusalOf(promoteRelease(db(), releases, "1.6.0")))).toEqual(["canary_not_confirmed"]);
    // An override nobody explained is refused, and changes nothing.
    const before = snapshot(h.dataDir);
    const unexplained = await run(["release", "promote", "1.6.0", "--force", "--data", h.dataDir, "--json"], { env: envWithout() });
    expect(unexplained.code).toBe(1);
    expect(singleJson<CliRefusal>(unexplained).error.reasons?.map((r) => r.code)).toEqual(["reason_missing"]);
    expect(snapshot(h.dataDir)).toEqual(before);

    const reason = "canary badge lost; verified on the bench";
    const result = await run(["release", "promote", "1.6.0", "--force", "--reason", reason, "--data", h.dataDir, "--json"], { env: envWithout() });
    expect(result.code, result.stderr + result.stdout).toBe(0);
    const entry = singleJson<ReleaseEntry>(result);
    expect(entry.promoted).toMatchObject({ forced: true, reason, canary_report: null });
    const manifest = readManifestFile(h.dataDir);
    expect(manifest.fleet).toBe("1.6.0");
    expect(manifest.releases.find((r) => r.version === "1.6.0")?.promoted).toEqual(entry.promoted);
    // The earlier promotion is untouched.
    expect(manifest.releases.find((r) => r.version === "1.5.0")?.promoted?.forced).toBe(false);
  });

  it("a canary release overtaken by a newer fleet release cannot be promoted, even with --force", async () => {
    await publishRelease(db(), releases, {
      imagePath: writeFile(src, "1.7.0.bin", buildAppImage({ version: "1.7.0" })),
      version: "1.7.0",
      notes: [],
      canary: canary.id,
      devWifiPassword: DEV_WIFI_PASSWORD,
    });
    await publishRelease(db(), releases, {
      imagePath: writeFile(src, "1.8.0.bin", buildAppImage({ version: "1.8.0" })),
      version: "1.8.0",
      notes: [],
      devWifiPassword: DEV_WIFI_PASSWORD,
    });
    await expectSynced(canary.token, "1.7.0", "ok|1.7.0");
    const before = snapshot(h.dataDir);
    for (const options of [{}, { force: true, reason: "try anyway" }]) {
      const refusal = await refusalOf(promoteRelease(db(), releases, "1.7.0", options));
      expect(codesOf(refusal)).toEqual(["release_superseded"]);
      expect(refusal.message).toContain("the fleet already runs 1.8.0, which is newer than 1.7.0");
    }
    expect(snapshot(h.dataDir)).toEqual(before);
    expect(readManifestFile(h.dataDir).fleet).toBe("1.8.0");
  });
});
