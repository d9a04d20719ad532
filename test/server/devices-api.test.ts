// POST /v1/devices and POST /v1/devices/{id}/revoke: a badge added and withdrawn through the API
// (what `sim run|fleet --server URL` set up with), in the key's mode, behind devices:write; the add
// with an Idempotency-Key, like every write, its replay withholding the token.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiKey } from "../../server/services/api-keys.ts";
import { createDevices } from "../../server/services/devices.ts";
import { startHarness, type Harness } from "./harness.ts";

let h: Harness;
const keys = { testWrite: "", liveWrite: "", read: "" };
beforeAll(async () => {
  h = await startHarness();
  const db = h.server.store.db;
  keys.testWrite = (await createApiKey(db, { mode: "test", scopes: ["devices:write"] })).secret;
  keys.liveWrite = (await createApiKey(db, { mode: "live", scopes: ["devices:write"] })).secret;
  keys.read = (await createApiKey(db, { mode: "test", scopes: ["devices:read"] })).secret;
});
afterAll(() => h.close());

describe("POST /v1/devices", () => {
  it("adds a badge in the key's mode, its token shown once, and the token opens the badge endpoints", async () => {
    const res = await h.request("POST", "/v1/devices", { key: keys.testWrite, body: { room: "R1", model: "virtual-badge", name: "bench badge" } });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ object: "device", livemode: false, room: "R1", model: "virtual-badge", name: "bench badge", revoked_at: null });
    expect(res.body.token).toMatch(/^dtk_test_/);
    const check = await fetch(`${h.url}/api/badge/ota/check`, { method: "POST", headers: { authorization: `Bearer ${res.body.token}` }, body: "v=1\nsv=1.4.0\nbat=4.05\n" });
    expect(check.status).toBe(200);
    await check.arrayBuffer();
    const seen = await h.request("GET", `/v1/devices/${res.body.id}`, { key: keys.testWrite });
    expect(seen.status).toBe(200);
    expect(seen.body.token).toBeUndefined();
    const live = await h.request("GET", `/v1/devices/${res.body.id}`, { key: keys.liveWrite });
    expect(live.status).toBe(404);
  });

  it("adds one badge for a retried request: the replay names it, its token withheld; another body under the key is 422", async () => {
    const before = (await h.request("GET", "/v1/devices", { key: keys.read })).body.total_count;
    const body = { room: "R1", model: "virtual-badge", name: "retried badge" };
    const first = await h.request("POST", "/v1/devices", { key: keys.testWrite, body, idempotencyKey: "add retried badge" });
    const retry = await h.request("POST", "/v1/devices", { key: keys.testWrite, body, idempotencyKey: "add retried badge" });
    expect(first.status).toBe(201);
    expect(first.body.token).toMatch(/^dtk_test_/);
    expect(retry.status).toBe(201);
    expect(retry.headers.get("idempotent-replayed")).toBe("true");
    expect(retry.headers.get("idempotent-withheld")).toBe("token");
    expect(retry.body).toEqual({ ...first.body, token: null });
    expect((await h.request("GET", "/v1/devices", { key: keys.read })).body.total_count).toBe(before + 1);
    const other = await h.request("POST", "/v1/devices", { key: keys.testWrite, body: { ...body, name: "another" }, idempotencyKey: "add retried badge" });
    expect(other.status).toBe(422);
    expect(other.body.error.code).toBe("idempotency_key_reused");
    const missing = await h.request("POST", "/v1/devices", { key: keys.testWrite, body, idempotencyKey: null });
    expect(missing.status).toBe(400);
    expect(missing.body.error.code).toBe("idempotency_key_missing");
    expect((await h.request("GET", "/v1/devices", { key: keys.read })).body.total_count).toBe(before + 1);
  });

  it("refuses an unknown room, bad fields and a key without devices:write, adding nothing", async () => {
    const before = (await h.request("GET", "/v1/devices", { key: keys.read })).body.total_count;
    const unknownRoom = await h.request("POST", "/v1/devices", { key: keys.testWrite, body: { room: "NOPE", model: "m" } });
    expect(unknownRoom.status).toBe(400);
    expect(unknownRoom.body.error).toMatchObject({ code: "room_unknown", param: "room" });
    const badName = await h.request("POST", "/v1/devices", { key: keys.testWrite, body: { room: "R1", model: "m", name: "a\u0007b" } });
    expect(badName.status).toBe(400);
    expect(badName.body.error.param).toBe("name");
    const extra = await h.request("POST", "/v1/devices", { key: keys.testWrite, body: { room: "R1", model: "m", livemode: true } });
    expect(extra.status).toBe(400);
    const readOnly = await h.request("POST", "/v1/devices", { key: keys.read, body: { room: "R1", model: "m" } });
    expect(readOnly.status).toBe(403);
    expect((await h.request("GET", "/v1/devices", { key: keys.read })).body.total_count).toBe(before);
  });
});

describe("POST /v1/devices/{id}/revoke", () => {
  it("revokes a badge of the key's mode, so its token is refused; another mode's badge is 404", async () => {
    const added = (await h.request("POST", "/v1/devices", { key: keys.testWrite, body: { room: "R1", model: "m" } })).body;
    const otherMode = await h.request("POST", `/v1/devices/${added.id}/revoke`, { key: keys.liveWrite, idempotencyKey: null });
    expect(otherMode.status).toBe(404);
    const revoked = await h.request("POST", `/v1/devices/${added.id}/revoke`, { key: keys.testWrite, idempotencyKey: null });
    expect(revoked.status).toBe(200);
    expect(revoked.body.revoked_at).not.toBeNull();
    const check = await fetch(`${h.url}/api/badge/ota/check`, { method: "POST", headers: { authorization: `Bearer ${added.token}` }, body: "v=1\nsv=1.4.0\nbat=4.05\n" });
    expect(check.status).toBe(401);
    await check.arrayBuffer();
    const again = await h.request("POST", `/v1/devices/${added.id}/revoke`, { key: keys.testWrite, idempotencyKey: null });
    expect(again.status).toBe(200);
    expect(again.body.revoked_at).toBe(revoked.body.revoked_at);
  });
});

describe("createDevices (the bulk add a simulated district uses)", () => {
  const count = async () => Number((await h.server.store.db.selectFrom("devices").select((eb) => eb.fn.countAll().as("n")).executeTakeFirstOrThrow()).n);
  const names = (n: number, tag: string) => Array.from({ length: n }, (_, i) => `${tag} ${i}`);

  it("adds more devices than one statement holds, each with a token that opens the badge endpoints", async () => {
    const before = await count();
    const added = await createDevices(h.server.store.db, { mode: "test", room: "R1", model: "bulk", names: names(1001, "bulk") });
    expect(await count()).toBe(before + 1001);
    expect(new Set(added.map((device) => device.token)).size).toBe(1001);
    const check = await fetch(`${h.url}/api/badge/ota/check`, { method: "POST", headers: { authorization: `Bearer ${added[1000]!.token}` }, body: "v=1\nsv=1.4.0\nbat=4.05\n" });
    expect(check.status).toBe(200);
    await check.arrayBuffer();
  });

  it("inside a caller's transaction adds all or none with it", async () => {
    const before = await count();
    const rolledBack = h.server.store.db.transaction().execute(async (trx) => {
      await createDevices(trx, { mode: "test", room: "R1", model: "bulk", names: names(1001, "undone") });
      throw new Error("the caller's transaction fails after the add");
    });
    await expect(rolledBack).rejects.toThrow("the caller's transaction fails after the add");
    expect(await count()).toBe(before);
  });
});
