// The data directory the badge benchmarks (bench-ota-check, bench-ota-download, bench-sync) run
// against: a school of `rooms` rooms, each with one course of `studentsPerRoom` students who
// all carry a card, one session per room covering the present moment (opened, so it accepts
// taps) and `sessionsPerRoom - 1` more of the course in the room after it (each a further
// (session, student) pair per student for API creates), `devicesPerRoom` badges per room with
// their device tokens, and one published fleet release built by the firmware module's
// test-image maker.
import fs from "node:fs";
import path from "node:path";
import { buildAppImage, formatRequest, formatStatusPairs, OTA_SLOT_BYTES, type ReleaseEntry } from "../../firmware/index.ts";
import { publishRelease } from "../../server/releases/publishing.ts";
import { DatabaseReleaseStore } from "../../server/releases/database-release-store.ts";
import { FileReleaseStore } from "../../server/releases/release-store.ts";
import { createDevice } from "../../server/services/devices.ts";
import { importSchool, type SchoolFile } from "../../server/services/school-import.ts";
import { transitionSession } from "../../server/services/sessions.ts";
import { openStore, sqliteFileOf } from "../../server/store/database.ts";

/** The fleet release the benchmarks publish, and the older version the badges say they run. */
export const RELEASE_VERSION = "1.4.0";
export const INSTALLED_VERSION = "1.3.0";

/**
 * The image size the benchmarks use: exactly the OTA slot (0x1E0000 = 1,966,080 bytes =
 * 1.875 MiB). The issue says "1.9 MiB", but 1.9 MiB (1,992,294 bytes) does not fit the slot,
 * and publish refuses anything larger; the slot size is the largest image a badge can take.
 */
export const BENCH_IMAGE_BYTES = OTA_SLOT_BYTES;

// Publish refuses to run without a developer Wi-Fi password to look for (fail closed); the
// benchmark image does not contain this one.
const DEV_WIFI_PASSWORD = "bench-dev-wifi-password";

export interface BadgeBenchPlan {
  rooms: number;
  studentsPerRoom: number;
  devicesPerRoom: number;
  /** sessions of the room's course in each room, one after the other (default 1: the one covering the present moment) */
  sessionsPerRoom?: number;
  /** size of the published image; default BENCH_IMAGE_BYTES */
  imageBytes?: number;
  /** a `postgres://` URL: fill that (empty) PostgreSQL database instead of SQLite in the data directory, releases included */
  databaseUrl?: string;
}

export interface BenchDevice {
  id: string;
  token: string;
  room: string;
}

export interface BenchRoom {
  code: string;
  /** the session covering the present moment, which the room's badges tap into */
  sessionId: string;
  /** every session of the room, that one first */
  sessionIds: string[];
  /** the card UIDs of the room's students, all enrolled in the room's open session */
  cards: string[];
  /** the same students' external ids, in the same order */
  externalIds: string[];
}

export interface BadgeBench {
  dataDir: string;
  /** the SQLite file of the data directory (empty on PostgreSQL) */
  dbFile: string;
  release: ReleaseEntry;
  /** the stored release image the server sends (under <data>/releases/images; empty on PostgreSQL, which keeps it in the database) */
  imageFile: string;
  devices: BenchDevice[];
  rooms: BenchRoom[];
}

const roomCode = (r: number) => `BR${r}`;
const courseCode = (r: number) => `BADGE-${r}`;
const externalId = (r: number, i: number) => `R${r}S${i}`;
/** 10 upper-case hex digits, distinct across the school. */
const cardUid = (r: number, i: number) => `CA${r.toString(16).toUpperCase().padStart(2, "0")}${i.toString(16).toUpperCase().padStart(6, "0")}`;

/** The room's k-th session starts and ends this much after its first (which runs 3 hours). */
const SESSION_SPACING_MS = 4 * 3600_000;
const later = (iso: string, k: number) => new Date(Date.parse(iso) + k * SESSION_SPACING_MS).toISOString();

function buildSchool(plan: BadgeBenchPlan, now: number): SchoolFile {
  // Started 2 minutes ago and running for 3 hours: taps stamped "now minus a few seconds"
  // anywhere in a benchmark run fall inside it.
  const startsAt = new Date(Math.floor((now - 2 * 60_000) / 1000) * 1000).toISOString();
  const endsAt = new Date(Math.floor((now + 3 * 3600_000) / 1000) * 1000).toISOString();
  const rooms = Array.from({ length: plan.rooms }, (_, r) => r);
  return {
    school: { name: "Badgebench badge benchmark school" },
    rooms: rooms.map((r) => ({ code: roomCode(r), name: `Bench room ${r}` })),
    students: rooms.flatMap((r) =>
      Array.from({ length: plan.studentsPerRoom }, (_, i) => ({ external_id: externalId(r, i), name: `Student ${r}-${i}`, card_uid: cardUid(r, i) })),
    ),
    courses: rooms.map((r) => ({ code: courseCode(r), name: `Bench course ${r}` })),
    enrollments: rooms.map((r) => ({
      course_code: courseCode(r),
      external_ids: Array.from({ length: plan.studentsPerRoom }, (_, i) => externalId(r, i)),
    })),
    sessions: rooms.flatMap((r) =>
      Array.from({ length: plan.sessionsPerRoom ?? 1 }, (_, k) => ({ course_code: courseCode(r), room: roomCode(r), starts_at: later(startsAt, k), ends_at: later(endsAt, k) })),
    ),
  };
}

/** Fills the (new) data directory `dataDir`; `scratchDir` receives the image file before it is published. */
export async function prepareBadgeBench(dataDir: string, scratchDir: string, plan: BadgeBenchPlan): Promise<BadgeBench> {
  // `normal` sync: this is setup, not the thing being measured.
  const store = await openStore({ dataDir, sync: "normal", databaseUrl: plan.databaseUrl });
  try {
    await importSchool(store.db, buildSchool(plan, Date.now()), { mode: "test", source: "badge bench school" });
    const sessions = await store.db.selectFrom("sessions").select(["id", "room"]).where("livemode", "=", 0).orderBy("starts_at").execute();
    await store.db.transaction().execute(async (trx) => {
      for (const session of sessions) await transitionSession(trx, session.id, "open");
    });
    const rooms: BenchRoom[] = Array.from({ length: plan.rooms }, (_, r) => ({
      code: roomCode(r),
      sessionId: sessions.find((s) => s.room === roomCode(r))!.id,
      sessionIds: sessions.filter((s) => s.room === roomCode(r)).map((s) => s.id),
      cards: Array.from({ length: plan.studentsPerRoom }, (_, i) => cardUid(r, i)),
      externalIds: Array.from({ length: plan.studentsPerRoom }, (_, i) => externalId(r, i)),
    }));

    const devices: BenchDevice[] = [];
    for (const room of rooms) {
      for (let d = 0; d < plan.devicesPerRoom; d++) {
        const device = await createDevice(store.db, { mode: "test", room: room.code, model: "bench-badge", name: `bench ${room.code}-${d}` });
        devices.push({ id: device.id, token: device.token, room: room.code });
      }
    }

    fs.mkdirSync(scratchDir, { recursive: true });
    const imagePath = path.join(scratchDir, `badge-${RELEASE_VERSION}.bin`);
    fs.writeFileSync(imagePath, buildAppImage({ version: RELEASE_VERSION, size: plan.imageBytes ?? BENCH_IMAGE_BYTES }));
    const publish = { imagePath, version: RELEASE_VERSION, notes: ["Benchmark release"], devWifiPassword: DEV_WIFI_PASSWORD };
    if (store.kind !== "sqlite") {
      const release = await publishRelease(store.db, new DatabaseReleaseStore(store.db, 0), publish);
      return { dataDir, dbFile: "", release, imageFile: "", devices, rooms };
    }
    const releases = new FileReleaseStore(dataDir, 0);
    const release = await publishRelease(store.db, releases, publish);
    return { dataDir, dbFile: sqliteFileOf(store), release, imageFile: releases.imagePath(release), devices, rooms };
  } finally {
    await store.close();
  }
}

/** The key=value lines every badge request starts with: a badge on INSTALLED_VERSION, battery fine. */
export function badgeStatusLines(): string {
  return STATUS_LINES;
}

const STATUS_LINES = formatRequest(formatStatusPairs({ version: INSTALLED_VERSION, display: `Badge ${INSTALLED_VERSION}`, volts: 3.95, charging: false }));
