// The OpenAPI document: served at GET /v1/openapi.json behind the bearer key, written by
// `badgebench openapi`, accepted by an OpenAPI 3.1 validator, and able to catch an answer it
// does not describe (openapi-check.ts, which the harness runs on every /v1 answer).
import fs from "node:fs";
import path from "node:path";
import { Validator } from "@seriousme/openapi-schema-validator";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { run, tempDirs } from "./cli-process.ts";
import { mark, startHarness, type Harness } from "./harness.ts";
import { checkAgainstOpenApi, OpenApiMismatch } from "./openapi-check.ts";

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(() => h.close());
const tempDir = tempDirs("openapi");

describe("the OpenAPI document", () => {
  it("is served at GET /v1/openapi.json to any valid key, and to nobody without one", async () => {
    const res = await h.request("GET", "/v1/openapi.json", { key: h.keys.read });
    expect(res.status).toBe(200);
    expect(res.body.openapi).toMatch(/^3\.1\./);
    const anonymous = await fetch(`${h.url}/v1/openapi.json`);
    expect(anonymous.status).toBe(401);
    expect((await anonymous.json()).error.type).toBe("authentication_error");
  });

  it("validates as OpenAPI 3.1, with every operation secured by its scope and every event type under webhooks", async () => {
    const document = (await h.request("GET", "/v1/openapi.json", { key: h.keys.read })).body;
    const result = await new Validator().validate(document);
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
    expect(document.paths["/v1/attendance"].post.security).toEqual([{ bearerAuth: ["attendance:write"] }]);
    expect(document.paths["/v1/attendance"].get.parameters.map((p: { name: string }) => p.name)).toEqual(
      expect.arrayContaining(["from", "to", "status", "limit", "cursor"]),
    );
    expect(Object.keys(document.webhooks).sort()).toEqual(["attendance.recorded", "attendance.updated", "badge.ota_reported", "release.rollout_advanced", "release.rollout_completed", "release.rollout_halted"]);
    const operationIds = Object.values(document.paths).flatMap((item: any) => Object.values(item).map((operation: any) => operation.operationId));
    expect(new Set(operationIds).size).toBe(operationIds.length);
  });

  it("is what `badgebench openapi --out FILE` writes", async () => {
    const file = path.join(tempDir("out"), "openapi.json");
    const result = await run(["openapi", "--out", file]);
    expect(result.code).toBe(0);
    expect(JSON.parse(fs.readFileSync(file, "utf8"))).toEqual((await h.request("GET", "/v1/openapi.json", { key: h.keys.read })).body);
  });

  it("`badgebench openapi --out` into a folder that does not exist says so in one line and exits 2", async () => {
    const result = await run(["openapi", "--out", path.join(tempDir("missing"), "no/such/dir/openapi.json")]);
    expect(result.code).toBe(2);
    expect(result.stderr.trim().split("\n")).toHaveLength(1);
    expect(result.stderr).toMatch(/cannot write --out .*no\/such\/dir/);
  });
});

describe("the harness's check of answers against the document", () => {
  it("fails a planted mismatch: a field retyped, a field missing, a field not in the document, a status not listed, an undescribed route", async () => {
    const record = await mark(h, h.sessions.math1, "S1", "present");
    const real = (await h.request("GET", `/v1/attendance/${record.id}`)).body;
    expect(() => checkAgainstOpenApi("GET", `/v1/attendance/${record.id}`, 200, real)).not.toThrow();
    const { reason: _dropped, ...missing } = real;
    for (const planted of [{ ...real, status: "teleported" }, missing, { ...real, secret_field: 1 }]) {
      expect(() => checkAgainstOpenApi("GET", `/v1/attendance/${record.id}`, 200, planted)).toThrow(OpenApiMismatch);
    }
    expect(() => checkAgainstOpenApi("GET", `/v1/attendance/${record.id}`, 201, real)).toThrow(/lists no such status/);
    expect(() => checkAgainstOpenApi("GET", "/v1/grades", 200, { object: "list", data: [] })).toThrow(/no such operation/);
    expect(() => checkAgainstOpenApi("GET", "/v1/attendance", 400, { error: "bad" })).toThrow(OpenApiMismatch);
  });

  it("accepts every error in the one shape, for routes the document names and for those it does not", async () => {
    const unknown = await h.request("GET", "/v1/grades");
    expect(unknown.status).toBe(404);
    const refused = await h.request("GET", "/v1/attendance?limit=0");
    expect(refused.status).toBe(400);
  });
});
