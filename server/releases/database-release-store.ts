// Releases in the database (migrations 0005_releases, 0009_release_modes), the default on
// PostgreSQL: instances on several machines share releases without a shared disk. Each mode has
// its own manifest row (keyed by livemode); images are shared, named by version and hash, so the
// same bytes published in both modes are stored once. Images are inserted once and never
// changed, and checked against the manifest's SHA-256 whenever an instance loads one into its
// in-memory copy. The manifest is one row replaced in the transaction that stored its images, so
// a reader sees the old manifest or the new one, never a torn one, and never a manifest naming
// an image that is not there. Each replacement gets a fresh revision: an instance reads the
// revision (one short row) and the manifest itself only when it changed. Given the store's change
// feed (store/change-feed.ts; the server passes it), an instance keeps the manifest it read until
// the feed moves: a publish or promote announces itself in its transaction, so every instance
// offers it from the next request after the notification, and never later than the feed's check
// interval (500 ms by default); this process's own publishes from its next request. Without the
// feed the revision is read on every request. Requests arriving together share one revision
// read: one that arrives while a read is under way waits for the next read, started after it
// arrived (a read started before it might predate a publish it must see), and every request
// waiting then shares that one.
import { randomUUID } from "node:crypto";
import type { Kysely } from "kysely";
import { EMPTY_MANIFEST, parseManifest, type Manifest, type ReleaseEntry } from "../../firmware/index.ts";
import { findImage, imageSha256, insertImage, lockReleases, manifestRevision, readManifestRow, writeManifestRow } from "../store/releases-store.ts";
import { announceChange, noteLocalChange, type ChangeFeed } from "../store/change-feed.ts";
import type { Database, Db, Livemode } from "../store/schema.ts";
import {
  checkedImage,
  checkManifestToWrite,
  ImageCache,
  imageFileName,
  ReleaseLockedError,
  ReleaseStoreError,
  type LockedReleases,
  type ReleaseStore,
} from "./release-store.ts";

/** How long a publish waits for another one to finish before giving up with ReleaseLockedError. */
const LOCK_WAIT_MS = 5000;

export interface DatabaseReleaseStoreOptions {
  lockWaitMs?: number;
  /** keep the manifest read until the feed moves, instead of reading its revision on every call */
  changes?: ChangeFeed;
}

function parseManifestRow(row: { body: string } | undefined): Manifest {
  if (!row) return EMPTY_MANIFEST;
  let json: unknown;
  try {
    json = JSON.parse(row.body);
  } catch (error) {
    throw new ReleaseStoreError(`the release manifest in the database is not valid JSON: ${(error as Error).message}`);
  }
  const parsed = parseManifest(json);
  if (!parsed.ok) throw new ReleaseStoreError(`the release manifest in the database is invalid: ${parsed.message}`);
  return parsed.manifest;
}

export class DatabaseReleaseStore implements ReleaseStore {
  readonly kind = "database";
  readonly livemode: Livemode;
  readonly #db: Kysely<Database>;
  readonly #lockWaitMs: number;
  readonly #changes: ChangeFeed | undefined;
  /** The last committed manifest this instance read, with its revision and the change feed's value before the read. */
  #cached: { revision: string; manifest: Manifest; feed?: number } | undefined;
  /** The read under way, and the one queued to start when it ends (shared by whoever asks meanwhile). */
  #running: Promise<Manifest> | undefined;
  #queued: Promise<Manifest> | undefined;
  readonly #images = new ImageCache();

  constructor(db: Kysely<Database>, livemode: Livemode, options: DatabaseReleaseStoreOptions = {}) {
    this.livemode = livemode;
    this.#db = db;
    this.#lockWaitMs = options.lockWaitMs ?? LOCK_WAIT_MS;
    this.#changes = options.changes;
  }

  async read(db: Db = this.#db): Promise<Manifest> {
    // Inside a transaction the row may be its own uncommitted change: read, never cache.
    if (db.isTransaction) return parseManifestRow(await readManifestRow(db, this.livemode));
    if (this.#changes && this.#cached?.feed !== undefined) {
      const feed = this.#changes.current();
      if ((typeof feed === "number" ? feed : await feed) === this.#cached.feed) return this.#cached.manifest;
    }
    if (this.#queued) return this.#queued;
    if (!this.#running) return this.#start();
    const queued = this.#running.catch(() => undefined).then(() => this.#start());
    this.#queued = queued;
    return queued;
  }

  #start(): Promise<Manifest> {
    const running = this.#readCommitted();
    this.#running = running;
    this.#queued = undefined;
    const done = () => {
      if (this.#running === running) this.#running = undefined;
    };
    running.then(done, done);
    return running;
  }

  async #readCommitted(): Promise<Manifest> {
    const feed = this.#changes === undefined ? undefined : await this.#changes.current();
    const revision = await manifestRevision(this.#db, this.livemode);
    if (revision === undefined) return EMPTY_MANIFEST;
    if (this.#cached?.revision === revision) {
      this.#cached.feed = feed;
      return this.#cached.manifest;
    }
    const row = await readManifestRow(this.#db, this.livemode);
    const manifest = parseManifestRow(row);
    if (row) this.#cached = { revision: row.revision, manifest, feed };
    return manifest;
  }

  imageBytes(entry: ReleaseEntry): Promise<Buffer> {
    return this.#images.get(entry, async () => {
      const row = await findImage(this.#db, entry.file);
      if (!row) throw new ReleaseStoreError(`release image ${entry.file} is not in the database`);
      return checkedImage(Buffer.isBuffer(row.body) ? row.body : Buffer.from(row.body), entry, `${entry.file} in the database`);
    });
  }

  /**
   * The lock is taken in the transaction that makes the change (the caller's, when `db` is one),
   * so it ends with the commit or the rollback, even when the publisher is killed.
   */
  withLock<T>(db: Kysely<Database>, work: (locked: LockedReleases) => Promise<T>): Promise<T> {
    const locked = async (trx: Kysely<Database>): Promise<T> => {
      if (!(await lockReleases(trx, this.#lockWaitMs))) {
        throw new ReleaseLockedError("another publish or promote holds the release lock in the database; retry when it has finished");
      }
      return work({
        db: trx,
        read: async () => parseManifestRow(await readManifestRow(trx, this.livemode)),
        storeImage: (bytes, version, sha256) => this.#storeImage(trx, bytes, version, sha256),
        replaceManifest: async (manifest) => {
          checkManifestToWrite(manifest);
          const row = { revision: randomUUID(), body: JSON.stringify(manifest), updatedAt: new Date().toISOString() };
          await announceChange(trx, (announcing) => writeManifestRow(announcing, this.livemode, row));
        },
      });
    };
    if (db.isTransaction) return locked(db);
    // The caches of this process move once more after the commit, so none keeps the manifest read before it.
    return db.transaction().execute(locked).finally(noteLocalChange);
  }

  async #storeImage(trx: Kysely<Database>, bytes: Uint8Array, version: string, sha256: string): Promise<string> {
    const file = imageFileName(version, sha256);
    const existing = await imageSha256(trx, file);
    if (existing === sha256) return file;
    if (existing !== undefined) {
      throw new ReleaseStoreError(`release image ${file} is already in the database with other content (SHA-256 ${existing}); a stored image never changes`);
    }
    await insertImage(trx, { file, sha256, size: bytes.length, body: bytes, created_at: new Date().toISOString() });
    return file;
  }
}
