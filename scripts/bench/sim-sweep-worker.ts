// One worker thread of the fault sweep benchmark (bench-sim-sweep.ts): its own in-process server
// (scripts/harness/sim-server.ts) on its own data directory, the fleet's release published there,
// then the cases the parent hands it, one at a time (`play`: the next as soon as it answers the
// last, so a thread slowed by the machine's other work plays fewer), each on a fresh device and a
// fresh virtual badge (badge-sim/runners/fault-sweep.ts), exactly as the sweep plays them in one
// thread; on `end` it closes its server and says "done". A crash-on-boot case publishes the
// crashing release the whole sweep numbers for it, so a case plays the same whichever thread has it.
import { parentPort, workerData } from "node:worker_threads";
import { performance } from "node:perf_hooks";
import { runSweepCase, type SweepCase, type SweepRelease, type SweepResult } from "../../badge-sim/runners/fault-sweep.ts";
import { startSimServer } from "../harness/sim-server.ts";

/** One case as the sweep numbered it: its place, and for a crash-on-boot case the version of its own crashing release. */
export interface NumberedCase {
  index: number;
  case: SweepCase;
  crashVersion: string | null;
}

export interface SweepShard {
  imageBytes: number;
  stallTimeoutMs: number;
  fleetVersion: string;
}

export type SweepWorkerMessage =
  | { type: "ready"; fleetRelease: SweepRelease }
  | { type: "case"; index: number; result: SweepResult; wallMs: number }
  | { type: "done" };

/** What the parent tells a thread: play this case, or close (no cases left). */
export type SweepParentMessage = { type: "play"; case: NumberedCase } | { type: "end" };

const shard = workerData as SweepShard;
const port = parentPort!;
const sim = await startSimServer();
const fleet = await sim.publish({ version: shard.fleetVersion, size: shard.imageBytes });
const fleetRelease: SweepRelease = { version: fleet.version, size: fleet.size, md5: fleet.md5, crashOnBoot: false };
/** One case, the device and the crashing release made inside its time, as in one thread. */
async function play({ index, case: c, crashVersion }: NumberedCase): Promise<void> {
  const caseStart = performance.now();
  const device = await sim.addDevice(`sweep-${index + 1}`);
  let release = fleetRelease;
  if (crashVersion !== null) {
    const entry = await sim.publish({ version: crashVersion, size: shard.imageBytes, crashOnBoot: true, canary: device.id });
    release = { version: entry.version, size: entry.size, md5: entry.md5, crashOnBoot: true };
  }
  const result = await runSweepCase(c, { serverUrl: sim.url, token: device.token, deviceId: device.id, apiKey: sim.apiKey, release, stallTimeoutMs: shard.stallTimeoutMs });
  port.postMessage({ type: "case", index, result, wallMs: performance.now() - caseStart } satisfies SweepWorkerMessage);
}

port.on("message", async (message: SweepParentMessage) => {
  if (message.type === "play") {
    try {
      return await play(message.case);
    } catch (error) {
      // the thread ends with the error (the parent hears it): its server's data directory goes first
      await sim.close();
      throw error;
    }
  }
  await sim.close();
  // after the close, so that the parent waits for the server's data directory to go
  port.postMessage({ type: "done" } satisfies SweepWorkerMessage);
  port.close();
});
port.postMessage({ type: "ready", fleetRelease } satisfies SweepWorkerMessage);
