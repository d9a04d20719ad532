// What a publish leaves on disk (SPEC 4.10, issue 3 item 3): the image read-only and byte for
// byte, the manifest describing it truly, earlier images untouched; the publish lock (held:
// refused and left in place; left by a killed publish: taken over); and the manifest replaced
// atomically, whole after a publish loop is killed at random moments.
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildAppImage, md5Hex, OTA_SLOT_BYTES, type ReleaseEntry } from "../../firmware/index.ts";
import { promoteRelease, publishRelease, WIFI_PASSWORD_ENV } from "../../server/releases/publishing.ts";
import { FileReleaseStore, ReleaseStoreError } from "../../server/releases/release-store.ts";
import { createDevice } from "../../server/services/devices.ts";
import { type Store } from "../../server/store/database.ts";
import { ROOT, run, tempDirs } from "./cli-process.ts";
import { DEV_WIFI_PASSWORD, NOTE_40, sha256, writeFile, releasesDir, imagesDir, snapshot, readManifestFile, singleJson, type CliRefusal, envWithout, openDataDir } from "./publish-fixture.ts";
import { killPublishLoop } from "./publish-loop.ts";

const tempDir = tempDirs("publish-store");

describe("a successful publish", () => {
  let dataDir: string;
  let store: Store;
  let releases: FileReleaseStore;
  let src: string;
  let first: ReleaseEntry;
  let firstBytes: Buffer;
  let firstStat: fs.Stats;

  beforeAll(async () => {
    ({ dataDir, store, releases } = await openDataDir(tempDir("success")));
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
    const { dataDir, store, releases } = await openDataDir(tempDir("lock"));
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
        ["publish", path.join(src, "1.5.0.bin"), "1.5.0", "--mode", "test", "--data", dataDir, "--json"],
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
  });

  it("a lock left by a killed publish is taken over, and its temp files are removed", async () => {
    const { dataDir, store, releases } = await openDataDir(tempDir("stale-lock"));
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
const releases = new FileReleaseStore(dataDir, 0);
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
    const { dataDir, store, releases } = await openDataDir(tempDir("crash"));
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
  });
});
