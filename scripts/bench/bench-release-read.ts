// Benchmarks what the release store costs a badge request: `read()` of an unchanged manifest
// (every check and download calls it; the database store reads the revision row each time),
// the first read after another instance published (the database store then loads the manifest
// row), and loading an image cold (checked by SHA-256) and warm (the in-memory copy). The
// baseline is the file store, measured in the same run; the database store is measured on
// SQLite and on a PostgreSQL database created for the run and dropped after it (127.0.0.1:5432,
// or BADGEBENCH_TEST_POSTGRES).
// Usage: npx tsx scripts/bench/bench-release-read.ts [--duration 3] [--concurrency 50] [--rounds 3] [--releases 20] [--json]
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Kysely } from "kysely";
import { buildAppImage, OTA_SLOT_BYTES } from "../../firmware/index.ts";
import { DatabaseReleaseStore } from "../../server/releases/database-release-store.ts";
import { publishRelease } from "../../server/releases/publishing.ts";
import { FileReleaseStore, type ReleaseStore } from "../../server/releases/release-store.ts";
import { openStore } from "../../server/store/database.ts";
import type { Database } from "../../server/store/schema.ts";
import { createMultiClientDatabase } from "../harness/postgres-database.ts";
import { commandLine, log, median, round, withTempDir } from "./bench-common.ts";
import { benchArgs, positiveInt, writeReport } from "./bench-cli.ts";

const PASSWORD = "bench-wifi-password";

const values = benchArgs({
  duration: { type: "string", default: "3" },
  concurrency: { type: "string", default: "50" },
  rounds: { type: "string", default: "3" },
  releases: { type: "string", default: "20" },
});
const durationMs = positiveInt("duration", values.duration) * 1000;
const concurrency = positiveInt("concurrency", values.concurrency);
const rounds = positiveInt("rounds", values.rounds);
const releaseCount = positiveInt("releases", values.releases);

interface Subject {
  name: string;
  db: Kysely<Database>;
  /** two stores on one database or directory, like two server instances */
  reader: ReleaseStore;
  publisher: ReleaseStore;
  close(): Promise<void>;
}

interface Figures {
  store: string;
  reads_per_s: number;
  first_read_after_publish_ms: number;
  image_cold_ms: number;
  image_warm_ms: number;
}

async function readsPerSecond(store: ReleaseStore): Promise<number> {
  let reads = 0;
  const deadline = performance.now() + durationMs;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < deadline) {
        await store.read();
        reads++;
      }
    }),
  );
  return reads / (durationMs / 1000);
}

async function timed(work: () => Promise<unknown>): Promise<number> {
  const start = performance.now();
  await work();
  return performance.now() - start;
}

let published = 0;
async function publishOne(subject: Subject, srcDir: string): Promise<void> {
  const version = `1.0.${published++}`;
  const file = path.join(srcDir, `${version}.bin`);
  fs.writeFileSync(file, buildAppImage({ version, size: OTA_SLOT_BYTES }));
  await publishRelease(subject.db, subject.publisher, { imagePath: file, version, notes: [], devWifiPassword: PASSWORD });
}

async function measure(subject: Subject, srcDir: string): Promise<Figures> {
  published = 0;
  for (let i = 0; i < releaseCount; i++) await publishOne(subject, srcDir);
  const samples: Omit<Figures, "store">[] = [];
  for (let r = 0; r < rounds; r++) {
    await subject.reader.read();
    const readsPerS = await readsPerSecond(subject.reader);
    await publishOne(subject, srcDir);
    const firstRead = await timed(() => subject.reader.read());
    // A fresh reader: its image cache is empty.
    const fresh = subject.reader instanceof FileReleaseStore ? new FileReleaseStore(path.dirname(subject.reader.dir), 1) : new DatabaseReleaseStore(subject.db, 1);
    const latest = (await fresh.read()).releases.at(-1)!;
    const cold = await timed(() => fresh.imageBytes(latest));
    const warm = await timed(() => fresh.imageBytes(latest));
    samples.push({ reads_per_s: readsPerS, first_read_after_publish_ms: firstRead, image_cold_ms: cold, image_warm_ms: warm });
  }
  const med = (key: keyof Omit<Figures, "store">) => round(median(samples.map((s) => s[key])), key === "reads_per_s" ? 0 : 3);
  return {
    store: subject.name,
    reads_per_s: med("reads_per_s"),
    first_read_after_publish_ms: med("first_read_after_publish_ms"),
    image_cold_ms: med("image_cold_ms"),
    image_warm_ms: med("image_warm_ms"),
  };
}

await withTempDir("badgebench-bench-releases-", async (dir) => {
  const results: Figures[] = [];
  const srcDir = fs.mkdtempSync(path.join(dir, "src-"));

  const sqliteSubject = async (name: string, kind: "files" | "database"): Promise<Subject> => {
    const dataDir = fs.mkdtempSync(path.join(dir, `${kind}-`));
    const store = await openStore({ dataDir, sync: "normal" });
    const make = () => (kind === "files" ? new FileReleaseStore(dataDir, 1) : new DatabaseReleaseStore(store.db, 1));
    return { name, db: store.db, reader: make(), publisher: make(), close: () => store.close() };
  };

  for (const [name, kind] of [
    ["files (SQLite default)", "files"],
    ["database on SQLite", "database"],
  ] as const) {
    const subject = await sqliteSubject(name, kind);
    try {
      log(`measuring ${name}`);
      results.push(await measure(subject, srcDir));
    } finally {
      await subject.close();
    }
  }

  const database = await createMultiClientDatabase("badgebench_bench_release_read_");
  try {
    const db = database.connect();
    const subject: Subject = {
      name: "database on PostgreSQL",
      db,
      reader: new DatabaseReleaseStore(database.connect(), 1),
      publisher: new DatabaseReleaseStore(db, 1),
      close: async () => undefined,
    };
    log(`measuring ${subject.name}`);
    results.push(await measure(subject, srcDir));
  } finally {
    await database.drop();
  }

  const settings = { duration_s: durationMs / 1000, concurrency, rounds, releases: releaseCount, cpus: os.cpus().length };
  writeReport({ command: commandLine("bench-release-read.ts"), settings, results }, values.json, (report) => [
    `${JSON.stringify(report.settings)}; medians of ${rounds} rounds`,
    "| store | read() of an unchanged manifest, reads/s | first read after a publish elsewhere, ms | image load cold (1.875 MiB, SHA-256 checked), ms | image warm, ms |",
    "|---|---|---|---|---|",
    ...report.results.map((r) => `| ${r.store} | ${r.reads_per_s} | ${r.first_read_after_publish_ms} | ${r.image_cold_ms} | ${r.image_warm_ms} |`),
  ]);
});
