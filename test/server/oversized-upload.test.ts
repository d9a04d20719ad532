// Refuse early (issue 28, row 4): a body over its route's limit is refused before it is uploaded,
// and a request without a valid key has no body read at all. The client sends 100 MB as fast as
// the connection takes it (raw-upload.ts); the server must have closed the connection before
// 1 MB of it went out. A chunked body declares no length: it is cut once past the route's limit,
// so by then the route's limit more went out. The client keeps sending after the answer, as an
// attacker would: the server's kernel then resets the connection, and a reset that arrives
// before the client read the answer discards it (it happened on a loaded machine), so the flood
// checks the bytes and the close, and a request that sends its head alone checks the 413.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MAX_REQUEST_BYTES } from "../../firmware/index.ts";
import { MAX_BODY_BYTES } from "../../server/app.ts";
import { MCP_MAX_BODY_BYTES } from "../../server/mcp/mcp-routes.ts";
import { createApiKey } from "../../server/services/api-keys.ts";
import { createDevice } from "../../server/services/devices.ts";
import { startHarness, type Harness } from "./harness.ts";
import { sendRaw } from "./fuzz-http.ts";
import { upload } from "./raw-upload.ts";

const HUNDRED_MB = 100 * 1024 * 1024;
const ONE_MB = 1024 * 1024;

let h: Harness;
let credentials: { webhooks: string; pipelines: string; device: string };

beforeAll(async () => {
  h = await startHarness();
  const db = h.server.store.db;
  credentials = {
    webhooks: (await createApiKey(db, { mode: "test", scopes: ["webhooks:write"] })).secret,
    pipelines: (await createApiKey(db, { mode: "test", scopes: ["pipelines:write"] })).secret,
    device: (await createDevice(db, { mode: "test", room: "R1", model: "badge-v2" })).token,
  };
});
afterAll(() => h.close());

const json = (key: string) => [`Authorization: Bearer ${key}`, "Content-Type: application/json", "Idempotency-Key: oversized-upload"];

const routes = () => [
  { path: "/v1/attendance", limit: MAX_BODY_BYTES, headers: json(h.keys.write) },
  { path: "/v1/webhook_endpoints", limit: MAX_BODY_BYTES, headers: json(credentials.webhooks) },
  { path: "/api/badge/sync", limit: MAX_REQUEST_BYTES, headers: [`Authorization: Bearer ${credentials.device}`, "Content-Type: text/plain"] },
  {
    path: "/api/mcp",
    limit: MCP_MAX_BODY_BYTES,
    headers: [`Authorization: Bearer ${credentials.pipelines}`, "Content-Type: application/json", "Accept: application/json"],
  },
];

describe.each([
  { framing: "a declared Content-Length", chunked: false },
  { framing: "a chunked body", chunked: true },
])("a 100 MB upload with a valid credential and $framing", ({ chunked }) => {
  it.each(["/v1/attendance", "/v1/webhook_endpoints", "/api/badge/sync", "/api/mcp"])("to %s is refused with 413 before 1 MB of it (past the limit) is sent", async (path) => {
    const route = routes().find((r) => r.path === path)!;
    const result = await upload(h.url, { path, headers: route.headers, bytes: HUNDRED_MB, chunked });
    expect([413, undefined]).toContain(result.status);
    expect(result.closedByServer).toBe(true);
    expect(result.sent).toBeLessThan(ONE_MB + (chunked ? route.limit : 0));
  });
});

it.each(["/v1/attendance", "/v1/webhook_endpoints", "/api/badge/sync", "/api/mcp"])("a declared 100 MB body to %s is answered 413 before a byte of it is sent", async (path) => {
  const route = routes().find((r) => r.path === path)!;
  const answer = await sendRaw(h.url, {
    method: "POST",
    path,
    headers: [...route.headers.map((line) => line.split(": ") as [string, string]), ["Content-Length", String(HUNDRED_MB)]],
    body: undefined,
  });
  expect(answer.status).toBe(413);
  expect(answer.headers.connection).toBe("close");
});

describe("a request without a valid credential", () => {
  it.each([
    { path: "/v1/attendance", headers: ["Content-Type: application/json"], status: 401 },
    { path: "/v1/attendance", headers: json("sk_test_not-a-key"), status: 401 },
    { path: "/api/badge/sync", headers: ["Authorization: Bearer dtk_test_not-a-token"], status: 401 },
    { path: "/api/mcp", headers: ["Content-Type: application/json", "Accept: application/json"], status: 401 },
  ])("to $path ($headers) has none of its body read: $status and the connection closed", async ({ path, headers, status }) => {
    // Within every route's limit: only the missing credential stops it.
    const result = await upload(h.url, { path, headers, bytes: HUNDRED_MB, chunked: true });
    expect([status, undefined]).toContain(result.status);
    expect(result.closedByServer).toBe(true);
    expect(result.sent).toBeLessThan(ONE_MB);
  });
});
