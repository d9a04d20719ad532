// The server side of a simulation (`badgebench sim run|fleet`, the sim benchmarks): a badgebench
// server started in this process on a temporary data directory, or one already running at a URL
// whose data directory this machine can open. Devices, API keys and releases are made in its
// store exactly as the admin commands make them (releases through publish's checks); the
// simulated badges themselves reach the server over HTTP only.
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { pino } from "pino";
import { buildAppImage, type Manifest, type ReleaseEntry } from "../firmware/index.ts";
import { startServer } from "../server/main.ts";
import { publishRelease } from "../server/releases/publishing.ts";
import { openReleaseStore } from "../server/releases/open-release-store.ts";
import { targetFor } from "../server/releases/release-store.ts";
import { createApiKey } from "../server/services/api-keys.ts";
import { createDevice, revokeDevice } from "../server/services/devices.ts";
import { importSchool } from "../server/services/school-import.ts";
import { openStore, type Store } from "../server/store/database.ts";

/** The room simulated badges hang in, and the school around it, in test mode. */
export const SIM_ROOM = "SIM";
/** Card UIDs of the simulated school's students; all are enrolled in the session open now. */
export const SIM_CARDS = Array.from({ length: 8 }, (_, i) => `04C0FFEE0${i}`);
const HOUR_MS = 3600_000;

/** A simulation that cannot be set up as asked: a message for the user, not a stack trace. */
export class SimSetupError extends Error {
  override name = "SimSetupError";
}

export interface SimRelease {
  version: string;
  size: number;
  crashOnBoot?: boolean;
  notes?: string[];
  display?: string;
  canary?: string;
}

export interface SimServer {
  url: string;
  dataDir: string;
  /** true when this process started the server on a temporary data directory it owns */
  inProcess: boolean;
  /** a key with `devices:read`, for the fleet view (`GET /v1/devices/{id}`) */
  apiKey: string;
  addDevice(name: string): Promise<{ id: string; token: string }>;
  revokeDevice(id: string): Promise<void>;
  publish(release: SimRelease): Promise<ReleaseEntry>;
  manifest(): Promise<Manifest>;
  /** the release the server offers this device, or null */
  targetFor(deviceId: string): Promise<ReleaseEntry | null>;
  /** the bytes of a published release's image */
  imageOf(entry: ReleaseEntry): Promise<Uint8Array>;
  close(): Promise<void>;
}

/** A server in this process on a fresh temporary data directory, removed again by close(). */
export async function startSimServer(): Promise<SimServer> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "badgebench-sim-"));
  try {
    const server = await startServer({ dataDir, port: 0, host: "127.0.0.1", sync: "normal", logger: pino({ level: "silent" }) });
    await importSchool(server.store.db, simSchool(new Date()), { mode: "test" });
    return await simServerOver(server.url, dataDir, server.store, true, async () => {
      await server.close();
      fs.rmSync(dataDir, { recursive: true, force: true });
    });
  } catch (error) {
    fs.rmSync(dataDir, { recursive: true, force: true });
    throw error;
  }
}

/**
 * The running server `--server URL --data DIR` name, or null when no --server was given (the
 * caller then starts its own). Devices are added to that server's store, so --data is needed.
 */
export async function connectNamedServer(url: string | undefined, dataDir: string | undefined): Promise<SimServer | null> {
  if (url === undefined) return null;
  if (dataDir === undefined) throw new SimSetupError("--server needs --data: the data directory the server at that URL runs on (devices are added to its store)");
  return connectSimServer(url, path.resolve(dataDir));
}

/**
 * A server already running at `url` on this machine, whose data directory is `dataDir`. Its
 * store is opened beside it (SQLite queues the writers); the room SIM is added when missing.
 */
export async function connectSimServer(url: string, dataDir: string): Promise<SimServer> {
  if (!fs.existsSync(dataDir)) throw new SimSetupError(`no data directory ${dataDir}: give --data the directory the server at ${url} runs on`);
  const store = await openStore({ dataDir });
  try {
    const room = await store.db.selectFrom("rooms").select("code").where("code", "=", SIM_ROOM).where("livemode", "=", 0).executeTakeFirst();
    if (!room) await importSchool(store.db, { rooms: [{ code: SIM_ROOM, name: "Simulated badges" }] }, { mode: "test" });
    return await simServerOver(url.replace(/\/+$/, ""), dataDir, store, false, () => store.close());
  } catch (error) {
    await store.close();
    throw error;
  }
}

async function simServerOver(url: string, dataDir: string, store: Store, inProcess: boolean, close: () => Promise<void>): Promise<SimServer> {
  const db = store.db;
  const releases = openReleaseStore(db, dataDir);
  const imageDir = fs.mkdtempSync(path.join(os.tmpdir(), "badgebench-sim-images-"));
  // The simulator's images never contain a password; publish still insists one is configured.
  const devWifiPassword = crypto.randomBytes(12).toString("hex");
  const apiKey = (await createApiKey(db, { mode: "test", scopes: ["devices:read"], name: "badgebench sim" })).secret;
  return {
    url,
    dataDir,
    inProcess,
    apiKey,
    async addDevice(name) {
      const { id, token } = await createDevice(db, { mode: "test", room: SIM_ROOM, model: "virtual-badge", name });
      return { id, token };
    },
    async revokeDevice(id) {
      await revokeDevice(db, id);
    },
    async publish(release) {
      const imagePath = path.join(imageDir, `${release.version}.bin`);
      fs.writeFileSync(imagePath, buildAppImage({ version: release.version, size: release.size, crashOnBoot: release.crashOnBoot }));
      return publishRelease(db, releases, {
        imagePath,
        version: release.version,
        notes: release.notes ?? [],
        display: release.display,
        canary: release.canary,
        devWifiPassword,
      });
    },
    manifest: () => releases.read(),
    targetFor: async (deviceId) => targetFor(await releases.read(), deviceId) ?? null,
    imageOf: (entry) => releases.imageBytes(entry),
    async close() {
      fs.rmSync(imageDir, { recursive: true, force: true });
      await close();
    },
  };
}

/** One room, a course whose session is open for the next hours, and students with cards. */
function simSchool(now: Date) {
  const students = SIM_CARDS.map((card_uid, i) => ({ external_id: `SIM${i + 1}`, name: `Simulated student ${i + 1}`, card_uid }));
  return {
    rooms: [{ code: SIM_ROOM, name: "Simulated badges" }],
    students,
    courses: [{ code: "SIMLAB", name: "Simulation lab" }],
    enrollments: [{ course_code: "SIMLAB", external_ids: students.map((s) => s.external_id) }],
    sessions: [
      {
        course_code: "SIMLAB",
        room: SIM_ROOM,
        starts_at: new Date(now.getTime() - 10 * 60_000).toISOString(),
        ends_at: new Date(now.getTime() + 8 * HOUR_MS).toISOString(),
        status: "open" as const,
      },
    ],
  };
}
