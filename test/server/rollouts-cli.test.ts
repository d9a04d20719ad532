// `badgebench release rollout ...` as an operator runs it, on a data directory: bad settings are a
// usage error naming the option (exit 2) and create nothing; refusals are one line (exit 1);
// show prints the stage table and the halt.
import path from "node:path";
import fs from "node:fs";
import { beforeAll, describe, expect, it } from "vitest";
import { buildAppImage } from "../../firmware/index.ts";
import { newId } from "../../server/ids.ts";
import { openReleaseStores } from "../../server/releases/open-release-store.ts";
import { publishRelease } from "../../server/releases/publishing.ts";
import { createDevice } from "../../server/services/devices.ts";
import { importSchool } from "../../server/services/school-import.ts";
import { openStore } from "../../server/store/database.ts";
import { insertReport } from "../../server/store/ota-store.ts";
import { run, storeIn, tempDirs } from "./cli-process.ts";
import { DEV_WIFI_PASSWORD } from "./publish-fixture.ts";

const tempDir = tempDirs("rollouts-cli");
let dataDir: string;

/** 1.4.0 for the fleet, 1.5.0 on a canary that reported ok. */
beforeAll(async () => {
  dataDir = await storeIn(tempDir("data"));
  const store = await openStore({ dataDir, create: false });
  try {
    const releases = openReleaseStores(store.db, dataDir)[0];
    const src = tempDir("images");
    await importSchool(store.db, { rooms: [{ code: "R1", name: "Room 1" }] }, { mode: "test" });
    const canary = await createDevice(store.db, { mode: "test", room: "R1", model: "badge-v2", name: "canary" });
    for (const version of ["1.4.0", "1.5.0"]) {
      const imagePath = path.join(src, `${version}.bin`);
      fs.writeFileSync(imagePath, buildAppImage({ version }));
      await publishRelease(store.db, releases, { imagePath, version, notes: [], canary: version === "1.5.0" ? canary.id : undefined, devWifiPassword: DEV_WIFI_PASSWORD });
    }
    await insertReport(store.db, { id: newId("rpt"), device_id: canary.id, version: "1.5.0", outcome: "ok", message: null, report: "ok|1.5.0", received_at: new Date().toISOString() });
  } finally {
    await store.close();
  }
});

const rollout = (...args: string[]) => run(["release", "rollout", ...args, "--data", dataDir]);

describe("badgebench release rollout", () => {
  it.each([
    [["--stages", "5,50,25,100"], "--stages", "strictly increasing"],
    [["--stages", "5,150"], "--stages", "none over 100"],
    [["--stages", "5,50"], "--stages", "must end at 100"],
    [["--halt-failure-share", "2"], "--halt-failure-share", ""],
    [["--report-timeout-seconds", "10"], "--report-timeout-seconds", ""],
  ])("refuses %j as a usage error naming the option, creating nothing", async (options, option, why) => {
    const result = await rollout("create", "1.5.0", ...options);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toContain(option);
    expect(result.stderr).toContain(why);
    expect((await rollout("list")).stdout.trim()).toBe("no test rollouts");
  });

  it("creates a rollout, refuses a second of one version, aborts it and refuses to advance it then", async () => {
    const created = await rollout("create", "1.5.0", "--stages", "10,100", "--json");
    expect(created.code, created.stderr).toBe(0);
    expect(JSON.parse(created.stdout)).toMatchObject({ object: "release_rollout", status: "active", stages: [10, 100], previous_version: "1.4.0" });
    const again = await rollout("create", "1.5.0", "--json");
    expect(again.code).toBe(1);
    expect(JSON.parse(again.stdout).error.code).toBe("rollout_exists");
    const shown = await rollout("show", "1.5.0");
    expect(shown.stdout).toMatch(/^rollout rol_\w+ of 1\.5\.0 \(test, from 1\.4\.0\): active, stage 1 of 2 \(10 %\)/);
    expect(shown.stdout).toMatch(/10 %\s+open/);
    expect((await rollout("abort", "1.5.0")).code).toBe(0);
    const advance = await rollout("advance", "1.5.0");
    expect(advance.code).toBe(1);
    expect(advance.stderr).toContain("it is aborted");
    expect((await rollout("list")).stdout).toMatch(/1\.5\.0\s+aborted/);
    expect((await rollout("show", "9.9.9")).code).toBe(1);
  });
});
