// `badgebench sim fleet --badges N`: a fleet of virtual badges checking in against one server,
// some of their wearers asking for the update, and a table of how each badge ended and of the
// server's latencies as the badges saw them (badge-sim/runners/fleet.ts); --html FILE draws them.
//
// Without --server: a server in this process on a temporary data directory, with releases
// 1.4.0 (what the badges run) and 1.5.0 (what they are offered) of --image-size bytes. With
// --server URL and a test-mode API key (scripts/harness/remote-server.ts): the badges run the
// release before the server's fleet release (0.0.0 when there is none) and get whatever the
// server offers; nothing is published there, only test-mode devices added through the API, and
// revoked again at the end. Exit codes: scripts/cli/exit-codes.ts.
import fs from "node:fs";
import path from "node:path";
import { OTA_SLOT_BYTES } from "../../firmware/index.ts";
import { fleetReportHtml, type FleetSample } from "../../badge-sim/reports/figures-html.ts";
import { formatFleetSummary, runFleet, type FleetBadge, type FleetProgress } from "../../badge-sim/runners/fleet.ts";
import { connectRemoteServer, inBatches, type RemoteServer } from "../harness/remote-server.ts";
import { SimSetupError, startSimServer, type SimServer } from "../harness/sim-server.ts";
import { EXIT } from "./exit-codes.ts";

export interface SimFleetOptions {
  badges: number;
  /** badges whose wearer asks for the update (default: a tenth) */
  downloading?: number;
  /** a running server's URL, set up through its API with `key` */
  server?: string;
  /** a test-mode API key with devices:write and releases:read */
  key?: string;
  /** the test-mode room on `server` the badges hang in */
  room: string;
  /** wall ms to wait for each answer of `server` */
  timeoutMs?: number;
  /** bytes of the offered image, in-process server only (default 256 KiB) */
  imageSize?: number;
  /** wall ms over which the badges boot (default: 10 ms per badge) */
  spreadMs?: number;
  seed?: number;
  json: boolean;
  /** write the figures as a self-contained HTML picture to this file */
  html?: string;
  /** progress on stderr: an updating line on a terminal, a line every few seconds otherwise */
  progress: boolean;
}

export const DEFAULT_FLEET_IMAGE_BYTES = 256 * 1024;
/** The default spread boots 100 badges a second, which this 2-core machine keeps up with. */
const DEFAULT_SPREAD_MS_PER_BADGE = 10;
const FROM_VERSION = "1.4.0";
const TO_VERSION = "1.5.0";
const DEVICES_PER_BATCH = 500;
const PLAIN_PROGRESS_EVERY_MS = 5_000;

/** Runs the fleet and prints its summary; the exit code is 1 when any badge's simulation crashed, else 0. */
export async function runSimFleet(options: SimFleetOptions): Promise<number> {
  const { badges } = options;
  const downloading = options.downloading ?? Math.round(badges / 10);
  if (!(Number.isInteger(badges) && badges >= 1)) throw new SimSetupError(`--badges must be a whole number of at least 1, got ${badges}`);
  if (!(Number.isInteger(downloading) && downloading >= 0 && downloading <= badges)) {
    throw new SimSetupError(`--downloading must be a whole number from 0 to --badges (${badges}), got ${downloading}`);
  }
  if (options.server !== undefined && options.imageSize !== undefined) {
    throw new SimSetupError("--image-size is for the server in this process; with --server the badges download whatever that server offers");
  }
  const imageSize = options.imageSize ?? DEFAULT_FLEET_IMAGE_BYTES;
  if (!(Number.isInteger(imageSize) && imageSize >= 4096 && imageSize <= OTA_SLOT_BYTES)) {
    throw new SimSetupError(`--image-size must be whole bytes from 4096 to ${OTA_SLOT_BYTES} (the OTA slot), got ${imageSize}`);
  }
  const spreadMs = options.spreadMs ?? badges * DEFAULT_SPREAD_MS_PER_BADGE;
  if (!(spreadMs >= 0)) throw new SimSetupError(`--spread-ms must be 0 or more, got ${spreadMs}`);

  const server =
    options.server === undefined
      ? await startSimServer()
      : await connectRemoteServer({ url: options.server, key: options.key, room: options.room, timeoutMs: options.timeoutMs });
  try {
    const release = "inProcess" in server ? await publishReleases(server, imageSize) : await releasesOffered(server);
    const tokens = await addDevices(server, badges);
    const samples: FleetSample[] = [];
    const printer = options.progress ? progressPrinter() : undefined;
    const summary = await runFleet({
      serverUrl: server.url,
      badges: tokens.map((token) => dockedBadge(token, release.from)),
      updateShare: downloading / badges,
      spreadMs,
      seed: options.seed,
      onProgress: (progress) => {
        printer?.(progress);
        if (options.html) {
          const { elapsedMs: t, live, downloading: inFlight, finished } = progress;
          // Samples taken while the workers loaded count from before the badges' clocks started.
          if (t < (samples.at(-1)?.t ?? 0)) samples.length = 0;
          samples.push({ t, live, downloading: inFlight, finished, rssMiB: Math.round(process.memoryUsage.rss() / 2 ** 20) });
        }
      },
    });
    if (options.html) {
      const offered = release.to === null ? "nothing offered" : `${release.from} -> ${release.to}`;
      fs.mkdirSync(path.dirname(path.resolve(options.html)), { recursive: true });
      fs.writeFileSync(options.html, fleetReportHtml({ summary, samples, setup: `server ${server.url}, ${offered}`, generatedAt: new Date() }));
    }
    if (options.json) {
      // Per badge is a row each (10,000 of them); the object carries the totals.
      const { results, ...totals } = summary;
      process.stdout.write(`${JSON.stringify({ object: "sim_fleet", server: server.url, release, ...totals })}\n`);
    } else {
      const offered = release.to === null ? "nothing offered" : `${release.from} -> ${release.to}${release.size === null ? "" : ` (${release.size.toLocaleString("en-US")} bytes)`}`;
      process.stdout.write(`${formatFleetSummary(summary)}\nserver ${server.url}, ${offered}\n`);
    }
    return summary.crashed > 0 ? EXIT.failed : EXIT.passed;
  } finally {
    await server.close();
  }
}

export interface Releases {
  /** what the badges run */
  from: string;
  /** what the server offers them, if anything */
  to: string | null;
  size: number | null;
}

/** Publishes 1.4.0, which the badges run, and 1.5.0, which they are offered. */
export async function publishReleases(server: SimServer, size: number): Promise<Releases> {
  await server.publish({ version: FROM_VERSION, size });
  const offered = await server.publish({ version: TO_VERSION, size });
  return { from: FROM_VERSION, to: TO_VERSION, size: offered.size };
}

/** The server's fleet release, and the one published before it for the badges to run. */
async function releasesOffered(server: RemoteServer): Promise<Releases> {
  const { versions, fleet, fleetSize } = await server.releases();
  const at = fleet === null ? -1 : versions.indexOf(fleet);
  if (at === -1) return { from: "0.0.0", to: null, size: null };
  return { from: versions[at - 1] ?? "0.0.0", to: fleet, size: fleetSize };
}

/** A badge on its dock and charging: the radio only works on external power. */
export function dockedBadge(token: string, version: string): FleetBadge {
  return { token, version, battery: { volts: 4.1, charging: true } };
}

/** Adds the devices (in bulk in a store this process opened, else a batch of API calls at a time); their tokens. */
export async function addDevices(server: SimServer | RemoteServer, count: number): Promise<string[]> {
  const names = Array.from({ length: count }, (_, i) => `fleet badge ${i + 1}`);
  const devices = "addDevices" in server ? await server.addDevices(names) : await inBatches(names, DEVICES_PER_BATCH, (name) => server.addDevice(name));
  return devices.map((device) => device.token);
}

/** One updating line on a terminal; otherwise a plain line every few seconds and at the end. */
function progressPrinter(): (progress: FleetProgress) => void {
  const interactive = process.stderr.isTTY === true;
  let printedAt = -Infinity;
  let ended = false;
  return (progress) => {
    const finished = progress.finished === progress.total;
    if (ended) return;
    ended = finished;
    const line =
      `fleet: ${progress.started}/${progress.total} booted, ${progress.finished} at rest, ${progress.live} live, ` +
      `${progress.downloading} downloading, ${(progress.elapsedMs / 1000).toFixed(1)} s`;
    if (interactive) {
      process.stderr.write(`\r\x1b[2K${line}${finished ? "\n" : ""}`);
    } else if (finished || progress.elapsedMs - printedAt >= PLAIN_PROGRESS_EVERY_MS) {
      process.stderr.write(`${line}\n`);
      printedAt = progress.elapsedMs;
    }
  };
}
