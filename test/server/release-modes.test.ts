// Releases per mode (issue 28, row 1): a test-mode key or badge never reaches the releases live
// badges are offered, and the other way round. Each mode has its own manifest: a key lists and
// promotes its own mode's releases, a badge is offered and downloads its own mode's, and a
// canary's report counts only for releases of its own mode.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import SQLite from "better-sqlite3";
import { Kysely, PostgresDialect, SqliteDialect } from "kysely";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EMPTY_MANIFEST, type Manifest } from "../../firmware/index.ts";
import { DatabaseReleaseStore } from "../../server/releases/database-release-store.ts";
import { PublishRefusal } from "../../server/releases/publishing.ts";
import { RELEASE_STORE_KINDS } from "../../server/releases/release-store.ts";
import { createApiKey } from "../../server/services/api-keys.ts";
import { createDevice } from "../../server/services/devices.ts";
import { importSchool } from "../../server/services/school-import.ts";
import { migrateTo, migrateToLatest } from "../../server/store/migrations.ts";
import type { Database } from "../../server/store/schema.ts";
import { lines, startBadgeHarness, type BadgeHarness } from "./badge-harness.ts";
import { createTestDatabase } from "./test-database.ts";
import { checkAgainstOpenApi } from "./openapi-check.ts";

const checkAt = (version: string) => lines("v=1", `sv=${version}`, "bat=4.05");

describe.each(RELEASE_STORE_KINDS)("releases per mode, with the %s release store", (kind) => {
  let h: BadgeHarness;
  let liveBadge: { id: string; token: string };
  let liveCanary: { id: string; token: string };
  let liveKey: string;
  let testKey: string;

  beforeAll(async () => {
    h = await startBadgeHarness({ releases: kind });
    const db = h.server.store.db;
    await importSchool(db, { rooms: [{ code: "L1", name: "Live room" }] }, { mode: "live" });
    liveBadge = await createDevice(db, { mode: "live", room: "L1", model: "badge-v2" });
    liveCanary = await createDevice(db, { mode: "live", room: "L1", model: "badge-v2", name: "Live canary" });
    const scopes = ["releases:read", "releases:write"];
    liveKey = (await createApiKey(db, { mode: "live", scopes })).secret;
    testKey = (await createApiKey(db, { mode: "test", scopes })).secret;
    await h.publish("1.4.0", { livemode: 1 });
    await h.publish("1.5.0", { livemode: 1, canary: liveCanary.id });
  });
  afterAll(() => h.close());

  let counter = 0;
  async function promote(key: string, version: string, body: unknown) {
    const response = await fetch(`${h.url}/v1/releases/${version}/promote`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "idempotency-key": `modes-${kind}-${++counter}` },
      body: JSON.stringify(body),
    });
    const answer = await response.json();
    checkAgainstOpenApi("POST", `/v1/releases/${version}/promote`, response.status, answer);
    return { status: response.status, body: answer };
  }

  it("a test key cannot promote a live release, even forced, and does not see it", async () => {
    const forced = await promote(testKey, "1.5.0", { force: true, reason: "probe from a test key" });
    expect(forced.status).toBe(404);
    expect(forced.body.error).toMatchObject({ code: "release_unknown", param: "version" });
    expect((await h.releaseStores[1].read()).fleet).toBe("1.4.0");
    expect((await h.check(liveBadge.token, checkAt("1.4.0"))).lines).toEqual([
      { letter: "S", value: expect.any(String) },
      { letter: "N", value: "1.4.0" },
    ]);

    const listed = await h.api("/v1/releases", testKey);
    expect(listed.body).toMatchObject({ object: "list", livemode: false });
    expect(listed.body.data.map((r: { version: string }) => r.version)).not.toContain("1.5.0");
    const live = await h.api("/v1/releases", liveKey);
    expect(live.body).toMatchObject({ object: "list", livemode: true, fleet: "1.4.0" });
    expect(live.body.data.map((r: { version: string; livemode: boolean }) => [r.version, r.livemode])).toEqual([
      ["1.5.0", true],
      ["1.4.0", true],
    ]);
  });

  it("a test badge cannot be a live release's canary, and its ok report does not unlock a live promotion", async () => {
    const testBadge = h.devices.r2;
    const refusal = await h.publish("1.6.0", { livemode: 1, canary: testBadge.id }).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(refusal).toBeInstanceOf(PublishRefusal);
    expect((refusal as PublishRefusal).reasons.map((r) => r.code)).toEqual(["canary_other_mode"]);
    expect((refusal as PublishRefusal).message).toContain(`canary ${testBadge.id} is a test-mode badge; a live release's canary must be a live badge`);

    // A live release naming a test badge as its canary, as one published before modes may.
    await h.publish("1.6.0", { livemode: 1, canary: liveCanary.id });
    await h.releaseStores[1].withLock(h.server.store.db, async (locked) => {
      const manifest = await locked.read();
      await locked.replaceManifest({ ...manifest, releases: manifest.releases.map((r) => (r.version === "1.6.0" ? { ...r, canary: testBadge.id } : r)) });
    });
    const report = await h.sync(testBadge.token, lines("v=1", "sv=1.6.0", "bat=4.01", "ota=ok|1.6.0"));
    expect(report.get("O")).toBe("ok|1.6.0");

    const promoted = await promote(liveKey, "1.6.0", {});
    expect(promoted.status).toBe(409);
    expect(promoted.body.error.code).toBe("canary_not_confirmed");
    expect(promoted.body.error.message).toContain(`has not reported ota=ok|1.6.0 as a live-mode badge`);
    expect((await h.releaseStores[1].read()).fleet).toBe("1.4.0");
    const listed = await h.api("/v1/releases", liveKey);
    expect(listed.body.data.find((r: { version: string }) => r.version === "1.6.0")).toMatchObject({
      canary: { id: testBadge.id, name: null, last_report: null },
      promotion: { allowed: false, refusal: { code: "canary_not_confirmed" } },
    });
  });

  it("a live badge is never offered or served a test release, nor a test badge a live one", async () => {
    await h.publish("2.0.0");
    const testBadge = h.devices.r1;

    const liveOffer = await h.check(liveBadge.token, checkAt("1.0.0"));
    expect(liveOffer.get("U")).toBe("1.4.0");
    expect((await h.check(liveBadge.token, checkAt("1.4.0"))).get("N")).toBe("1.4.0");
    const testOffer = await h.check(testBadge.token, checkAt("1.0.0"));
    expect(testOffer.get("U")).toBe("2.0.0");

    const crossed = await h.badge("GET", "/api/badge/ota/download?v=2.0.0", liveBadge.token);
    expect(crossed.status).toBe(404);
    expect(crossed.get("X")).toBe(`release_unknown no published release "2.0.0"`);
    expect((await h.badge("GET", "/api/badge/ota/download?v=1.4.0", testBadge.token)).status).toBe(404);
    expect((await h.badge("GET", "/api/badge/ota/download?v=1.4.0", liveBadge.token)).status).toBe(200);
  });
});

describe("migration 0009_release_modes", () => {
  it("keeps the one manifest kept before modes as the live one; test badges start with none", async () => {
    const database = await createTestDatabase();
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "badgebench-modes-migration-"));
    const db = new Kysely<Database>({
      dialect: database
        ? new PostgresDialect({ pool: new pg.Pool({ connectionString: database.url, max: 1 }) })
        : new SqliteDialect({ database: new SQLite(path.join(dataDir, "before-modes.sqlite")) }),
    });
    try {
      await migrateTo(db, "0007_endpoint_enabled_at");
      const manifest: Manifest = {
        format: 1,
        fleet: "1.4.0",
        releases: [
          {
            version: "1.4.0",
            display: "1.4.0",
            file: `1.4.0-${"ab".repeat(8)}.bin`,
            size: 65536,
            md5: "0".repeat(32),
            sha256: "ab".repeat(32),
            notes: ["Faster check-in"],
            published_at: "2026-11-01T09:00:00.000Z",
            canary: null,
            promoted: null,
          },
        ],
      };
      await (db as Kysely<any>)
        .insertInto("release_manifest")
        .values({ id: 1, revision: "before-modes", body: JSON.stringify(manifest), updated_at: "2026-11-01T09:00:00.000Z" })
        .execute();
      await migrateToLatest(db);
      expect(await new DatabaseReleaseStore(db, 1).read()).toEqual(manifest);
      expect(await new DatabaseReleaseStore(db, 0).read()).toEqual(EMPTY_MANIFEST);
    } finally {
      await db.destroy();
      await database?.drop();
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
