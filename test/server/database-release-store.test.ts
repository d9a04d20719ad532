// The database release store (issue 14 item 4) on SQLite and on real PostgreSQL: publish's
// refusals change no row; images are byte-identical, immutable and checked by SHA-256 on every
// load; the manifest is replaced in one transaction (old or new, never an image-less entry);
// another store on the same database (another server instance) sees a publish on its next read;
// concurrent publishes from separate connections are serialised by the lock.
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import type { Kysely } from "kysely";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { buildAppImage, md5Hex, OTA_SLOT_BYTES, parseManifest, type ReleaseEntry } from "../../firmware/index.ts";
import { DatabaseReleaseStore } from "../../server/releases/database-release-store.ts";
import { openReleaseStores } from "../../server/releases/open-release-store.ts";
import { promoteRelease, PublishRefusal, publishRelease, type PublishInput } from "../../server/releases/publishing.ts";
import { FileReleaseStore, ReleaseLockedError, ReleaseStoreError } from "../../server/releases/release-store.ts";
import { createDevice, revokeDevice } from "../../server/services/devices.ts";
import { importSchool } from "../../server/services/school-import.ts";
import { openStore, type Store } from "../../server/store/database.ts";
import { isPostgres } from "../../server/store/dialect.ts";
import type { Database } from "../../server/store/schema.ts";
import { ROOT, run, tempDirs } from "./cli-process.ts";
import { killPublishLoop } from "./publish-loop.ts";
import { smallSchool } from "./harness.ts";
import { createMultiClientDatabase, type MultiClientDatabase } from "../../scripts/harness/postgres-database.ts";
import { testDatabasePrefix } from "../../scripts/harness/postgres-admin.ts";

const PASSWORD = "lab-wifi-s3cret!";
const KILLS = 4;
const tempDir = tempDirs("db-releases");
const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");
// This run's name in each database, so that the run's teardown drops what a file that died left.
const runDatabasePrefix = (label: string) => `${testDatabasePrefix(inject("postgresTestRun"))}${label}_`;
const codesOf = (refusal: PublishRefusal) => refusal.reasons.map((r) => r.code).sort();

/** A publish's outcome: the entry, or the codes of its refusal. */
type Outcome = { entry: ReleaseEntry } | { codes: string[] };

/** One database reached through several independent clients, each like another server instance. */
interface Backend {
  /** the data directory (SQLite) or the postgres:// URL, as database-release-child.ts takes it */
  database: string;
  connect(): Promise<Kysely<Database>>;
  /** Runs the publishes at once, each from a client of its own. */
  publishConcurrently(inputs: PublishInput[]): Promise<Outcome[]>;
  close(): Promise<void>;
}

const outcomeOf = (work: Promise<ReleaseEntry>): Promise<Outcome> =>
  work.then(
    (entry) => ({ entry }),
    (error: unknown) => {
      if (error instanceof PublishRefusal) return { codes: codesOf(error) };
      throw error;
    },
  );

const CHILD = path.join(ROOT, "test/server/database-release-child.ts");

/** Runs database-release-child.ts against `database` (a data directory or a postgres:// URL). */
const runChild = (database: string, args: string[]) =>
  run([database, ...args], { program: ["--import", "tsx", CHILD], timeoutMs: 60_000 });

async function sqliteBackend(): Promise<Backend> {
  const dataDir = tempDir("sqlite");
  const stores: Store[] = [];
  return {
    database: dataDir,
    async connect() {
      const store = await openStore({ dataDir, sync: "normal" });
      stores.push(store);
      return store.db;
    },
    // In processes of their own: better-sqlite3 runs on the event loop, so a second connection in
    // this process waiting for the write lock would stall the transaction holding it too.
    publishConcurrently: (inputs) =>
      Promise.all(
        inputs.map(async (input) => {
          const result = await runChild(dataDir, ["publish", JSON.stringify(input)]);
          if (result.code !== 0) throw new Error(`the publishing process failed:\n${result.stderr}`);
          return JSON.parse(result.stdout) as Outcome;
        }),
      ),
    async close() {
      await Promise.all(stores.map((s) => s.close()));
    },
  };
}

async function postgresBackend(): Promise<Backend> {
  const database = await createMultiClientDatabase(runDatabasePrefix("releases"));
  return {
    database: database.url,
    connect: async () => database.connect(),
    publishConcurrently: (inputs) =>
      Promise.all(
        inputs.map((input) => {
          const db = database.connect();
          return outcomeOf(publishRelease(db, new DatabaseReleaseStore(db, 0), input));
        }),
      ),
    close: () => database.drop(),
  };
}

const BACKENDS: [string, () => Promise<Backend>][] = [
  ["SQLite", sqliteBackend],
  ["PostgreSQL", postgresBackend],
];

/** Every row of both tables, to show a refused publish changed nothing. */
async function rows(db: Kysely<Database>) {
  const images = await db.selectFrom("release_images").select(["file", "sha256", "size", "body", "created_at"]).orderBy("file").execute();
  const manifest = await db.selectFrom("release_manifests").selectAll().execute();
  return { images: images.map((r) => ({ ...r, body: sha256(r.body) })), manifest };
}

async function refusalOf(work: Promise<unknown>): Promise<PublishRefusal> {
  const error = await work.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(PublishRefusal);
  return error as PublishRefusal;
}

describe.each(BACKENDS)("the database release store on %s", (_name, openBackend) => {
  let backend: Backend;
  let db: Kysely<Database>;
  let releases: DatabaseReleaseStore;
  let src: string;
  let first: ReleaseEntry;
  let firstImage: Uint8Array;

  const image = (version: string, options: Partial<Parameters<typeof buildAppImage>[0]> = {}) => {
    const file = path.join(src, `${version}-${Math.random().toString(16).slice(2)}.bin`);
    fs.writeFileSync(file, buildAppImage({ version, ...options }));
    return file;
  };
  const input = (version: string, extra: Partial<PublishInput> = {}): PublishInput => ({
    imagePath: image(version),
    version,
    notes: [],
    devWifiPassword: PASSWORD,
    ...extra,
  });

  beforeAll(async () => {
    backend = await openBackend();
    db = await backend.connect();
    await importSchool(db, smallSchool(), { mode: "test" });
    releases = new DatabaseReleaseStore(db, 0);
    src = tempDir("src");
  });
  afterAll(() => backend?.close());

  it("is what openReleaseStores picks for PostgreSQL; SQLite keeps files unless asked", () => {
    const picked = openReleaseStores(db, src)[0];
    expect(picked).toBeInstanceOf(isPostgres(db) ? DatabaseReleaseStore : FileReleaseStore);
    expect(openReleaseStores(db, src, "database")[0]).toBeInstanceOf(DatabaseReleaseStore);
  });

  it("reads the empty manifest before the first publish", async () => {
    expect(await releases.read()).toEqual({ format: 1, fleet: null, releases: [] });
  });

  it("stores the image byte for byte and describes it truly in the manifest row", async () => {
    firstImage = buildAppImage({ version: "1.4.0", size: OTA_SLOT_BYTES });
    const file = path.join(src, "badge-1.4.0.bin");
    fs.writeFileSync(file, firstImage);
    const now = new Date("2026-11-25T09:00:00.000Z");
    first = await publishRelease(db, releases, { imagePath: file, version: "1.4.0", notes: ["Faster check-in"], devWifiPassword: PASSWORD, now });
    expect(first).toEqual({
      version: "1.4.0",
      display: "1.4.0",
      file: `1.4.0-${sha256(firstImage).slice(0, 16)}.bin`,
      size: OTA_SLOT_BYTES,
      md5: md5Hex(firstImage),
      sha256: sha256(firstImage),
      notes: ["Faster check-in"],
      published_at: now.toISOString(),
      canary: null,
      promoted: null,
    });
    const stored = await db.selectFrom("release_images").selectAll().execute();
    expect(stored).toHaveLength(1);
    expect(stored[0]).toMatchObject({ file: first.file, sha256: first.sha256, size: OTA_SLOT_BYTES });
    expect(Buffer.compare(Buffer.from(stored[0]!.body), Buffer.from(firstImage))).toBe(0);
    const row = await db.selectFrom("release_manifests").selectAll().executeTakeFirstOrThrow();
    const parsed = parseManifest(JSON.parse(row.body));
    expect(parsed).toEqual({ ok: true, manifest: { format: 1, fleet: "1.4.0", releases: [first] } });
    expect(await releases.read()).toEqual({ format: 1, fleet: "1.4.0", releases: [first] });
    expect(Buffer.compare(await releases.imageBytes(first), Buffer.from(firstImage))).toBe(0);
  });

  describe("publish refuses, naming the condition, and changes no row", () => {
    let canaryRevoked: string;
    beforeAll(async () => {
      const device = await createDevice(db, { mode: "test", room: "R1", model: "BB-1" });
      await revokeDevice(db, device.id);
      canaryRevoked = device.id;
    });

    const cases: { name: string; input: () => PublishInput; codes: string[] }[] = [
      { name: "a version already published", input: () => input("1.4.0"), codes: ["version_exists"] },
      { name: "a version not newer than the latest", input: () => ({ ...input("1.3.0") }), codes: ["version_not_newer"] },
      { name: "an image containing the developer Wi-Fi password", input: () => ({ ...input("1.5.0"), imagePath: image("1.5.0", { wifiPassword: PASSWORD }) }), codes: ["image_contains_wifi_password"] },
      { name: "an image without its version string", input: () => ({ ...input("1.5.0"), imagePath: image("1.4.9") }), codes: ["image_version_missing"] },
      { name: "an unknown canary", input: () => input("1.5.0", { canary: "dev_nobody" }), codes: ["canary_unknown"] },
      { name: "a revoked canary", input: () => input("1.5.0", { canary: canaryRevoked }), codes: ["canary_revoked"] },
      { name: "no configured Wi-Fi password", input: () => input("1.5.0", { devWifiPassword: undefined }), codes: ["wifi_password_unconfigured"] },
      {
        name: "several conditions at once",
        input: () => ({ ...input("1.3.0", { notes: ["", "b", "c", "d"] }), imagePath: image("1.3.0", { wifiPassword: PASSWORD }) }),
        codes: ["image_contains_wifi_password", "note_invalid", "notes_too_many", "version_not_newer"],
      },
    ];
    for (const testCase of cases) {
      it(`refuses ${testCase.name}`, async () => {
        const before = await rows(db);
        const refusal = await refusalOf(publishRelease(db, releases, testCase.input()));
        expect(codesOf(refusal)).toEqual([...testCase.codes].sort());
        expect(await rows(db)).toEqual(before);
        expect((await releases.read()).releases).toEqual([first]);
      });
    }
  });

  it("keeps an image immutable: the same bytes reuse the row, other bytes under its name are refused", async () => {
    const before = await rows(db);
    const forged = first.sha256.slice(0, 16) + "0".repeat(48);
    await expect(releases.withLock(db, (locked) => locked.storeImage(firstImage, "1.4.0", first.sha256))).resolves.toBe(first.file);
    await expect(releases.withLock(db, (locked) => locked.storeImage(new Uint8Array([1, 2, 3]), "1.4.0", forged))).rejects.toThrow(
      new ReleaseStoreError(`release image ${first.file} is already in the database with other content (SHA-256 ${first.sha256}); a stored image never changes`),
    );
    expect(await rows(db)).toEqual(before);
  });

  it("writes an image and its manifest together or not at all", async () => {
    const before = await rows(db);
    const failing = releases.withLock(db, async (locked) => {
      const bytes = buildAppImage({ version: "1.9.0" });
      await locked.storeImage(bytes, "1.9.0", sha256(bytes));
      await locked.replaceManifest({ format: 1, fleet: "9.9.9", releases: [] });
    });
    await expect(failing).rejects.toThrow(/refusing to write an invalid manifest/);
    expect(await rows(db)).toEqual(before);
  });

  it("refuses a damaged image row on load, serves it again once repaired, and never caches a failed load", async () => {
    const damaged = Buffer.from(firstImage);
    damaged[damaged.length - 100]! ^= 0xff;
    await db.updateTable("release_images").set({ body: damaged }).where("file", "=", first.file).execute();
    const fresh = new DatabaseReleaseStore(db, 0);
    await expect(fresh.imageBytes(first)).rejects.toThrow(
      new ReleaseStoreError(`release image ${first.file} in the database does not match its manifest entry (size or SHA-256)`),
    );
    await db.updateTable("release_images").set({ body: damaged.subarray(0, 1000) }).where("file", "=", first.file).execute();
    await expect(fresh.imageBytes(first)).rejects.toThrow(/does not match its manifest entry/);
    await db.updateTable("release_images").set({ body: Buffer.from(firstImage) }).where("file", "=", first.file).execute();
    expect(Buffer.compare(await fresh.imageBytes(first), Buffer.from(firstImage))).toBe(0);
  });

  it("refuses an image row that is missing, and a manifest row that does not parse", async () => {
    const fresh = new DatabaseReleaseStore(db, 0);
    await expect(fresh.imageBytes({ ...first, file: "1.4.0-0000000000000000.bin" })).rejects.toThrow(
      "release image 1.4.0-0000000000000000.bin is not in the database",
    );
    const row = await db.selectFrom("release_manifests").selectAll().executeTakeFirstOrThrow();
    await db.updateTable("release_manifests").set({ body: '{"format": 1, "fleet": "1.4.0"', revision: "damaged" }).execute();
    await expect(fresh.read()).rejects.toThrow(/the release manifest in the database is not valid JSON/);
    await db.updateTable("release_manifests").set({ body: JSON.stringify({ format: 1, fleet: "7.0.0", releases: [] }), revision: "invalid" }).execute();
    await expect(fresh.read()).rejects.toThrow(/the release manifest in the database is invalid/);
    await db.updateTable("release_manifests").set(row).execute();
    expect((await fresh.read()).releases).toEqual([first]);
  });

  it("a store on another connection sees a publish on its next read, and reuses its copy while nothing changed", async () => {
    const other = new DatabaseReleaseStore(await backend.connect(), 0);
    const seen = await other.read();
    expect(seen.releases).toEqual([first]);
    expect(await other.read()).toBe(seen);
    const entry = await publishRelease(db, releases, input("1.5.0"));
    const next = await other.read();
    expect(next.fleet).toBe("1.5.0");
    expect(next.releases).toEqual([first, entry]);
    expect(await other.read()).toBe(next);
  });

  it("promote through the database store: refused until confirmed, forced with a reason, recorded in the manifest row", async () => {
    const canary = await createDevice(db, { mode: "test", room: "R1", model: "BB-1" });
    await publishRelease(db, releases, input("1.6.0", { canary: canary.id }));
    const before = await rows(db);
    expect(codesOf(await refusalOf(promoteRelease(db, releases, "1.6.0")))).toEqual(["canary_not_confirmed"]);
    expect(codesOf(await refusalOf(promoteRelease(db, releases, "1.6.0", { force: true })))).toEqual(["reason_missing"]);
    expect(codesOf(await refusalOf(promoteRelease(db, releases, "9.9.9", { force: true, reason: "x" })))).toEqual(["release_unknown"]);
    expect(await rows(db)).toEqual(before);
    const promoted = await promoteRelease(db, releases, "1.6.0", { force: true, reason: "tested on the bench" });
    expect(promoted.promoted).toMatchObject({ forced: true, reason: "tested on the bench", canary_report: null });
    const other = new DatabaseReleaseStore(await backend.connect(), 0);
    expect((await other.read()).fleet).toBe("1.6.0");
  });

  it("serialises concurrent publishes of one version from separate clients: one wins, the rest are refused", async () => {
    const outcomes = await backend.publishConcurrently([0, 1, 2, 3].map((i) => input("2.0.0", { notes: [`from client ${i}`] })));
    const won = outcomes.flatMap((o) => ("entry" in o ? [o.entry] : []));
    expect(won).toHaveLength(1);
    expect(outcomes.filter((o) => "codes" in o)).toEqual([0, 1, 2].map(() => ({ codes: ["version_exists"] })));
    expect((await releases.read()).releases.filter((r) => r.version === "2.0.0")).toEqual(won);
    expect(await db.selectFrom("release_images").select("file").where("file", "like", "2.0.0-%").execute()).toHaveLength(1);
  });

  it("serialises concurrent publishes of different versions: no publish that succeeded is lost", async () => {
    const versions = ["2.1.0", "2.2.0", "2.3.0", "2.4.0"];
    const outcomes = await backend.publishConcurrently(versions.map((v) => input(v)));
    const published = outcomes.flatMap((o) => ("entry" in o ? [o.entry.version] : []));
    for (const o of outcomes) if ("codes" in o) expect(o.codes).toEqual(["version_not_newer"]);
    expect(published.length).toBeGreaterThan(0);
    const inManifest = (await releases.read()).releases.map((r) => r.version).filter((v) => versions.includes(v));
    expect(inManifest).toEqual([...published].sort());
  });
  it("survives kills of a publishing process at random moments with the old or the new manifest", async () => {
    const canary = await createDevice(db, { mode: "test", room: "R1", model: "BB-1" });
    const loopSrc = tempDir("loop-src");
    const published = new Set<string>();
    const promoted = new Set<string>();
    for (let kill = 0; kill < KILLS; kill++) {
      const killed = await killPublishLoop(["--import", "tsx", CHILD, backend.database, "loop", loopSrc, canary.id], { startTimeoutMs: 30_000, maxDelayMs: 300 });
      for (const version of killed.published) published.add(version);
      for (const version of killed.promoted) promoted.add(version);

      // The manifest parses, and every image it names is there and intact.
      const fresh = new DatabaseReleaseStore(db, 0);
      const manifest = await fresh.read();
      for (const entry of manifest.releases) expect(sha256(await fresh.imageBytes(entry)), entry.version).toBe(entry.sha256);
      // Every finished publish and promote is in it; each kill adds at most the one under way.
      const versions = manifest.releases.map((r) => r.version).filter((v) => v.startsWith("5.0."));
      for (const version of published) expect(versions).toContain(version);
      for (const version of promoted) expect(manifest.releases.find((r) => r.version === version)?.promoted).not.toBeNull();
      expect(versions.filter((v) => !published.has(v)).length).toBeLessThanOrEqual(kill + 1);
    }
    expect(published.size).toBeGreaterThanOrEqual(KILLS);
    // No lock is left behind: the next publish goes through at once.
    expect((await publishRelease(db, new DatabaseReleaseStore(db, 0, { lockWaitMs: 0 }), input("6.0.0"))).version).toBe("6.0.0");
  }, 180_000);
});


describe("reads on PostgreSQL", () => {
  it("requests arriving together share revision reads, and one arriving after a publish elsewhere always sees it", async () => {
    const database = await createMultiClientDatabase(runDatabasePrefix("reads"));
    try {
      let queries = 0;
      const readerDb = database.connect({ log: (event) => void (event.level === "query" && queries++) });
      const reader = new DatabaseReleaseStore(readerDb, 0);
      const publisherDb = database.connect();
      const publisher = new DatabaseReleaseStore(publisherDb, 0);
      const src = tempDir("reads-src");
      await reader.read();
      queries = 0;
      const together = await Promise.all(Array.from({ length: 100 }, () => reader.read()));
      expect(new Set(together).size).toBe(1);
      expect(queries).toBeLessThanOrEqual(2);

      // Readers keep the instance busy while another instance publishes; a read started once
      // the publish returned must include it.
      let busy = true;
      const background = Promise.all(
        Array.from({ length: 20 }, async () => {
          while (busy) await reader.read();
        }),
      );
      for (let minor = 0; minor < 20; minor++) {
        const version = `1.${minor}.0`;
        const file = path.join(src, `${version}.bin`);
        fs.writeFileSync(file, buildAppImage({ version }));
        await publishRelease(publisherDb, publisher, { imagePath: file, version, notes: [], devWifiPassword: PASSWORD });
        expect((await reader.read()).fleet).toBe(version);
      }
      busy = false;
      await background;
    } finally {
      await database.drop();
    }
  });
});

/** Another client taking the publish lock and keeping it until `release()`; `holding` ends with it. */
async function holdReleaseLock(database: MultiClientDatabase) {
  const holder = database.connect();
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  let entered!: () => void;
  const inside = new Promise<void>((resolve) => (entered = resolve));
  const holding = new DatabaseReleaseStore(holder, 0).withLock(holder, async () => {
    entered();
    await held;
  });
  await inside;
  return { holding, release };
}

describe("the publish lock on PostgreSQL", () => {
  it("a publish waits while another holds the lock and proceeds after it", async () => {
    const database = await createMultiClientDatabase(runDatabasePrefix("wait"));
    try {
      const { holding, release } = await holdReleaseLock(database);
      const src = tempDir("wait-src");
      const file = path.join(src, "3.0.0.bin");
      fs.writeFileSync(file, buildAppImage({ version: "3.0.0" }));
      const waiter = database.connect();
      let finished = false;
      const publishing = publishRelease(waiter, new DatabaseReleaseStore(waiter, 0), { imagePath: file, version: "3.0.0", notes: [], devWifiPassword: PASSWORD });
      void publishing.finally(() => (finished = true)).catch(() => undefined);
      await new Promise((resolve) => setTimeout(resolve, 400));
      expect(finished).toBe(false);
      release();
      await holding;
      expect((await publishing).version).toBe("3.0.0");
    } finally {
      await database.drop();
    }
  });

  it("a publish gives up with ReleaseLockedError when the lock stays held, and changes nothing", async () => {
    const database = await createMultiClientDatabase(runDatabasePrefix("lock"));
    try {
      const { holding, release } = await holdReleaseLock(database);
      const waiter = database.connect();
      const src = tempDir("lock-src");
      const file = path.join(src, "1.0.0.bin");
      fs.writeFileSync(file, buildAppImage({ version: "1.0.0" }));
      const store = new DatabaseReleaseStore(waiter, 0, { lockWaitMs: 300 });
      const publishing = publishRelease(waiter, store, { imagePath: file, version: "1.0.0", notes: [], devWifiPassword: PASSWORD });
      await expect(publishing).rejects.toThrow(
        new ReleaseLockedError("another publish or promote holds the release lock in the database; retry when it has finished"),
      );
      release();
      await holding;
      expect(await rows(waiter)).toEqual({ images: [], manifest: [] });
      expect((await publishRelease(waiter, store, { imagePath: file, version: "1.0.0", notes: [], devWifiPassword: PASSWORD })).version).toBe("1.0.0");
    } finally {
      await database.drop();
    }
  });
});
