// The servers a bench-sim-fleet setup runs its fleets against: one in this process, or
// instances spawned as `npm start` runs them (on SQLite, or on one fresh PostgreSQL database),
// each timing its own requests and saying, when asked, the image downloads it served.
import type { ChildProcess } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { connectSimServer, startSimServer, type SimServer } from "../harness/sim-server.ts";
import { MiB, procMemory, spawnBadgebench, stopServer } from "./bench-common.ts";
import { createDatabase } from "./bench-databases.ts";
import { downloadsFileOf, timeServerRequests, TIMINGS_FILE_ENV, type ServedDownloads, type ServerSamples } from "./server-request-timing.ts";

const TIMING_PRELOAD = fileURLToPath(new URL("./server-request-timing-preload.ts", import.meta.url));

/** The servers one fleet runs against, and what they measured of themselves. */
export interface Servers {
  sim: SimServer;
  urls: string[];
  /** peak RSS of each spawned instance, MiB, read before they stop (empty in this process) */
  peakRssMiB(): number[];
  /** per instance, the image downloads it served since the last call (or its start) */
  takeDownloads(): Promise<ServedDownloads[]>;
  /** stops the servers and hands back their own time per request */
  stop(): Promise<ServerSamples>;
}

/** A server in this process, timed through node:http's diagnostics channels here. */
export async function inProcessServers(): Promise<Servers> {
  const sim = await startSimServer();
  const timing = timeServerRequests();
  return {
    sim,
    urls: [sim.url],
    peakRssMiB: () => [],
    takeDownloads: async () => [timing.takeDownloads()],
    async stop() {
      const samples = timing.stop();
      await sim.close();
      return samples;
    },
  };
}

/**
 * `instances` servers spawned as `npm start` runs them, on SQLite in `dir` or on one fresh
 * PostgreSQL database, each timing its own requests (server-request-timing-preload.ts); the
 * simulation's devices and releases are made in the store from this process.
 */
export async function spawnedServers(setup: { store: "sqlite" | "postgres"; instances: number }, dir: string, postgres: string, maxDownloads: number | undefined): Promise<Servers> {
  fs.mkdirSync(dir, { recursive: true });
  const databaseUrl = setup.store === "postgres" ? await createDatabase(postgres, `badgebench_bench_fleet_${crypto.randomBytes(4).toString("hex")}`) : undefined;
  const timingFiles = Array.from({ length: setup.instances }, (_, i) => path.join(dir, `timings-${i}.json`));
  const children: Array<{ child: ChildProcess; url: string }> = [];
  // One after the other: the first creates the store (on PostgreSQL the others would wait on its migration lock anyway).
  for (const file of timingFiles) {
    children.push(
      await spawnBadgebench(dir, "full", {
        databaseUrl,
        nodeArgs: ["--import", "tsx", "--import", TIMING_PRELOAD],
        env: { [TIMINGS_FILE_ENV]: file, ...(maxDownloads === undefined ? {} : { BADGEBENCH_MAX_DOWNLOADS: String(maxDownloads) }) },
      }),
    );
  }
  const sim = await connectSimServer(children[0]!.url, dir, databaseUrl);
  return {
    sim,
    urls: children.map((child) => child.url),
    peakRssMiB: () => children.map(({ child }) => Math.round((procMemory(child.pid!)?.hwm ?? Number.NaN) / MiB)),
    // Each instance writes what it served when signalled (server-request-timing-preload.ts).
    takeDownloads: () =>
      Promise.all(
        children.map(async ({ child }, i) => {
          const file = downloadsFileOf(timingFiles[i]!);
          fs.rmSync(file, { force: true });
          child.kill("SIGUSR2");
          for (let waited = 0; !fs.existsSync(file); waited += 20) {
            if (waited > 10_000) throw new Error(`instance ${i} did not say what it served within 10 s`);
            await sleep(20);
          }
          return JSON.parse(fs.readFileSync(file, "utf8")) as ServedDownloads;
        }),
      ),
    async stop() {
      await sim.close();
      await Promise.all(children.map(({ child }) => stopServer(child)));
      const samples: ServerSamples = { check: [], sync: [] };
      for (const file of timingFiles) {
        const instance = JSON.parse(fs.readFileSync(file, "utf8")) as ServerSamples;
        samples.check.push(...instance.check);
        samples.sync.push(...instance.sync);
      }
      return samples;
    },
  };
}
