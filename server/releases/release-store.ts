// Where releases live, behind one interface (ReleaseStore) with two implementations. Each mode
// has its own store (ReleaseStores): live releases are offered to live badges and promoted by
// live keys, test releases to test badges by test keys, exactly as every other object is kept
// apart (issue 28). Each mode's manifest stands alone (its own fleet release, its own version
// order, its own promotion records), so the manifest format needs no mode field.
// - FileReleaseStore, here: images and the manifest under <data>/releases (live) or
//   <data>/test-releases (test), the default with
//   SQLite. Images are written once and never changed (a badge was told their MD5); the
//   manifest is replaced atomically (temp file, fsync, rename, fsync of the directory), so a
//   crash at any point leaves the old manifest or the new one, never a torn one. The server
//   re-reads the manifest when the file changes, so a publish from another process takes effect
//   without a restart.
// - DatabaseReleaseStore (database-release-store.ts): the same in database rows, the default
//   with PostgreSQL, so instances on several machines need no shared disk.
import { randomBytes } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import type { Kysely } from "kysely";
import { EMPTY_MANIFEST, parseManifest, sha256Hex, type Manifest, type ReleaseEntry } from "../../firmware/index.ts";
import type { Database, Db, Livemode } from "../store/schema.ts";

/** Each mode's release directory under the data directory; live keeps the name it had before modes. */
export const RELEASES_DIRS: { readonly [mode in Livemode]: string } = { 1: "releases", 0: "test-releases" };
const MANIFEST_FILE = "manifest.json";
const LOCK_FILE = "publish.lock";
/** Images kept in memory: the fleet's release and a few canaries (each at most 1.875 MiB). */
const CACHED_IMAGES = 4;

export const RELEASE_STORE_KINDS = ["files", "database"] as const;
export type ReleaseStoreKind = (typeof RELEASE_STORE_KINDS)[number];

export class ReleaseStoreError extends Error {
  override name = "ReleaseStoreError";
}

/** Another publish or promote holds the lock: worth retrying shortly, unlike other store errors. */
export class ReleaseLockedError extends ReleaseStoreError {
  override name = "ReleaseLockedError";
}

/** What publish and promote do while holding the publish lock. */
export interface LockedReleases {
  /** The connection for the rest of the work: the lock's transaction (database store) or the caller's own. */
  readonly db: Kysely<Database>;
  /** The manifest as it is now, read afresh. */
  read(): Promise<Manifest>;
  /** Stores an image under a name of its own and returns the name; an identical existing image is reused, never overwritten. */
  storeImage(bytes: Uint8Array, version: string, sha256: string): Promise<string>;
  /** Replaces the manifest (readers see the old one or the new one); one that would not read back is refused. */
  replaceManifest(manifest: Manifest): Promise<void>;
}

export interface ReleaseStore {
  readonly kind: ReleaseStoreKind;
  /** The mode whose releases these are: only badges and keys of this mode see them. */
  readonly livemode: Livemode;
  /**
   * The current manifest, the empty one before the first publish; a damaged one is an error.
   * Cheap when nothing changed (a file stat, or one short row), and current on every call, so a
   * publish by another process or instance is seen on the next request. Pass `db` when calling
   * inside a transaction (the database store reads through it).
   */
  read(db?: Db): Promise<Manifest>;
  /**
   * The image's bytes, loaded once and kept: images never change, and hundreds of badges
   * downloading the same release then share one buffer. Checked against the manifest entry's
   * size and SHA-256 when loaded, so a damaged image is never served.
   */
  imageBytes(entry: ReleaseEntry): Promise<Buffer>;
  /**
   * Runs `work` holding the publish lock, so two publishes cannot both read the same manifest
   * and each write their own successor. `db` is the caller's connection or transaction; a
   * change the database store makes commits with it. Throws ReleaseLockedError when another
   * publish holds the lock.
   */
  withLock<T>(db: Kysely<Database>, work: (locked: LockedReleases) => Promise<T>): Promise<T>;
}

/** The releases of each mode: `releases[device.livemode]`, `releases[key.livemode]`. */
export type ReleaseStores = { readonly [mode in Livemode]: ReleaseStore };

/** How a mode is named to people (the CLI, refusals, the fleet page). */
export const modeName = (livemode: Livemode): "live" | "test" => (livemode === 1 ? "live" : "test");

/** Checks loaded image bytes against their manifest entry; `where` names the image in the error. */
export function checkedImage(bytes: Buffer, entry: ReleaseEntry, where: string): Buffer {
  if (bytes.length !== entry.size || sha256Hex(bytes) !== entry.sha256) {
    throw new ReleaseStoreError(`release image ${where} does not match its manifest entry (size or SHA-256)`);
  }
  return bytes;
}

/** The name an image is stored under: from its version and hash, never from the operator's file name. */
export function imageFileName(version: string, sha256: string): string {
  return `${version}-${sha256.slice(0, 16)}.bin`;
}

/** Loaded images by file, started or finished: concurrent first downloads share one load. */
export class ImageCache {
  readonly #images = new Map<string, Promise<Buffer>>();

  get(entry: ReleaseEntry, load: () => Promise<Buffer>): Promise<Buffer> {
    const cached = this.#images.get(entry.file);
    if (cached) return cached;
    const loading = load();
    if (this.#images.size >= CACHED_IMAGES) this.#images.delete(this.#images.keys().next().value!);
    this.#images.set(entry.file, loading);
    // A failed load is not kept: the next download tries again.
    loading.catch(() => this.#images.get(entry.file) === loading && this.#images.delete(entry.file));
    return loading;
  }
}

/** A manifest about to be written: refused unless it would read back. */
export function checkManifestToWrite(manifest: Manifest): void {
  const check = parseManifest(manifest);
  if (!check.ok) throw new ReleaseStoreError(`refusing to write an invalid manifest: ${check.message}`);
}

interface CachedManifest {
  ino: number;
  mtimeMs: number;
  size: number;
  manifest: Manifest;
}

export class FileReleaseStore implements ReleaseStore {
  readonly kind = "files";
  readonly livemode: Livemode;
  readonly dir: string;
  readonly imagesDir: string;
  readonly manifestFile: string;
  #cached: CachedManifest | undefined;
  readonly #images = new ImageCache();
  readonly #durable: boolean;

  /**
   * `durable: false` leaves out the fsyncs: a write still replaces the old file atomically (a
   * killed process leaves the old or the new), but a power cut may lose it. For a throwaway data
   * directory (a simulation's, removed when it ends), where each fsync cost a publish tens of ms
   * of a busy disk.
   */
  constructor(dataDir: string, livemode: Livemode, options: { durable?: boolean } = {}) {
    this.#durable = options.durable ?? true;
    this.livemode = livemode;
    this.dir = path.join(dataDir, RELEASES_DIRS[livemode]);
    this.imagesDir = path.join(this.dir, "images");
    this.manifestFile = path.join(this.dir, MANIFEST_FILE);
  }

  async read(): Promise<Manifest> {
    return this.#read();
  }

  #read(): Manifest {
    let stat: fs.Stats;
    try {
      stat = fs.statSync(this.manifestFile);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return EMPTY_MANIFEST;
      throw error;
    }
    const cached = this.#cached;
    if (cached && cached.ino === stat.ino && cached.mtimeMs === stat.mtimeMs && cached.size === stat.size) {
      return cached.manifest;
    }
    let json: unknown;
    try {
      json = JSON.parse(fs.readFileSync(this.manifestFile, "utf8"));
    } catch (error) {
      throw new ReleaseStoreError(`${this.manifestFile} is not valid JSON: ${(error as Error).message}`);
    }
    const parsed = parseManifest(json);
    if (!parsed.ok) throw new ReleaseStoreError(`${this.manifestFile} is invalid: ${parsed.message}`);
    this.#cached = { ino: stat.ino, mtimeMs: stat.mtimeMs, size: stat.size, manifest: parsed.manifest };
    return parsed.manifest;
  }

  imagePath(entry: ReleaseEntry): string {
    return path.join(this.imagesDir, entry.file);
  }

  imageBytes(entry: ReleaseEntry): Promise<Buffer> {
    return this.#images.get(entry, async () => checkedImage(await fs.promises.readFile(this.imagePath(entry)), entry, this.imagePath(entry)));
  }

  #storeImage(bytes: Uint8Array, version: string, sha256: string): string {
    fs.mkdirSync(this.imagesDir, { recursive: true });
    const file = imageFileName(version, sha256);
    const target = path.join(this.imagesDir, file);
    if (fs.existsSync(target)) return file;
    this.#writeDurably(target, bytes, 0o444);
    return file;
  }

  #replaceManifest(manifest: Manifest): void {
    checkManifestToWrite(manifest);
    fs.mkdirSync(this.dir, { recursive: true });
    this.#writeDurably(this.manifestFile, `${JSON.stringify(manifest, null, 2)}\n`, 0o644);
  }

  /**
   * The lock is the file publish.lock holding the publisher's process id. A lock left by a
   * publish that was killed (its process is gone) is taken over, and the temp files such a
   * publish may have left are removed.
   */
  async withLock<T>(db: Kysely<Database>, work: (locked: LockedReleases) => Promise<T>): Promise<T> {
    fs.mkdirSync(this.dir, { recursive: true });
    const lockFile = path.join(this.dir, LOCK_FILE);
    const fd = this.#acquire(lockFile) ?? (this.#removeIfStale(lockFile) ? this.#acquire(lockFile) : undefined);
    if (fd === undefined) {
      throw new ReleaseLockedError(`another publish holds ${lockFile}; wait for it, or delete the file if no publish is running`);
    }
    try {
      fs.writeSync(fd, `${process.pid}\n`);
      this.#removeTempFiles();
      return await work({
        db,
        read: async () => this.#read(),
        storeImage: async (bytes, version, sha256) => this.#storeImage(bytes, version, sha256),
        replaceManifest: async (manifest) => this.#replaceManifest(manifest),
      });
    } finally {
      fs.closeSync(fd);
      fs.rmSync(lockFile, { force: true });
    }
  }

  #acquire(lockFile: string): number | undefined {
    try {
      return fs.openSync(lockFile, "wx");
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "EEXIST") return undefined;
      throw error;
    }
  }

  /** Removes the lock when the process it names no longer exists; an empty lock is being written. */
  #removeIfStale(lockFile: string): boolean {
    const pid = Number.parseInt(fs.readFileSync(lockFile, "utf8"), 10);
    if (!Number.isInteger(pid) || pid <= 0) return false;
    try {
      process.kill(pid, 0);
      return false;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "ESRCH") return false;
    }
    fs.rmSync(lockFile, { force: true });
    return true;
  }

  #removeTempFiles(): void {
    for (const dir of [this.dir, this.imagesDir]) {
      if (!fs.existsSync(dir)) continue;
      for (const name of fs.readdirSync(dir)) {
        if (name.startsWith(".") && name.endsWith(".tmp")) fs.rmSync(path.join(dir, name), { force: true });
      }
    }
  }

  #writeDurably(target: string, data: Uint8Array | string, mode: number): void {
    const temp = path.join(path.dirname(target), `.${path.basename(target)}.${randomBytes(6).toString("hex")}.tmp`);
    const fd = fs.openSync(temp, "wx", mode);
    try {
      fs.writeFileSync(fd, data);
      if (this.#durable) fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    try {
      fs.renameSync(temp, target);
    } catch (error) {
      fs.rmSync(temp, { force: true });
      throw error;
    }
    if (!this.#durable) return;
    const dirFd = fs.openSync(path.dirname(target), "r");
    try {
      fs.fsyncSync(dirFd);
    } finally {
      fs.closeSync(dirFd);
    }
  }
}

export function findRelease(manifest: Manifest, version: string): ReleaseEntry | undefined {
  return manifest.releases.find((r) => r.version === version);
}

/**
 * The release a badge is meant to run: the newest of the fleet's release and any canary release
 * naming this badge that is not promoted yet. Every publish is newer than all before it, so the
 * manifest's order is version order and the last candidate is the newest.
 */
export function targetFor(manifest: Manifest, deviceId: string): ReleaseEntry | undefined {
  return manifest.releases.findLast(
    (r) => r.version === manifest.fleet || (r.canary === deviceId && r.promoted === null),
  );
}
