// The server side of a simulation (`badgebench sim run|fleet`, the sim benchmarks): a badgebench
// server started in this process on a temporary data directory, or (for `hil run`) one already
// running at a URL whose data directory this machine can open; `sim run|fleet --server URL` set
// up through the server's API instead (remote-server.ts). Devices, API keys and releases are made in its
// store exactly as the admin commands make them (releases through publish's checks); the
// simulated badges themselves reach the server over HTTP only.
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { buildAppImage, type Manifest, type ReleaseEntry } from "../../firmware/index.ts";
import type { ServerOptions } from "../../server/main.ts";
import { publishRelease } from "../../server/releases/publishing.ts";
import { readSigningKey } from "../../server/releases/signing-keys.ts";
import { openReleaseStores } from "../../server/releases/open-release-store.ts";
import { FileReleaseStore, targetFor } from "../../server/releases/release-store.ts";
import { createApiKey } from "../../server/services/api-keys.ts";
import { createDevice, createDevices, revokeDevice } from "../../server/services/devices.ts";
import { importSchool } from "../../server/services/school-import.ts";
import { openStore, type Store } from "../../server/store/database.ts";
import { EXIT } from "../cli/exit-codes.ts";
import { findDevice } from "../../server/store/devices-store.ts";

/** The room simulated badges hang in, and the school around it, in test mode. */
export const SIM_ROOM = "SIM";
/** Card UIDs of the simulated school's students; all are enrolled in the session open now. */
export const SIM_CARDS = Array.from({ length: 8 }, (_, i) => `04C0FFEE0${i}`);
const HOUR_MS = 3600_000;

/** A simulation that cannot be set up as asked: a message for the user, not a stack trace, and the exit code (scripts/cli/exit-codes.ts). */
export class SimSetupError extends Error {
  override name = "SimSetupError";
  constructor(
    message: string,
    readonly exitCode: number = EXIT.usage,
  ) {
    super(message);
  }
}

export interface SimRelease {
  version: string;
  size: number;
  crashOnBoot?: boolean;
  notes?: string[];
  display?: string;
  canary?: string;
  /** the private key file publish signs with (unsigned without one) */
  signingKeyFile?: string;
  /** raw Ed25519 public keys the release's image trusts */
  trustedKeys?: Uint8Array[];
}

export interface SimServer {
  url: string;
  dataDir: string;
  /** true when this process started the server on a temporary data directory it owns */
  inProcess: boolean;
  /** a key with `devices:read`, for the fleet view (`GET /v1/devices/{id}`) */
  apiKey: string;
  /**
   * The server's store, as this process opened it: one connection for everything the process
   * writes there. (better-sqlite3 waits for a lock by blocking the thread, so a second
   * connection of the same process waiting on the first's transaction stops the thread that
   * would end it: "database is locked" after the busy timeout.)
   */
  store: Store;
  addDevice(name: string): Promise<{ id: string; token: string }>;
  /** one device per name, inserted in bulk (a fleet benchmark's tens of thousands in seconds) */
  addDevices(names: string[]): Promise<Array<{ id: string; token: string }>>;
  revokeDevice(id: string): Promise<void>;
  publish(release: SimRelease): Promise<ReleaseEntry>;
  /** the test-mode manifest, the one simulated badges are offered from */
  manifest(): Promise<Manifest>;
  /** the release the server offers this device (from its own mode's releases), or null */
  targetFor(deviceId: string): Promise<ReleaseEntry | null>;
  /** every version published in this device's mode, oldest first */
  publishedFor(deviceId: string): Promise<string[]>;
  /** the bytes of the image of a release offered to this device */
  imageOf(deviceId: string, entry: ReleaseEntry): Promise<Uint8Array>;
  close(): Promise<void>;
}

/** A simulation's server in this process: its store, and its staged rollouts evaluated on demand. */
export interface InProcessSimServer extends SimServer {
  /** what the server's rollout timer runs (RunningServer.evaluateRollouts) */
  evaluateRollouts(): Promise<void>;
}

/** A server in this process on a fresh temporary data directory, removed again by close(). `rollouts`: its rollout clock and timer; `downloads`: its download cap. */
export async function startSimServer(options: Pick<ServerOptions, "rollouts" | "downloads"> = {}): Promise<InProcessSimServer> {
  // The server's modules (express, pino and the rest) load here, not with this file: `hil run`
  // only connects to a server (connectSimServer), and loading them was about a third of its
  // start, which the reference rig pays once per group of scenarios.
  const [{ startServer }, { pino }] = await Promise.all([import("../../server/main.ts"), import("pino")]);
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "badgebench-sim-"));
  try {
    const server = await startServer({ dataDir, port: 0, host: "127.0.0.1", sync: "normal", logger: pino({ level: "silent" }), rollouts: options.rollouts, downloads: options.downloads });
    await importSchool(server.store.db, simSchool(new Date()), { mode: "test" });
    const sim = await simServerOver(server.url, dataDir, server.store, true, async () => {
      await server.close();
      fs.rmSync(dataDir, { recursive: true, force: true });
    });
    return { ...sim, evaluateRollouts: () => server.evaluateRollouts() };
  } catch (error) {
    fs.rmSync(dataDir, { recursive: true, force: true });
    throw error;
  }
}

/**
 * A server already running at `url` on this machine, whose data directory is `dataDir` (or whose
 * store is the PostgreSQL database at `databaseUrl`, as for bench-sim-fleet's instances). Its
 * store is opened beside it (SQLite queues the writers); the room SIM is added when missing.
 */
export async function connectSimServer(url: string, dataDir: string, databaseUrl?: string): Promise<SimServer> {
  if (!fs.existsSync(dataDir)) throw new SimSetupError(`no data directory ${dataDir}: give --data the directory the server at ${url} runs on`);
  // The server made its store; a directory without one is not that server's (exit 2, nothing created).
  const store = await openStore({ dataDir, create: false, databaseUrl });
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
  // A server of this process has a temporary data directory, removed at close: its releases
  // need no fsync (as its SQLite runs with sync normal). Another server's directory keeps them.
  const stores = inProcess ? { 1: new FileReleaseStore(dataDir, 1, { durable: false }), 0: new FileReleaseStore(dataDir, 0, { durable: false }) } : openReleaseStores(db, dataDir);
  // Simulated badges are test-mode badges, so their releases are the test releases; a rig's
  // real badge may be of either mode, so what it is offered is read from its own mode's.
  const releases = stores[0];
  const releasesOf = async (deviceId: string) => stores[(await findDevice(db, deviceId))?.livemode ?? 0];
  const imageDir = fs.mkdtempSync(path.join(os.tmpdir(), "badgebench-sim-images-"));
  // The simulator's images never contain a password; publish still insists one is configured.
  const devWifiPassword = crypto.randomBytes(12).toString("hex");
  const apiKey = (await createApiKey(db, { mode: "test", scopes: ["devices:read"], name: "badgebench sim" })).secret;
  return {
    url,
    dataDir,
    inProcess,
    apiKey,
    store,
    async addDevice(name) {
      const { id, token } = await createDevice(db, { mode: "test", room: SIM_ROOM, model: "virtual-badge", name });
      return { id, token };
    },
    async addDevices(names) {
      const devices = await createDevices(db, { mode: "test", room: SIM_ROOM, model: "virtual-badge", names });
      return devices.map(({ id, token }) => ({ id, token }));
    },
    async revokeDevice(id) {
      await revokeDevice(db, id);
    },
    async publish(release) {
      const imagePath = path.join(imageDir, `${release.version}.bin`);
      fs.writeFileSync(imagePath, buildAppImage({ version: release.version, size: release.size, crashOnBoot: release.crashOnBoot, trustedKeys: release.trustedKeys }));
      return publishRelease(db, releases, {
        signingKey: release.signingKeyFile === undefined ? undefined : readSigningKey(release.signingKeyFile),
        imagePath,
        version: release.version,
        notes: release.notes ?? [],
        display: release.display,
        canary: release.canary,
        devWifiPassword,
      });
    },
    manifest: () => releases.read(),
    targetFor: async (deviceId) => targetFor(await (await releasesOf(deviceId)).read(), deviceId) ?? null,
    publishedFor: async (deviceId) => (await (await releasesOf(deviceId)).read()).releases.map((entry) => entry.version),
    imageOf: async (deviceId, entry) => (await releasesOf(deviceId)).imageBytes(entry),
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
