// The demo school `serve --demo` loads into an empty data directory, all in test mode, so that
// the README's quickstarts answer with data on whatever day they are pasted (fixtures/README.md
// lists what it holds): the school of fixtures/demo-school.json with last week's and this week's
// sessions, a key with every scope, release 1.4.0 for the fleet, six badges that have checked in,
// and last week's MATH-Y1 rolls taken by the R101 badge's card taps. The badges' activity goes
// through the running server's own endpoints, as real badges' would.
import { counted } from "../../badge-sim/reports/text.ts";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { buildAppImage } from "../../firmware/index.ts";
import { PACKAGE_ROOT } from "../../server/package-root.ts";
import { openReleaseStores } from "../../server/releases/open-release-store.ts";
import { publishRelease } from "../../server/releases/publishing.ts";
import { createApiKey, SCOPES } from "../../server/services/api-keys.ts";
import { createDevice } from "../../server/services/devices.ts";
import { importSchool, type SchoolFile } from "../../server/services/school-import.ts";
import type { Store } from "../../server/store/database.ts";
import { countStudents } from "../../server/store/school-store.ts";
import { v1Client, type V1Client } from "../../badge-sim/network/v1-client.ts";

// One folder below the project root both in scripts/ and in the bundle in dist/.
const DEMO_SCHOOL = path.join(PACKAGE_ROOT, "fixtures/demo-school.json");
const DAY_MS = 86_400_000;
export const DEMO_FLEET_VERSION = "1.4.0";
const PAST_VERSION = "1.3.2";
/** The course the README's examples use: it meets at 08:30 UTC in R101 every day of the week. */
const DEMO_COURSE = "MATH-Y1";
/** Left unmarked by the seeded taps, so the README's first mark of S10001 creates a record. */
const UNMARKED_STUDENT = "S10001";

interface DemoBadge {
  room: string;
  model: string;
  name: string;
  /** The version the badge reports running (1.3.2: outdated next to the fleet's 1.4.0). */
  version: string;
  volts: number;
  /** The outcome of its last update, as its sync reports it. */
  report?: string;
}

const BADGES: DemoBadge[] = [
  { room: "R101", model: "badge-v2", name: "R101 door", version: DEMO_FLEET_VERSION, volts: 3.98 },
  { room: "R102", model: "badge-v2", name: "R102 door", version: DEMO_FLEET_VERSION, volts: 4.05 },
  { room: "R103", model: "badge-v2", name: "R103 door", version: DEMO_FLEET_VERSION, volts: 3.91 },
  { room: "R104", model: "badge-v1", name: "R104 door", version: PAST_VERSION, volts: 3.87 },
  { room: "R105", model: "badge-v1", name: "R105 door", version: PAST_VERSION, volts: 3.72, report: `err|${DEMO_FLEET_VERSION}|MD5 mismatch after download` },
  { room: "R106", model: "badge-v2", name: "R106 door", version: DEMO_FLEET_VERSION, volts: 4.1 },
];

const isoDay = (ms: number) => new Date(ms).toISOString().slice(0, 10);

/** Releases 1.3.2, then 1.4.0, generated 64 KiB test images, each published to the whole test-mode fleet. */
async function publishDemoReleases(store: Store, dataDir: string): Promise<void> {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), "badgebench-demo-"));
  // The demo's badges are test-mode badges: its releases are test releases.
  const releases = openReleaseStores(store.db, dataDir)[0];
  try {
    for (const version of [PAST_VERSION, DEMO_FLEET_VERSION]) {
      const imagePath = path.join(work, `badge-${version}.bin`);
      fs.writeFileSync(imagePath, buildAppImage({ version }));
      await publishRelease(store.db, releases, {
        imagePath,
        version,
        notes: [`The demo school's ${version === PAST_VERSION ? "previous" : "fleet"} release`],
        // A generated image holds no Wi-Fi password; publish wants one to check for.
        devWifiPassword: "demo-school-wifi",
      });
    }
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
}

/**
 * Loads the demo into an empty data directory and prints its key once; returns what the badges
 * do once the server listens, or undefined when the directory already held a school.
 */
export async function loadDemo(
  store: Store,
  dataDir: string,
  log: (message: string) => void,
): Promise<((url: string) => Promise<void>) | undefined> {
  if ((await countStudents(store.db, 0)) > 0) return undefined;
  const school = JSON.parse(fs.readFileSync(DEMO_SCHOOL, "utf8")) as SchoolFile;
  const cards = new Map((school.students ?? []).map((s) => [s.external_id, s.card_uid ?? ""]));
  await importSchool(store.db, school, { mode: "test", source: DEMO_SCHOOL, week: isoDay(Date.now() - 7 * DAY_MS) });
  const summary = await importSchool(store.db, school, { mode: "test", source: DEMO_SCHOOL });
  const key = await createApiKey(store.db, { mode: "test", scopes: Object.keys(SCOPES), name: "demo" });
  await publishDemoReleases(store, dataDir);
  const badges: (DemoBadge & { token: string })[] = [];
  for (const badge of BADGES) {
    const device = await createDevice(store.db, { mode: "test", room: badge.room, model: badge.model, name: badge.name });
    badges.push({ ...badge, token: device.token });
  }
  log(
    `loaded the demo school into test mode: ${counted(summary.students, "student")}, ${counted(summary.courses, "course")}, ${counted(summary.sessions_added, "session")} this week (and last week's), releases ${PAST_VERSION} and ${DEMO_FLEET_VERSION}, ${counted(badges.length, "badge")}\n` +
      `demo API key (test mode, every scope; shown once): ${key.secret}`,
  );
  return (url) => playBadges(url, key.secret, cards, badges);
}

/** A badge's POST to /api/badge (plain text with its device token, not /v1). */
async function post(url: string, token: string, body: string): Promise<string> {
  const res = await fetch(url, { method: "POST", body, headers: { authorization: `Bearer ${token}`, "content-type": "text/plain" } });
  const text = await res.text();
  if (!res.ok) throw new Error(`demo school: POST ${url} answered ${res.status}: ${text.slice(0, 200)}`);
  return text;
}

/** The answer's body; the demo's own calls fail only on a broken server, which is said in one line. */
function answered<T>(what: string, result: { data?: T; error?: unknown; response: Response }): T {
  if (result.data !== undefined) return result.data;
  throw new Error(`demo school: ${what} answered ${result.response.status}: ${JSON.stringify(result.error).slice(0, 200)}`);
}

/**
 * The MATH-Y1 sessions of the last seven days, opened, and their rolls as the R101 badge's taps:
 * most students 3 minutes before the start, every tenth 8 minutes late, every tenth absent, and
 * one card the school does not know.
 */
async function rollTaps(api: V1Client, cards: Map<string, string>): Promise<{ taps: string[]; opened: string[] }> {
  const taps: string[] = [];
  const opened: string[] = [];
  const now = Date.now();
  for (let daysAgo = 7; daysAgo >= 1; daysAgo--) {
    const date = isoDay(now - daysAgo * DAY_MS);
    const sessions = answered("GET /v1/sessions", await api.GET("/v1/sessions", { params: { query: { date, course_code: DEMO_COURSE } } }));
    for (const session of sessions.data) {
      const sessionId = { id: session.id };
      const roll = answered("GET /v1/sessions/{id}/roll", await api.GET("/v1/sessions/{id}/roll", { params: { path: sessionId } }));
      const idempotency = { "Idempotency-Key": `demo-open-${session.id}` };
      answered("POST /v1/sessions/{id}/open", await api.POST("/v1/sessions/{id}/open", { params: { path: sessionId, header: idempotency } }));
      opened.push(session.id);
      const start = Date.parse(session.starts_at) / 1000;
      roll.roll.forEach(({ external_id }, i) => {
        if (external_id === UNMARKED_STUDENT || i % 10 === 9) return;
        const at = i % 10 === 8 ? start + 8 * 60 : start - 3 * 60 + i;
        taps.push(`${cards.get(external_id)}|${at}`);
      });
      taps.push(`04DE40DE40DE40|${start - 60}`);
    }
  }
  return { taps, opened };
}

/**
 * Each badge checks for an update and syncs; the R101 badge's syncs carry the taps. The sessions
 * close after, except yesterday's, left open so that the README's badge tap has a session to land in.
 */
async function playBadges(url: string, key: string, cards: Map<string, string>, badges: (DemoBadge & { token: string })[]): Promise<void> {
  const api = v1Client(url, key);
  const { taps, opened } = await rollTaps(api, cards);
  for (const badge of badges) {
    const status = `v=1\nsv=${badge.version}\nfw=Badge ${badge.version}\nbat=${badge.volts}\nchg=0\n`;
    await post(`${url}/api/badge/ota/check`, badge.token, status);
    const own = badge.room === "R101" ? taps : [];
    const report = badge.report ? `ota=${badge.report}\n` : "";
    for (let first = 0; first === 0 || first < own.length; first += 100) {
      const lines = own.slice(first, first + 100).map((tap, i) => `tap=${first + i + 1}|${tap}\n`);
      await post(`${url}/api/badge/sync`, badge.token, status + report + lines.join(""));
    }
  }
  for (const id of opened.slice(0, -1)) {
    const params = { path: { id }, header: { "Idempotency-Key": `demo-close-${id}` } };
    answered("POST /v1/sessions/{id}/close", await api.POST("/v1/sessions/{id}/close", { params }));
  }
}
