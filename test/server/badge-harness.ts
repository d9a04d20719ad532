// A running server with what the badge tests need: a school whose sessions are placed around
// the current time (so card taps can fall in them), device tokens, API keys, and a way to
// publish real generated images. Badge requests are sent as the badge sends them.
import type { KeyObject } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { pino } from "pino";
import { buildAppImage, parseResponse, type BuildImageOptions, type ResponseLine } from "../../firmware/index.ts";
import type { AuthFailureBudget } from "../../server/http/auth-failures.ts";
import { startServer, type RunningServer, type ServerOptions } from "../../server/main.ts";
import { publishRelease } from "../../server/releases/publishing.ts";
import { openReleaseStores } from "../../server/releases/open-release-store.ts";
import type { ReleaseStore, ReleaseStoreKind, ReleaseStores } from "../../server/releases/release-store.ts";
import { createApiKey } from "../../server/services/api-keys.ts";
import type { DownloadLimits } from "../../server/services/load-shaping.ts";
import { createDevice } from "../../server/services/devices.ts";
import { importSchool } from "../../server/services/school-import.ts";
import type { Livemode } from "../../server/store/schema.ts";
import type { WebhookConfig } from "../../server/webhooks/webhook-config.ts";
import { checkAgainstOpenApi } from "./openapi-check.ts";
import { IN_PROCESS_KEEP_ALIVE } from "./harness.ts";
import { createTestDatabase } from "./test-database.ts";

export const DEV_WIFI_PASSWORD = "correct-horse-dev-wifi";
const MINUTE = 60_000;

export interface BadgeAnswer {
  status: number;
  text: string;
  headers: Headers;
  /** the lines between `V1` and `.`; undefined when the body is not a complete answer */
  lines: ResponseLine[] | undefined;
  /** the value of the first line with this letter */
  get(letter: string): string | undefined;
  all(letter: string): string[];
}

export interface BadgeHarness {
  url: string;
  dataDir: string;
  /** the PostgreSQL database's URL in the postgres project, for admin commands run beside the server */
  databaseUrl: string | undefined;
  server: RunningServer;
  /** the test-mode releases, the ones the harness's (test-mode) badges are offered */
  releases: ReleaseStore;
  /** both modes' releases, for the tests that keep them apart */
  releaseStores: ReleaseStores;
  /** session start times: `now` is inside the open MATH session, which started 30 minutes ago */
  sessions: { mathOpen: string; mathStartsAt: Date; artScheduled: string; artStartsAt: Date };
  keys: { write: string; admin: string; read: string; sessions: string };
  devices: Record<"r1" | "r1b" | "r2", { id: string; token: string }>;
  /** card UIDs of the students S1..S6 (S1-S5 take MATH, S5-S6 take ART) */
  cards: string[];
  /** publishes a test-mode release unless `livemode: 1` */
  publish(version: string, options?: Partial<BuildImageOptions> & { notes?: string[]; canary?: string; livemode?: Livemode; signingKey?: KeyObject }): Promise<Uint8Array>;
  badge(method: "POST" | "GET", urlPath: string, token: string | null, body?: string, headers?: Record<string, string>): Promise<BadgeAnswer>;
  check(token: string, body: string): Promise<BadgeAnswer>;
  sync(token: string, body: string): Promise<BadgeAnswer>;
  api(urlPath: string, key?: string): Promise<{ status: number; body: any }>;
  count(table: "records" | "events" | "record_history" | "device_taps" | "ota_reports" | "ota_fetches"): Promise<number>;
  close(): Promise<void>;
}

/** `releases`: where the server keeps releases (by default as files, SQLite's default). */
export async function startBadgeHarness(
  options: { releases?: ReleaseStoreKind; webhooks?: Partial<WebhookConfig>; authFailures?: Partial<AuthFailureBudget>; rollouts?: ServerOptions["rollouts"]; downloads?: Partial<DownloadLimits> } = {},
): Promise<BadgeHarness> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "badgebench-badge-"));
  const database = await createTestDatabase();
  const server = await startServer({
    dataDir,
    databaseUrl: database?.url,
    port: 0,
    host: "127.0.0.1",
    sync: "normal",
    logger: pino({ level: "silent" }),
    releases: options.releases,
    // The suite's receivers listen on loopback.
    webhooks: { localTestTargets: true, ...options.webhooks },
    authFailures: options.authFailures,
    rollouts: options.rollouts,
    downloads: options.downloads,
    connections: IN_PROCESS_KEEP_ALIVE,
  });
  const db = server.store.db;
  const { mathStartsAt, artStartsAt, cards } = await importHarnessSchool(db);
  const sessionRows = await db.selectFrom("sessions").select(["id", "course_code"]).orderBy("starts_at").execute();
  const sessionOf = (course: string) => sessionRows.find((s) => s.course_code === course)!.id;
  const key = async (scopes: string[]) => (await createApiKey(db, { mode: "test", scopes, user: "Ms Rivera" })).secret;
  const device = async (room: string) => {
    const { id, token } = await createDevice(db, { mode: "test", room, model: "badge-v2" });
    return { id, token };
  };
  const releaseStores = openReleaseStores(db, dataDir, options.releases);
  const releases = releaseStores[0];
  const imageDir = fs.mkdtempSync(path.join(os.tmpdir(), "badgebench-images-"));

  const badge: BadgeHarness["badge"] = async (method, urlPath, token, body, headers = {}) => {
    const response = await fetch(`${server.url}${urlPath}`, {
      method,
      headers: { ...(token === null ? {} : { authorization: `Bearer ${token}` }), "content-type": "text/plain", ...headers },
      body,
    });
    const text = await response.text();
    // A check is answered before its record commits (services/ota-offer.ts); the tests read the
    // rows after a request, so it returns once the record is written.
    await server.checksRecorded();
    const parsed = parseResponse(text);
    const lines = parsed.ok ? parsed.lines : undefined;
    return {
      status: response.status,
      text,
      headers: response.headers,
      lines,
      get: (letter) => lines?.find((l) => l.letter === letter)?.value,
      all: (letter) => (lines ?? []).filter((l) => l.letter === letter).map((l) => l.value),
    };
  };

  return {
    url: server.url,
    dataDir,
    databaseUrl: database?.url,
    server,
    releases,
    releaseStores,
    sessions: { mathOpen: sessionOf("MATH"), mathStartsAt, artScheduled: sessionOf("ART"), artStartsAt },
    keys: {
      write: await key(["attendance:write"]),
      admin: await key(["devices:read"]),
      read: await key(["attendance:read"]),
      sessions: await key(["sessions:write"]),
    },
    devices: { r1: await device("R1"), r1b: await device("R1"), r2: await device("R2") },
    cards,
    async publish(version, { livemode = 0, ...options } = {}) {
      const image = buildAppImage({ version, size: 64 * 1024, ...options });
      const file = path.join(imageDir, `${version}.bin`);
      fs.writeFileSync(file, image);
      await publishRelease(db, releaseStores[livemode], {
        imagePath: file,
        version,
        notes: options.notes ?? [],
        canary: options.canary,
        signingKey: options.signingKey,
        devWifiPassword: DEV_WIFI_PASSWORD,
      });
      return image;
    },
    badge,
    check: (token, body) => badge("POST", "/api/badge/ota/check", token, body),
    sync: (token, body) => badge("POST", "/api/badge/sync", token, body),
    api: (urlPath, apiKey) => apiGet(server.url, urlPath, apiKey),
    async count(table) {
      const row = await db.selectFrom(table).select((eb) => eb.fn.countAll().as("n")).executeTakeFirstOrThrow();
      return Number(row.n);
    },
    async close() {
      await server.close();
      await database?.drop();
      fs.rmSync(dataDir, { recursive: true, force: true });
      fs.rmSync(imageDir, { recursive: true, force: true });
    },
  };
}

/** The harness's school: two rooms, six students with cards, MATH open now and ART scheduled. */
async function importHarnessSchool(db: RunningServer["store"]["db"]) {
  const now = Date.now();
  const mathStartsAt = new Date(now - 30 * MINUTE);
  const artStartsAt = new Date(now - 10 * MINUTE);
  const cards = Array.from({ length: 6 }, (_, i) => `04A1B2C3D${i}`);
  await importSchool(
    db,
    {
      rooms: [
        { code: "R1", name: "Room 1" },
        { code: "R2", name: "Room 2" },
      ],
      students: cards.map((card_uid, i) => ({ external_id: `S${i + 1}`, name: `Student ${i + 1}`, card_uid })),
      courses: [
        { code: "MATH", name: "Mathematics" },
        { code: "ART", name: "Art" },
      ],
      enrollments: [
        { course_code: "MATH", external_ids: ["S1", "S2", "S3", "S4", "S5"] },
        { course_code: "ART", external_ids: ["S5", "S6"] },
      ],
      sessions: [
        { course_code: "MATH", room: "R1", starts_at: mathStartsAt.toISOString(), ends_at: new Date(now + 30 * MINUTE).toISOString(), status: "open" },
        { course_code: "ART", room: "R2", starts_at: artStartsAt.toISOString(), ends_at: new Date(now + 50 * MINUTE).toISOString() },
      ],
    },
    { mode: "test" },
  );
  return { mathStartsAt, artStartsAt, cards };
}

/** A GET on /v1 with an API key, its answer held to the OpenAPI document. */
async function apiGet(baseUrl: string, urlPath: string, apiKey: string | undefined): Promise<{ status: number; body: any }> {
  const response = await fetch(`${baseUrl}${urlPath}`, { headers: { authorization: `Bearer ${apiKey}` } });
  const body = await response.json();
  checkAgainstOpenApi("GET", urlPath, response.status, body);
  return { status: response.status, body };
}

/** A badge request body from key=value pairs (the common keys first). */
export function lines(...pairs: string[]): string {
  return `${pairs.join("\n")}\n`;
}
