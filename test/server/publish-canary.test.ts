// Canary first, then the fleet (SPEC 4.10, issue 3 item 4): a canary release is offered to that
// badge only; promotion waits for the canary's ota=ok report received after the publish (another
// badge's, an err or an earlier one do not count), or --force with a reason; after promotion
// every badge is offered and may download the release, as the badge endpoints answer.
import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildAppImage, md5Hex, parseResponse, type ReleaseEntry, type ResponseLine } from "../../firmware/index.ts";
import { promoteRelease, publishRelease } from "../../server/releases/publishing.ts";
import { FileReleaseStore } from "../../server/releases/release-store.ts";
import { createDevice } from "../../server/services/devices.ts";
import { run, tempDirs } from "./cli-process.ts";
import { DEV_WIFI_PASSWORD, writeFile, snapshot, readManifestFile, refusalOf, codesOf, singleJson, type CliRefusal, envWithout, openDataDir } from "./publish-fixture.ts";
import { startHarness, type Harness } from "./harness.ts";

const tempDir = tempDirs("publish-canary");

describe("promotion needs an ok report received after the publish", () => {
  it("an ota=ok|1.5.0 the canary sent before 1.5.0 was published does not count", async () => {
    const { dataDir, store, releases } = await openDataDir(tempDir("early-report"));
    try {
      const canary = await createDevice(store.db, { mode: "test", room: "R1", model: "BB-1" });
      await store.db
        .insertInto("ota_reports")
        .values({ id: "rpt_lab", device_id: canary.id, version: "1.5.0", outcome: "ok", message: null, report: "ok|1.5.0", received_at: new Date(Date.now() - 60_000).toISOString() })
        .execute();
      const src = tempDir("early-report-src");
      await publishRelease(store.db, releases, {
        imagePath: writeFile(src, "1.5.0.bin", buildAppImage({ version: "1.5.0" })),
        version: "1.5.0",
        notes: [],
        canary: canary.id,
        devWifiPassword: DEV_WIFI_PASSWORD,
      });
      const before = snapshot(dataDir);
      expect(codesOf(await refusalOf(promoteRelease(store.db, releases, "1.5.0")))).toEqual(["canary_not_confirmed"]);
      expect(snapshot(dataDir)).toEqual(before);
    } finally {
      await store.close();
    }
  });
});

describe("canary, then fleet", () => {
  let h: Harness;
  let releases: FileReleaseStore;
  let src: string;
  let passwordFile: string;
  let canary: { id: string; token: string };
  let other: { id: string; token: string };
  let canaryEntry: ReleaseEntry;
  let image150: Buffer;

  beforeAll(async () => {
    h = await startHarness();
    releases = new FileReleaseStore(h.dataDir, 0);
    src = tempDir("canary-src");
    passwordFile = path.join(src, "wifi-password.txt");
    fs.writeFileSync(passwordFile, `${DEV_WIFI_PASSWORD}\n`);
    canary = await createDevice(h.server.store.db, { mode: "test", room: "R1", model: "BB-1", name: "canary" });
    other = await createDevice(h.server.store.db, { mode: "test", room: "R1", model: "BB-1", name: "other" });
    await publishRelease(h.server.store.db, releases, {
      imagePath: writeFile(src, "1.4.0.bin", buildAppImage({ version: "1.4.0" })),
      version: "1.4.0",
      notes: [],
      devWifiPassword: DEV_WIFI_PASSWORD,
    });
    image150 = Buffer.from(buildAppImage({ version: "1.5.0", size: 200_000 }));
    writeFile(src, "1.5.0.bin", image150);
  });
  afterAll(async () => {
    await h?.close();
  });

  const db = () => h.server.store.db;

  async function badge(method: "GET" | "POST", urlPath: string, token: string, body?: string) {
    const response = await fetch(`${h.url}${urlPath}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { "content-type": "text/plain" }) },
      body,
    });
    const bytes = Buffer.from(await response.arrayBuffer());
    return { status: response.status, headers: response.headers, bytes, text: bytes.toString("utf8") };
  }

  /** The response's lines after V1 and S, for a text answer. */
  function linesOf(text: string): ResponseLine[] {
    const parsed = parseResponse(text);
    if (!parsed.ok) throw new Error(`not a badge answer (${parsed.message}):\n${text}`);
    expect(parsed.version).toBe(1);
    expect(parsed.lines[0]?.letter).toBe("S");
    return parsed.lines.slice(1);
  }

  const check = (token: string, sv: string) => badge("POST", "/api/badge/ota/check", token, `v=1\nsv=${sv}\nbat=4.0\n`);
  const sync = (token: string, sv: string, ota: string) => badge("POST", "/api/badge/sync", token, `v=1\nsv=${sv}\nbat=4.0\nota=${ota}\n`);

  async function expectSynced(token: string, sv: string, ota: string) {
    const res = await sync(token, sv, ota);
    expect(res.status, res.text).toBe(200);
    expect(linesOf(res.text)).toContainEqual({ letter: "O", value: ota });
  }

  const offerLines = (entry: ReleaseEntry): ResponseLine[] => [
    { letter: "U", value: entry.version },
    { letter: "B", value: entry.display },
    { letter: "Z", value: String(entry.size) },
    { letter: "M", value: entry.md5 },
    { letter: "P", value: `/api/badge/ota/download?v=${entry.version}` },
    ...entry.notes.map((note) => ({ letter: "L", value: note })),
  ];

  it("publish --canary offers the release to that badge only; the fleet stays on 1.4.0", async () => {
    const result = await run(
      ["publish", path.join(src, "1.5.0.bin"), "1.5.0", "Canary build", "--canary", canary.id, "--wifi-password-file", passwordFile, "--mode", "test", "--data", h.dataDir, "--json"],
      { env: envWithout() },
    );
    expect(result.code, result.stderr).toBe(0);
    const { livemode, ...published } = singleJson<ReleaseEntry & { livemode: boolean }>(result);
    expect(livemode).toBe(false);
    canaryEntry = published;
    expect(canaryEntry).toMatchObject({ version: "1.5.0", canary: canary.id, promoted: null, md5: md5Hex(image150) });
    expect(readManifestFile(h.dataDir).fleet).toBe("1.4.0");

    const otherCheck = await check(other.token, "1.4.0");
    expect(otherCheck.status).toBe(200);
    expect(linesOf(otherCheck.text)).toEqual([{ letter: "N", value: "1.4.0" }]);

    const canaryCheck = await check(canary.token, "1.4.0");
    expect(canaryCheck.status).toBe(200);
    expect(linesOf(canaryCheck.text)).toEqual(offerLines(canaryEntry));

    const otherDownload = await badge("GET", "/api/badge/ota/download?v=1.5.0", other.token);
    expect(otherDownload.status).toBe(403);
    expect(linesOf(otherDownload.text)[0]?.value).toMatch(/^not_offered /);

    const canaryDownload = await badge("GET", "/api/badge/ota/download?v=1.5.0", canary.token);
    expect(canaryDownload.status).toBe(200);
    expect(canaryDownload.bytes.equals(image150)).toBe(true);
    expect(md5Hex(canaryDownload.bytes)).toBe(canaryEntry.md5);
  });

  it("release promote is refused until the canary reported ota=ok|1.5.0", async () => {
    const before = snapshot(h.dataDir);
    const result = await run(["release", "promote", "1.5.0", "--mode", "test", "--data", h.dataDir, "--json"], { env: envWithout() });
    expect(result.code).toBe(1);
    const body = singleJson<CliRefusal>(result);
    expect(body.error.code).toBe("refused");
    expect(body.error.reasons?.map((r) => r.code)).toEqual(["canary_not_confirmed"]);
    expect(body.error.message).toContain(`canary ${canary.id} has not reported ota=ok|1.5.0`);
    expect(snapshot(h.dataDir)).toEqual(before);
  });

  it("an ok report from another badge, or an err report from the canary, does not count", async () => {
    const before = snapshot(h.dataDir);
    await expectSynced(other.token, "1.5.0", "ok|1.5.0");
    expect(codesOf(await refusalOf(promoteRelease(db(), releases, "1.5.0")))).toEqual(["canary_not_confirmed"]);
    await expectSynced(canary.token, "1.4.0", "err|1.5.0|download cut at 65536 of 200000 bytes");
    expect(codesOf(await refusalOf(promoteRelease(db(), releases, "1.5.0")))).toEqual(["canary_not_confirmed"]);
    await expectSynced(canary.token, "1.4.0", "ok|1.4.0");
    expect(codesOf(await refusalOf(promoteRelease(db(), releases, "1.5.0")))).toEqual(["canary_not_confirmed"]);
    expect(snapshot(h.dataDir)).toEqual(before);
    expect(readManifestFile(h.dataDir).fleet).toBe("1.4.0");
  });

  it("after the canary's ok report, promote makes 1.5.0 the fleet's release, not forced", async () => {
    await expectSynced(canary.token, "1.5.0", "ok|1.5.0");
    const report = await db()
      .selectFrom("ota_reports")
      .selectAll()
      .where("device_id", "=", canary.id)
      .where("report", "=", "ok|1.5.0")
      .executeTakeFirstOrThrow();

    const result = await run(["release", "promote", "1.5.0", "--mode", "test", "--data", h.dataDir, "--json"], { env: envWithout() });
    expect(result.code, result.stderr + result.stdout).toBe(0);
    const { livemode, ...entry } = singleJson<ReleaseEntry & { livemode: boolean }>(result);
    expect(livemode).toBe(false);
    expect(entry.promoted).toMatchObject({ forced: false, reason: null });
    expect(entry.promoted?.canary_report).toContain(report.id);

    const manifest = readManifestFile(h.dataDir);
    expect(manifest.fleet).toBe("1.5.0");
    const stored = manifest.releases.find((r) => r.version === "1.5.0")!;
    expect(stored).toEqual(entry);
    // Promotion changes who is offered the release, never what it is.
    const { promoted: _promoted, ...unchanged } = stored;
    const { promoted: _before, ...original } = canaryEntry;
    expect(unchanged).toEqual(original);
  });

  it("after promotion every badge is offered 1.5.0 and may download it", async () => {
    const promotedEntry = readManifestFile(h.dataDir).releases.find((r) => r.version === "1.5.0")!;
    for (const device of [other, canary]) {
      const res = await check(device.token, "1.4.0");
      expect(res.status).toBe(200);
      expect(linesOf(res.text)).toEqual(offerLines(promotedEntry));
    }
    const otherDownload = await badge("GET", "/api/badge/ota/download?v=1.5.0", other.token);
    expect(otherDownload.status).toBe(200);
    expect(otherDownload.bytes.equals(image150)).toBe(true);
    // A badge already on 1.5.0 is current.
    const current = await check(canary.token, "1.5.0");
    expect(linesOf(current.text)).toEqual([{ letter: "N", value: "1.5.0" }]);
  });

  it("promoting the fleet release again, an older fleet release or an unknown version is refused", async () => {
    const before = snapshot(h.dataDir);
    for (const version of ["1.5.0", "1.4.0"]) {
      const refusal = await refusalOf(promoteRelease(db(), releases, version, { force: true }));
      expect(codesOf(refusal)).toEqual(["release_already_fleet"]);
      expect(refusal.message).toContain(`${version} is already offered to the fleet`);
    }
    const unknown = await refusalOf(promoteRelease(db(), releases, "9.9.9", { force: true }));
    expect(codesOf(unknown)).toEqual(["release_unknown"]);
    expect(unknown.message).toContain("no published release 9.9.9");
    expect(snapshot(h.dataDir)).toEqual(before);
  });

  it("--force --reason promotes without a report and records both", async () => {
    await publishRelease(db(), releases, {
      imagePath: writeFile(src, "1.6.0.bin", buildAppImage({ version: "1.6.0" })),
      version: "1.6.0",
      notes: [],
      canary: canary.id,
      devWifiPassword: DEV_WIFI_PASSWORD,
    });
    expect(codesOf(await refusalOf(promoteRelease(db(), releases, "1.6.0")))).toEqual(["canary_not_confirmed"]);
    // An override nobody explained is refused, and changes nothing.
    const before = snapshot(h.dataDir);
    const unexplained = await run(["release", "promote", "1.6.0", "--mode", "test", "--force", "--data", h.dataDir, "--json"], { env: envWithout() });
    expect(unexplained.code).toBe(1);
    expect(singleJson<CliRefusal>(unexplained).error.reasons?.map((r) => r.code)).toEqual(["reason_missing"]);
    expect(snapshot(h.dataDir)).toEqual(before);

    const reason = "canary badge lost; verified on the bench";
    const result = await run(["release", "promote", "1.6.0", "--mode", "test", "--force", "--reason", reason, "--data", h.dataDir, "--json"], { env: envWithout() });
    expect(result.code, result.stderr + result.stdout).toBe(0);
    const entry = singleJson<ReleaseEntry>(result);
    expect(entry.promoted).toMatchObject({ forced: true, reason, canary_report: null });
    const manifest = readManifestFile(h.dataDir);
    expect(manifest.fleet).toBe("1.6.0");
    expect(manifest.releases.find((r) => r.version === "1.6.0")?.promoted).toEqual(entry.promoted);
    // The earlier promotion is untouched.
    expect(manifest.releases.find((r) => r.version === "1.5.0")?.promoted?.forced).toBe(false);
  });

  it("a canary release overtaken by a newer fleet release cannot be promoted, even with --force", async () => {
    await publishRelease(db(), releases, {
      imagePath: writeFile(src, "1.7.0.bin", buildAppImage({ version: "1.7.0" })),
      version: "1.7.0",
      notes: [],
      canary: canary.id,
      devWifiPassword: DEV_WIFI_PASSWORD,
    });
    await publishRelease(db(), releases, {
      imagePath: writeFile(src, "1.8.0.bin", buildAppImage({ version: "1.8.0" })),
      version: "1.8.0",
      notes: [],
      devWifiPassword: DEV_WIFI_PASSWORD,
    });
    await expectSynced(canary.token, "1.7.0", "ok|1.7.0");
    const before = snapshot(h.dataDir);
    for (const options of [{}, { force: true, reason: "try anyway" }]) {
      const refusal = await refusalOf(promoteRelease(db(), releases, "1.7.0", options));
      expect(codesOf(refusal)).toEqual(["release_superseded"]);
      expect(refusal.message).toContain("the fleet already runs 1.8.0, which is newer than 1.7.0");
    }
    expect(snapshot(h.dataDir)).toEqual(before);
    expect(readManifestFile(h.dataDir).fleet).toBe("1.8.0");
  });
});
