// The release store: images and the manifest under <data>/releases. Images are written once and
// never changed (a badge was told their MD5); the manifest is replaced atomically (temp file,
// fsync, rename, fsync of the directory), so a crash at any point leaves the old manifest or
// the new one, never a torn one. The server re-reads the manifest when the file changes, so a
// publish from another process takes effect without a restart.
import { randomBytes } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { EMPTY_MANIFEST, parseManifest, sha256Hex, type Manifest, type ReleaseEntry } from "../../firmware/index.ts";

export const RELEASES_DIR = "releases";
const MANIFEST_FILE = "manifest.json";
const LOCK_FILE = "publish.lock";
/** Images kept in memory: the fleet's release and a few canaries (each at most 1.875 MiB). */
const CACHED_IMAGES = 4;

export class ReleaseStoreError extends Error {
  override name = "ReleaseStoreError";
}

/** Another publish or promote holds the lock: worth retrying shortly, unlike other store errors. */
export class ReleaseLockedError extends ReleaseStoreError {
  override name = "ReleaseLockedError";
}

interface CachedManifest {
  ino: number;
  mtimeMs: number;
  size: number;
  manifest: Manifest;
}

export class ReleaseStore {
  readonly dir: string;
  readonly imagesDir: string;
  readonly manifestFile: string;
  #cached: CachedManifest | undefined;
  /** Image reads by file, started or finished: concurrent first downloads share one read. */
  readonly #images = new Map<string, Promise<Buffer>>();

  constructor(dataDir: string) {
    this.dir = path.join(dataDir, RELEASES_DIR);
    this.imagesDir = path.join(this.dir, "images");
    this.manifestFile = path.join(this.dir, MANIFEST_FILE);
  }

  /** The current manifest; an absent file is the empty manifest, a damaged one an error. */
  read(): Manifest {
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

  /**
   * The image's bytes, read once and kept: images never change, and hundreds of badges
   * downloading the same release then share one buffer instead of each reading the file.
   * Checked against the manifest's SHA-256 when read, so a damaged file is never served.
   */
  imageBytes(entry: ReleaseEntry): Promise<Buffer> {
    const cached = this.#images.get(entry.file);
    if (cached) return cached;
    const read = this.#readImage(entry);
    if (this.#images.size >= CACHED_IMAGES) this.#images.delete(this.#images.keys().next().value!);
    this.#images.set(entry.file, read);
    // A failed read is not kept: the next download tries again.
    read.catch(() => this.#images.get(entry.file) === read && this.#images.delete(entry.file));
    return read;
  }

  async #readImage(entry: ReleaseEntry): Promise<Buffer> {
    const bytes = await fs.promises.readFile(this.imagePath(entry));
    if (bytes.length !== entry.size || sha256Hex(bytes) !== entry.sha256) {
      throw new ReleaseStoreError(`release image ${this.imagePath(entry)} does not match its manifest entry (size or SHA-256)`);
    }
    return bytes;
  }

  /** Writes an image under a name of its own; an identical existing file is reused, never overwritten. */
  storeImage(bytes: Uint8Array, version: string, sha256: string): string {
    fs.mkdirSync(this.imagesDir, { recursive: true });
    const file = `${version}-${sha256.slice(0, 16)}.bin`;
    const target = path.join(this.imagesDir, file);
    if (fs.existsSync(target)) return file;
    this.#writeDurably(target, bytes, 0o444);
    return file;
  }

  /** Replaces the manifest; one that would not read back is refused, so no path can write it. */
  replaceManifest(manifest: Manifest): void {
    const check = parseManifest(manifest);
    if (!check.ok) throw new ReleaseStoreError(`refusing to write an invalid manifest: ${check.message}`);
    fs.mkdirSync(this.dir, { recursive: true });
    this.#writeDurably(this.manifestFile, `${JSON.stringify(manifest, null, 2)}\n`, 0o644);
  }

  /**
   * Holds the publish lock while `work` runs, so two publishes cannot both read the same
   * manifest and each write their own successor. A lock left by a publish that was killed (its
   * process is gone) is taken over, and the temp files such a publish may have left are removed.
   */
  async withLock<T>(work: () => Promise<T>): Promise<T> {
    fs.mkdirSync(this.dir, { recursive: true });
    const lockFile = path.join(this.dir, LOCK_FILE);
    const fd = this.#acquire(lockFile) ?? (this.#removeIfStale(lockFile) ? this.#acquire(lockFile) : undefined);
    if (fd === undefined) {
      throw new ReleaseLockedError(`another publish holds ${lockFile}; wait for it, or delete the file if no publish is running`);
    }
    try {
      fs.writeSync(fd, `${process.pid}\n`);
      this.#removeTempFiles();
      return await work();
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
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    try {
      fs.renameSync(temp, target);
    } catch (error) {
      fs.rmSync(temp, { force: true });
      throw error;
    }
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
