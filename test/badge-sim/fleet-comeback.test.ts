// A fleet on a bad link behind a small download cap (issue 23): a fifth of the downloads are cut
// at a random byte and the server lets 3 download at once, so badges are cut and refused with 503.
// Each comes back as the real badge would (after the server's S, or its Retry-After) and resumes
// from its checkpoint: every badge ends on the release, having received little more than one
// image. The same fleet without resume (its link strips Range) receives more.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runFleet, type FleetSummary } from "../../badge-sim/runners/fleet.ts";
import { startSimServer, type InProcessSimServer } from "../../scripts/harness/sim-server.ts";

const BADGES = 50;
const IMAGE_BYTES = 256 * 1024;
const CUT_SHARE = 0.2;

let server: InProcessSimServer;

beforeAll(async () => {
  server = await startSimServer({ downloads: { maxConcurrent: 3, retryAfterS: 2 } });
  await server.publish({ version: "1.4.0", size: IMAGE_BYTES });
  await server.publish({ version: "1.5.0", size: IMAGE_BYTES });
});
afterAll(() => server?.close());

async function fleetOf(resume: boolean, seed: number): Promise<FleetSummary> {
  const devices = await server.addDevices(Array.from({ length: BADGES }, (_, i) => `comeback ${resume ? "resuming" : "restarting"} ${i}`));
  return runFleet({
    serverUrl: server.url,
    badges: devices.map(({ token }) => ({ token, version: "1.4.0", battery: { volts: 4.1, charging: true } })),
    updateShare: 1,
    spreadMs: 300,
    ask: { atMs: 300, spreadMs: 0 },
    seed,
    cutShare: CUT_SHARE,
    resume,
    // The 503's Retry-After of 2 to 2.5 s is waited a tenth of that in wall time.
    busyWallScale: 0.1,
  });
}

describe("a fleet whose downloads are cut and capped", () => {
  let resuming: FleetSummary;
  let restarting: FleetSummary;
  beforeAll(async () => {
    resuming = await fleetOf(true, 11);
    restarting = await fleetOf(false, 11);
  }, 240_000);

  it("ends every badge on the release: the cut ones came back and resumed", () => {
    for (const summary of [resuming, restarting]) {
      expect(summary.crashed).toBe(0);
      expect(summary.gaveUp).toBe(0);
      expect(summary.results.map((result) => [result.outcome, result.version])).toEqual(Array.from({ length: BADGES }, () => ["updated", "1.5.0"]));
      expect(summary.cutDownloads).toBeGreaterThan(0);
      // every cut brings its badge back once at least; refusals over the cap bring more
      expect(summary.comebacks).toBeGreaterThanOrEqual(summary.cutDownloads);
      for (const result of summary.results) expect(result.comebacks).toBeGreaterThanOrEqual(result.cutDownloads);
    }
  });

  // Which downloads are cut, and where, is drawn in the order the downloads start, which the
  // machine's load decides (the same seed gave 8 to 12 cuts, 1.019 to 1.029 images per badge): so
  // the bound asserted is the one every cut keeps, not a figure of the fleet (bench-sim-fleet's).
  it("resumes: a cut costs at most the 64 KiB after the badge's last checkpoint, less than when every cut starts over", () => {
    expect(resuming.receivedBytes).toBeGreaterThanOrEqual(BADGES * IMAGE_BYTES);
    // a cut that starts over loses what it had received; one that resumes, at most its last 64 KiB
    const lostPerCut = (summary: FleetSummary) => (summary.receivedBytes - BADGES * IMAGE_BYTES) / summary.cutDownloads;
    expect(lostPerCut(resuming)).toBeLessThanOrEqual(64 * 1024);
    expect(lostPerCut(restarting)).toBeGreaterThan(lostPerCut(resuming));
  });
});
