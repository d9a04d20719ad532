// A fleet with a badge in every firmware state, two rooms, two models and a canary release
// waiting for its report, made the way badges make it (checks, downloads and syncs over HTTP);
// only the no_report badge's fetch is moved an hour back in the store. Shared by the API tests
// and the browser tests of the fleet page.
import { NO_REPORT_AFTER_MS, createDevice } from "../../server/services/devices.ts";
import { createApiKey } from "../../server/services/api-keys.ts";
import { lines, type BadgeHarness } from "./badge-harness.ts";

/** A name no page may run: the fleet page must show it as text. */
export const HTML_NAME = "<img src=x onerror=window.pwned=1>";

export interface SeededFleet {
  /** device ids by the state each is in */
  ids: Record<"current" | "outdated" | "unreleased" | "updating" | "failed" | "no_report" | "unknown" | "canary", string>;
  canaryToken: string;
  /** devices:read + releases:write */
  adminKey: string;
  /** devices:read + releases:read: sees everything, promotes nothing */
  viewerKey: string;
}

export async function seedFleet(h: BadgeHarness): Promise<SeededFleet> {
  const db = h.server.store.db;
  const device = (room: string, model: string, name: string) => createDevice(db, { mode: "test", room, model, name });
  const check = (token: string, sv: string) => h.check(token, lines("v=1", `sv=${sv}`, "bat=4.05", "chg=1"));
  const download = async (token: string, version: string) => {
    const res = await fetch(`${h.url}/api/badge/ota/download?v=${version}`, { headers: { authorization: `Bearer ${token}` } });
    if (res.status !== 200) throw new Error(`download ${version}: HTTP ${res.status}`);
    await res.arrayBuffer();
  };
  const fetchEnded = async (deviceId: string) => {
    for (let i = 0; i < 100; i++) {
      const row = await db.selectFrom("ota_fetches").select("outcome").where("device_id", "=", deviceId).executeTakeFirst();
      if (row && row.outcome !== "sending") return;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    throw new Error(`the fetch of ${deviceId} did not end`);
  };

  const current = await device("R1", "badge-v2", "Front desk");
  const outdated = await device("R1", "badge-v2", "Library corner");
  const unreleased = await device("R2", "badge-v2", "Lab bench (USB build)");
  const updating = await device("R2", "badge-v1", "Gym door");
  const failed = await device("R1", "badge-v1", "Music room");
  const noReport = await device("R2", "badge-v1", "Staff room");
  const unknown = await device("R2", "badge-v1", HTML_NAME);
  const canary = await device("R1", "badge-v2", "Canary, desk 3");

  await h.publish("1.3.0");
  await h.publish("1.4.0", { notes: ["Faster card reads"] });
  await h.publish("1.5.0", { notes: ["New menu"], canary: canary.id });

  await check(current.token, "1.4.0");
  await check(outdated.token, "1.3.0");
  await check(unreleased.token, "1.4.9");
  await check(canary.token, "1.4.0");
  await check(updating.token, "1.3.0");
  await download(updating.token, "1.4.0");
  await fetchEnded(updating.id);
  await check(failed.token, "1.3.0");
  await h.sync(failed.token, lines("v=1", "sv=1.3.0", "bat=3.71", "ota=err|1.4.0|download cut at 51% (33 of 64 KiB)"));
  await check(noReport.token, "1.3.0");
  await download(noReport.token, "1.4.0");
  await fetchEnded(noReport.id);
  const past = new Date(Date.now() - NO_REPORT_AFTER_MS - 60_000).toISOString();
  await db.updateTable("ota_fetches").set({ started_at: past, ended_at: past }).where("device_id", "=", noReport.id).execute();

  const key = async (scopes: string[]) => (await createApiKey(db, { mode: "test", scopes, name: scopes.join(" ") })).secret;
  return {
    ids: {
      current: current.id,
      outdated: outdated.id,
      unreleased: unreleased.id,
      updating: updating.id,
      failed: failed.id,
      no_report: noReport.id,
      unknown: unknown.id,
      canary: canary.id,
    },
    canaryToken: canary.token,
    adminKey: await key(["devices:read", "releases:write"]),
    viewerKey: await key(["devices:read", "releases:read"]),
  };
}

/** The canary's sync after it installed 1.5.0: what allows the promotion. */
export async function canaryReportsOk(h: BadgeHarness, fleet: SeededFleet): Promise<void> {
  const answer = await h.sync(fleet.canaryToken, lines("v=1", "sv=1.5.0", "bat=4.01", "ota=ok|1.5.0"));
  if (answer.get("O") !== "ok|1.5.0") throw new Error(`the canary's report was not stored: ${answer.text}`);
}
