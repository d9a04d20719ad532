import { setTimeout } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CHANGE_CHECK_INTERVAL_MS } from "../../server/store/change-feed.ts";
import { createApiKey, revokeApiKey } from "../../server/services/api-keys.ts";
import { openStore } from "../../server/store/database.ts";
import { run } from "./cli-process.ts";
import { mark, startHarness, type Harness } from "./harness.ts";

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(() => h.close());

describe("bearer authentication", () => {
  it("answers 401 with WWW-Authenticate when no token is sent, even with a cookie", async () => {
    for (const route of ["/v1/attendance", "/v1/sessions", "/v1/unknown-route"]) {
      const res = await h.request("GET", route, { key: "", headers: { cookie: "session=abc" } });
      expect(res.status).toBe(401);
      expect(res.headers.get("www-authenticate")).toMatch(/^Bearer/);
      expect(res.body.error).toMatchObject({ type: "authentication_error", code: "api_key_missing" });
    }
  });

  it("answers 401 for a malformed header, an unknown key and a key with a wrong secret", async () => {
    const wrongSecret = `${h.keys.read.slice(0, -4)}AAAA`;
    for (const header of ["Basic abc", "Bearer", `Bearer ${wrongSecret}`, "Bearer sk_test_unknownunknownunknown", "Bearer nonsense"]) {
      const res = await fetch(`${h.url}/v1/attendance`, { headers: { authorization: header } });
      expect(res.status).toBe(401);
      expect((await res.json()).error.type).toBe("authentication_error");
    }
  });

  it("answers 401 for a revoked key from the next request on", async () => {
    const key = await createApiKey(h.server.store.db, { mode: "test", scopes: ["attendance:read"] });
    expect((await h.request("GET", "/v1/sessions", { key: key.secret })).status).toBe(200);
    await revokeApiKey(h.server.store.db, key.id);
    const res = await h.request("GET", "/v1/sessions", { key: key.secret });
    expect(res.status).toBe(401);
    expect(res.body.error.code).toBe("api_key_invalid");
  });

  it("answers 401 for a key revoked by another process from the next request on (PostgreSQL: within the change check interval)", async () => {
    const key = await createApiKey(h.server.store.db, { mode: "test", scopes: ["attendance:read"] });
    expect((await h.request("GET", "/v1/sessions", { key: key.secret })).status).toBe(200);
    expect((await h.request("GET", "/v1/sessions", { key: key.secret })).status).toBe(200);
    if (h.storeOptions.databaseUrl === undefined) {
      // What `badgebench keys revoke` does in its own process, on a connection of its own (written
      // as plain SQL: this process's count of its own key writes must not be what notices it).
      const other = await openStore({ ...h.storeOptions, sync: "normal" });
      try {
        const revoked = await other.db.updateTable("api_keys").set({ revoked_at: new Date().toISOString() }).where("id", "=", key.id).executeTakeFirst();
        expect(revoked.numUpdatedRows).toBe(1n);
      } finally {
        await other.close();
      }
    } else {
      // On PostgreSQL the server keeps the key until another process's revocation reaches it: by
      // its notification, or at the latest when the server next checks the change version row,
      // CHANGE_CHECK_INTERVAL_MS after its last check. The real command, in a process of its own.
      const revoked = await run(["keys", "revoke", key.id, "--data", h.storeOptions.dataDir, "--database", h.storeOptions.databaseUrl]);
      expect(revoked.code, revoked.stderr).toBe(0);
      await setTimeout(CHANGE_CHECK_INTERVAL_MS);
    }
    for (const route of ["/v1/sessions", "/v1/attendance"]) {
      const res = await h.request("GET", route, { key: key.secret });
      expect(res.status).toBe(401);
      expect(res.body.error.code).toBe("api_key_invalid");
    }
  });

  it("stores only a hash of the secret", async () => {
    const rows = await h.server.store.db.selectFrom("api_keys").selectAll().execute();
    expect(rows.length).toBeGreaterThanOrEqual(Object.keys(h.keys).length);
    const dump = JSON.stringify(rows);
    for (const secret of Object.values(h.keys)) expect(dump).not.toContain(secret.slice(16));
  });
});

describe("scopes", () => {
  it("answers 403 when the key lacks the route's scope, and writes nothing", async () => {
    const records = await h.count("records");
    const res = await h.request("POST", "/v1/attendance", { key: h.keys.read, body: { session_id: h.sessions.math1, external_id: "S1", status: "present" } });
    expect(res.status).toBe(403);
    expect(res.body.error).toMatchObject({ type: "permission_error", code: "scope_missing" });
    expect(res.body.error.message).toContain("attendance:write");
    expect(await h.count("records")).toBe(records);
    const open = await h.request("POST", `/v1/sessions/${h.sessions.math1}/open`, { key: h.keys.write });
    expect(open.status).toBe(403);
  });

  it("lets attendance:write and sessions:write keys read", async () => {
    expect((await h.request("GET", "/v1/attendance", { key: h.keys.write })).status).toBe(200);
    expect((await h.request("GET", "/v1/sessions", { key: h.keys.sessions })).status).toBe(200);
    expect((await h.request("GET", "/v1/attendance", { key: h.keys.sessions })).status).toBe(200);
  });
});

describe("test and live mode", () => {
  it("never shows one mode's objects to the other mode's keys, and every object carries livemode", async () => {
    const testRecord = await mark(h, h.sessions.math1, "S2");
    expect(testRecord.livemode).toBe(false);
    const liveSessions = await h.request("GET", "/v1/sessions", { key: h.keys.liveWrite });
    expect(liveSessions.body.data.every((s: { livemode: boolean }) => s.livemode)).toBe(true);
    const liveSessionIds = liveSessions.body.data.map((s: { id: string }) => s.id);
    expect(liveSessionIds).not.toContain(h.sessions.math1);
    const liveRecord = await mark(h, liveSessionIds[0], "S2", "late", h.keys.liveWrite);
    expect(liveRecord.livemode).toBe(true);

    expect((await h.request("GET", `/v1/attendance/${liveRecord.id}`, { key: h.keys.read })).status).toBe(404);
    expect((await h.request("GET", `/v1/attendance/${testRecord.id}`, { key: h.keys.liveWrite })).status).toBe(404);
    expect((await h.request("GET", `/v1/sessions/${h.sessions.math1}`, { key: h.keys.liveWrite })).status).toBe(404);
    const testList = await h.request("GET", "/v1/attendance", { key: h.keys.read });
    expect(testList.body.data.map((r: { id: string }) => r.id)).not.toContain(liveRecord.id);
    const liveList = await h.request("GET", "/v1/attendance", { key: h.keys.liveWrite });
    expect(liveList.body.data.map((r: { id: string }) => r.id)).toEqual([liveRecord.id]);
    const crossWrite = await h.request("POST", "/v1/attendance", { key: h.keys.liveWrite, body: { session_id: h.sessions.math1, external_id: "S3", status: "present" } });
    expect(crossWrite.status).toBe(404);
  });
});
