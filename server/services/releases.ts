// Releases as the fleet page, the API and `badgebench release list` show them: each with its
// role, its canary badge and the canary's last report, and whether promoting it is allowed now
// (checkPromotion, the same rule `release promote` and POST /v1/releases/{version}/promote apply).
// One mode's releases at a time: a key sees its own mode's, the command line names the mode.
import type { Kysely } from "kysely";
import type { Manifest, ReleaseEntry } from "../../firmware/index.ts";
import { checkPromotion, type Refusal } from "../releases/publishing.ts";
import { findDevice } from "../store/devices-store.ts";
import { latestReport } from "../store/ota-store.ts";
import type { Database, Livemode } from "../store/schema.ts";

/** fleet: what the fleet is offered; canary: offered to its one badge until promoted; past: neither any more. */
export type ReleaseRole = "fleet" | "canary" | "past";

export interface ReleaseView {
  object: "release";
  /** true for a live release (offered to live badges), false for a test release */
  livemode: boolean;
  version: string;
  display: string;
  size: number;
  md5: string;
  notes: string[];
  published_at: string;
  role: ReleaseRole;
  /** the badge a canary release went to; its name, room and model are null when it is not a badge of the release's mode (a release published before modes) */
  canary: {
    id: string;
    name: string | null;
    room: string | null;
    model: string | null;
    last_report: { version: string; outcome: "ok" | "err"; message: string | null; received_at: string } | null;
  } | null;
  promoted: ReleaseEntry["promoted"];
  /** for a canary release: whether it may be promoted now, and if not why (a forced promotion overrides `canary_not_confirmed`) */
  promotion: { allowed: boolean; refusal: Refusal | null } | null;
}

function roleOf(manifest: Manifest, entry: ReleaseEntry): ReleaseRole {
  if (entry.version === manifest.fleet) return "fleet";
  const fleetIndex = manifest.releases.findIndex((r) => r.version === manifest.fleet);
  const superseded = fleetIndex > manifest.releases.indexOf(entry);
  return entry.canary !== null && entry.promoted === null && !superseded ? "canary" : "past";
}

async function canaryOf(db: Kysely<Database>, deviceId: string, livemode: Livemode): Promise<ReleaseView["canary"]> {
  const device = await findDevice(db, deviceId, livemode);
  if (!device) return { id: deviceId, name: null, room: null, model: null, last_report: null };
  const report = await latestReport(db, deviceId);
  return {
    id: deviceId,
    name: device.name,
    room: device.room,
    model: device.model,
    last_report: report ? { version: report.version, outcome: report.outcome, message: report.message, received_at: report.received_at } : null,
  };
}

/** Every release of one mode's manifest, newest first. */
export async function listReleases(db: Kysely<Database>, livemode: Livemode, manifest: Manifest): Promise<ReleaseView[]> {
  const views = manifest.releases.map(async (entry): Promise<ReleaseView> => {
    const role = roleOf(manifest, entry);
    const promotion = role === "canary" ? await checkPromotion(db, livemode, manifest, entry.version) : undefined;
    return {
      object: "release",
      livemode: livemode === 1,
      version: entry.version,
      display: entry.display,
      size: entry.size,
      md5: entry.md5,
      notes: entry.notes,
      published_at: entry.published_at,
      role,
      canary: entry.canary === null ? null : await canaryOf(db, entry.canary, livemode),
      promoted: entry.promoted,
      promotion: promotion ? { allowed: promotion.refusal === undefined, refusal: promotion.refusal ?? null } : null,
    };
  });
  return (await Promise.all(views)).reverse();
}
