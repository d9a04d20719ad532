// The fault sweep as a property (issue 4 item 8): whatever the fault (none, a brownout during
// the download or the switch, a dropped, corrupted, stalled or refused download, a release that
// crashes on boot), wherever it strikes, whatever the battery and the charger say, the badge
// runs an image whose MD5 matched (or bricks on one that crashes), never writes its running slot,
// the server ends up with the report the case calls for, and no report is lost.
// fast-check prints the seed and the counterexample of a failure; FC_SEED=<seed> replays a run.
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  DEFAULT_SWEEP_IMAGE_BYTES,
  DEFAULT_SWEEP_STALL_TIMEOUT_MS,
  describeCase,
  invariantViolations,
  runSweepCase,
  type SweepCase,
  type SweepFault,
  type SweepRelease,
  type SweepResult,
} from "../../badge-sim/runners/fault-sweep.ts";
import { md5Hex } from "../../firmware/index.ts";
import { sweepCase } from "../../badge-sim/runners/sweep-cases.ts";
import { startBadgeHarness, type BadgeHarness } from "../server/badge-harness.ts";
import { newDevice } from "./sim-harness.ts";

const SIZE = DEFAULT_SWEEP_IMAGE_BYTES;
const NUM_RUNS = 60;

let h: BadgeHarness;
let fleet: SweepRelease;
let crashReleases = 0;
beforeAll(async () => {
  h = await startBadgeHarness();
  const image = await h.publish("1.5.0", { size: SIZE });
  fleet = { version: "1.5.0", size: image.length, md5: md5Hex(image), crashOnBoot: false };
});
afterAll(() => h.close());

/** One case on a fresh device; a crash-on-boot case gets its own crashing release as that device's canary. */
async function play(c: SweepCase): Promise<SweepResult> {
  const device = await newDevice(h);
  let release = fleet;
  if (c.fault.kind === "crash-on-boot") {
    const version = `1.6.${crashReleases++}`;
    const image = await h.publish(version, { size: SIZE, crashOnBoot: true, canary: device.id });
    release = { version, size: image.length, md5: md5Hex(image), crashOnBoot: true };
  }
  return runSweepCase(c, { serverUrl: h.url, token: device.token, deviceId: device.id, apiKey: h.keys.admin, release, stallTimeoutMs: DEFAULT_SWEEP_STALL_TIMEOUT_MS });
}

const charging = (fault: SweepFault, volts = 4.1): SweepCase => ({ fault, volts, charging: true, externalPower: true });
const usbNotCharging = (fault: SweepFault, volts: number): SweepCase => ({ fault, volts, charging: false, externalPower: true });

it(
  `keeps every invariant over ${NUM_RUNS} generated cases (fault kind x byte offset x battery x charging)`,
  async () => {
    const seed = process.env.FC_SEED === undefined ? undefined : Number(process.env.FC_SEED);
    await fc.assert(
      fc.asyncProperty(sweepCase(SIZE), async (c) => {
        const result = await play(c);
        expect(result.violations, `${describeCase(c)} (expected: ${result.expected.path})`).toEqual([]);
      }),
      // shrinking replays real cases; a time limit keeps a failure's report inside the test timeout
      { numRuns: NUM_RUNS, seed, interruptAfterTimeLimit: 200_000 },
    );
  },
  240_000,
);

describe("examples", () => {
  it.each([
    { name: "no fault, charging", c: charging({ kind: "none" }), report: "ok|1.5.0", runs: "1.5.0" },
    { name: "no fault, 3.30 V but charging", c: charging({ kind: "none" }, 3.3), report: "ok|1.5.0", runs: "1.5.0" },
    // two request bursts (boot sync, check) take 1 mV before the gate reads the cell
    { name: "USB, not charging, 3.852 V: passes the gate", c: usbNotCharging({ kind: "none" }, 3.852), report: "ok|1.5.0", runs: "1.5.0" },
    { name: "USB, not charging, 3.850 V: 3.849 V at the gate", c: usbNotCharging({ kind: "none" }, 3.85), report: null, runs: "1.4.0" },
    { name: "battery only: no radio", c: { fault: { kind: "none" }, volts: 4.2, charging: false, externalPower: false } as SweepCase, report: null, runs: "1.4.0" },
    {
      name: "brownout past the first checkpoint",
      c: usbNotCharging({ kind: "brownout-download", atByte: 100_000 }, 4.0),
      report: "err|1.5.0|power lost during download after 50% (64 of 128 KiB)",
      runs: "1.4.0",
    },
    { name: "brownout at the very first byte", c: charging({ kind: "brownout-download", atByte: 0 }), report: "err|1.5.0|power lost during download after 0% (0 of 128 KiB)", runs: "1.4.0" },
    { name: "brownout after the otadata erase", c: charging({ kind: "brownout-switch", step: "after-erase" }), report: "err|1.5.0|power lost during the partition switch", runs: "1.4.0" },
    { name: "brownout mid otadata write", c: charging({ kind: "brownout-switch", step: "mid-write" }), report: "err|1.5.0|power lost during the partition switch", runs: "1.4.0" },
    { name: "brownout before the restart", c: charging({ kind: "brownout-switch", step: "before-restart" }), report: "ok|1.5.0", runs: "1.5.0" },
    { name: "drop before the last byte", c: charging({ kind: "drop", atByte: SIZE - 1 }), report: "err|1.5.0|download cut at 99% (127 of 128 KiB)", runs: "1.4.0" },
    { name: "stall at the first byte", c: charging({ kind: "stall", atByte: 0 }), report: "err|1.5.0|download stalled at 0% (0 of 128 KiB): no data for 200 ms", runs: "1.4.0" },
    { name: "502 on the download", c: charging({ kind: "http-5xx", status: 502 }), report: "err|1.5.0|download refused: HTTP 502 server_error injected by the fault proxy", runs: "1.4.0" },
  ])("$name", async ({ c, report, runs }) => {
    const result = await play(c);
    expect(result.violations).toEqual([]);
    expect(result.observed.serverReport).toBe(report);
    expect(result.observed.runningVersion).toBe(runs);
  });

  it("one corrupted byte: MD5 mismatch, the old firmware runs", async () => {
    const result = await play(charging({ kind: "corrupt", atByte: 70_000 }));
    expect(result.violations).toEqual([]);
    expect(result.observed.serverReport).toMatch(new RegExp(`^err\\|1\\.5\\.0\\|MD5 mismatch: the image gives [0-9a-f]{32}, the offer said ${fleet.md5}$`));
  });

  it("a crash-on-boot release bricks the badge: no report ever reaches the server, and the model expects none", async () => {
    const result = await play(charging({ kind: "crash-on-boot" }));
    expect(result.violations).toEqual([]);
    expect(result.expected).toMatchObject({ report: null, bricked: true });
    expect(result.observed).toMatchObject({ state: "bricked", runningImage: "offered", serverReport: null, pendingReport: null, reportsStored: [] });
  });
});

it("the checker fails on outcomes that break the invariants", async () => {
  const result = await play(charging({ kind: "drop", atByte: 40_000 }));
  expect(result.violations).toEqual([]);
  const { observed } = result;
  const judge = (tampered: Partial<typeof observed>) => invariantViolations({ ...result, observed: { ...observed, ...tampered } });

  // a report that does not match what happened
  expect(judge({ serverReport: "ok|1.5.0" })).toEqual(
    expect.arrayContaining([expect.stringMatching(/^report: the server holds "ok\|1\.5\.0"; the case \(connection dropped\) expects "err\|1\.5\.0\|download cut at 30% \(39 of 128 KiB\)"$/)]),
  );
  // the running slot written during the download
  expect(judge({ downloads: observed.downloads.map((d) => ({ ...d, writesToRunningSlot: 1 })) })).toEqual([
    expect.stringMatching(/^running slot written: 1 erase\/write\(s\) to ota_0, the running slot, during the download/),
  ]);
  // a stored report neither delivered nor pending
  expect(judge({ reportsCleared: [] })).toEqual(expect.arrayContaining([expect.stringMatching(/^report lost: "err\|1\.5\.0\|download cut at 30%/)]));
  // an image whose MD5 matched nothing
  expect(judge({ runningImage: "other" })).toEqual([expect.stringMatching(/^running image: ota_0 holds neither the factory image nor the offered one/)]);
  // a boot of the release from bytes that are not the release's (issue 23)
  expect(judge({ releaseBoots: [{ t: 1, slot: "ota_1", md5: "00".repeat(16) }] })).toEqual([
    expect.stringMatching(/^booted a corrupt release: ota_1 booted as 1\.5\.0 at 1 ms, but its bytes give 0{32}, not [0-9a-f]{32}$/),
  ]);
});
