// Starts the real server on port 0 over a fresh data directory (and, when the run tests
// PostgreSQL, a fresh database: test-database.ts) with a small school, and hands tests the keys
// and ids they need. Tests talk HTTP to it like any client.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { pino } from "pino";
import { startServer, type RunningServer, type ServerOptions } from "../../server/main.ts";
import { createApiKey, type Mode } from "../../server/services/api-keys.ts";
import { importSchool, type SchoolFile } from "../../server/services/school-import.ts";
import type { StoreOptions } from "../../server/store/database.ts";
import { createTestDatabase } from "./test-database.ts";
import { checkAgainstOpenApi } from "./openapi-check.ts";

export const TODAY = new Date().toISOString().slice(0, 10);

/** Two courses, one room, six students; sessions today in both modes' data. */
export function smallSchool(): SchoolFile {
  const starts = (hour: number) => `${TODAY}T${String(hour).padStart(2, "0")}:00:00Z`;
  return {
    rooms: [{ code: "R1", name: "Room 1" }],
    students: Array.from({ length: 6 }, (_, i) => ({ external_id: `S${i + 1}`, name: `Student ${i + 1}`, card_uid: `04AABBCC0${i}` })),
    courses: [
      { code: "MATH", name: "Mathematics" },
      { code: "ART", name: "Art" },
    ],
    enrollments: [
      { course_code: "MATH", external_ids: ["S1", "S2", "S3", "S4", "S5"] },
      { course_code: "ART", external_ids: ["S5", "S6"] },
    ],
    sessions: [
      { course_code: "MATH", room: "R1", starts_at: starts(8), ends_at: starts(9) },
      { course_code: "MATH", room: "R1", starts_at: starts(10), ends_at: starts(11) },
      { course_code: "ART", room: "R1", starts_at: starts(12), ends_at: starts(13) },
    ],
  };
}

export interface Harness {
  url: string;
  dataDir: string;
  /** what opens this server's store beside it (openStore) */
  storeOptions: Pick<StoreOptions, "dataDir" | "databaseUrl">;
  server: RunningServer;
  keys: { read: string; write: string; sessions: string; liveWrite: string };
  sessions: { math1: string; math2: string; art: string };
  request(method: string, urlPath: string, options?: { key?: string; body?: unknown; idempotencyKey?: string | null; headers?: Record<string, string> }): Promise<{ status: number; headers: Headers; body: any }>;
  count(table: "records" | "events" | "record_history" | "idempotency_keys"): Promise<number>;
  close(): Promise<void>;
}

async function key(server: RunningServer, mode: Mode, scopes: string[]) {
  return (await createApiKey(server.store.db, { mode, scopes, user: "Ms Rivera" })).secret;
}

export interface HarnessOptions extends Pick<ServerOptions, "webhooks" | "logger" | "postgres" | "connections" | "mcpAllowedOrigins"> {
  /** the URL the server reaches the test database by, e.g. through a proxy the test can cut */
  routeDatabase?: (databaseUrl: string) => string;
}

/**
 * The test's client and the server share one event loop. When a busy machine stalls the worker
 * for the 5 s keep-alive, the server's idle timer fires before it reads a request the client had
 * already written on the kept-alive connection, and the client sees a reset (seen once at load
 * 10 on 2 cores). In-process servers keep an idle connection for a minute instead; servers the
 * tests spawn as processes keep the production limit (server/http/connection-limits.ts).
 */
export const IN_PROCESS_KEEP_ALIVE = { keepAliveTimeoutMs: 60_000 };

export async function startHarness({ routeDatabase = (url) => url, ...options }: HarnessOptions = {}): Promise<Harness> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "badgebench-test-"));
  const database = await createTestDatabase();
  const storeOptions = { dataDir, databaseUrl: database?.url };
  const server = await startServer({
    ...storeOptions,
    databaseUrl: database && routeDatabase(database.url),
    port: 0,
    host: "127.0.0.1",
    sync: "normal",
    logger: pino({ level: "silent" }),
    ...options,
    connections: { ...IN_PROCESS_KEEP_ALIVE, ...options.connections },
    // The suite's receivers listen on loopback.
    webhooks: { localTestTargets: true, ...options.webhooks },
  });
  await importSchool(server.store.db, smallSchool(), { mode: "test" });
  await importSchool(server.store.db, smallSchool(), { mode: "live" });
  const sessionRows = await server.store.db.selectFrom("sessions").select(["id", "course_code", "starts_at"]).where("livemode", "=", 0).orderBy("starts_at").execute();
  const keys = {
    read: await key(server, "test", ["attendance:read"]),
    write: await key(server, "test", ["attendance:write"]),
    sessions: await key(server, "test", ["sessions:write"]),
    liveWrite: await key(server, "live", ["attendance:write"]),
  };
  let counter = 0;
  const harness: Harness = {
    url: server.url,
    dataDir,
    storeOptions,
    server,
    keys,
    sessions: { math1: sessionRows[0]!.id, math2: sessionRows[1]!.id, art: sessionRows[2]!.id },
    async request(method, urlPath, options = {}) {
      const headers: Record<string, string> = { ...options.headers };
      const bearer = options.key ?? keys.write;
      if (bearer) headers.authorization = `Bearer ${bearer}`;
      if (options.body !== undefined) {
        headers["content-type"] ??= "application/json";
      }
      // Writes get a fresh key unless the test names one, or passes null to send none.
      if (method !== "GET" && options.idempotencyKey !== null) {
        headers["idempotency-key"] ??= options.idempotencyKey ?? `test-${process.pid}-${++counter}`;
      }
      const response = await fetch(`${server.url}${urlPath}`, {
        method,
        headers,
        body: options.body === undefined ? undefined : typeof options.body === "string" ? options.body : JSON.stringify(options.body),
      });
      const text = await response.text();
      const body = text ? JSON.parse(text) : undefined;
      if (urlPath.startsWith("/v1") && method !== "HEAD") checkAgainstOpenApi(method, urlPath, response.status, body);
      return { status: response.status, headers: response.headers, body };
    },
    async count(table) {
      const row = await server.store.db.selectFrom(table).select((eb) => eb.fn.countAll().as("n")).executeTakeFirstOrThrow();
      return Number(row.n);
    },
    async close() {
      await server.close();
      await database?.drop();
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
  return harness;
}

/** Creates a record over HTTP and returns its body. */
export async function mark(h: Harness, session: string, externalId: string, status = "present", key = h.keys.write) {
  const res = await h.request("POST", "/v1/attendance", { key, body: { session_id: session, external_id: externalId, status } });
  if (res.status !== 201) throw new Error(`mark failed: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}
