// Publishing and promoting releases (SPEC 4.10). Publish refuses, naming every condition that
// holds, before anything is written; a release that passes is stored as an immutable image plus
// a new manifest. With a canary the release is offered to that one badge until it is promoted,
// which needs the badge's `ota=ok|VERSION` report (or --force, which the manifest records).
// Everything happens within one mode's releases (the ReleaseStore given): the canary must be a
// badge of that mode, and only its reports count.
import type { KeyObject } from "node:crypto";
import fs from "node:fs";
import type { Kysely } from "kysely";
import {
  compareVersions,
  containsBytes,
  hasControlCharacter,
  DISPLAY_MAX_CHARS,
  findVersionString,
  IMAGE_MAGIC,
  inspectAppImage,
  isReleaseVersion,
  md5Hex,
  NOTE_MAX_CHARS,
  NOTES_MAX,
  OTA_SLOT_BYTES,
  parseVersion,
  sha256Hex,
  trustedKeysIn,
  type Manifest,
  type ReleaseEntry,
} from "../../firmware/index.ts";
import { findDevice } from "../store/devices-store.ts";
import { latestOkReport } from "../store/ota-store.ts";
import { findOpenRollout } from "../store/rollouts-store.ts";
import type { Database, Livemode, OtaReportsTable } from "../store/schema.ts";
import { findRelease, modeName, type ReleaseStore } from "./release-store.ts";
import { signImage } from "./signing-keys.ts";

export const WIFI_PASSWORD_ENV = "BADGE_DEV_WIFI_PASSWORD";

export interface Refusal {
  code: string;
  message: string;
}

/** Publishing or promoting was refused; `reasons` names every condition that held. */
export class PublishRefusal extends Error {
  override name = "PublishRefusal";
  readonly reasons: Refusal[];
  constructor(what: string, reasons: Refusal[]) {
    super(`refused to ${what}:\n${reasons.map((r) => `  - ${r.message}`).join("\n")}`);
    this.reasons = reasons;
  }
}

export interface PublishInput {
  imagePath: string;
  version: string;
  notes: string[];
  display?: string;
  canary?: string;
  /** The Ed25519 private key that signs the image (signing-keys.ts readSigningKey); unsigned without one. */
  signingKey?: KeyObject;
  /** The developer Wi-Fi password no release may contain; undefined when none is configured. */
  devWifiPassword: string | undefined;
  now?: Date;
}


function checkArguments(input: PublishInput): Refusal[] {
  const refusals: Refusal[] = [];
  if (!isReleaseVersion(input.version)) {
    refusals.push({
      code: "version_invalid",
      message: `version '${input.version}' is not three dotted numbers (like 1.4.0, optionally 1.4.0-rc1)`,
    });
  }
  if (input.notes.length > NOTES_MAX) {
    refusals.push({ code: "notes_too_many", message: `${input.notes.length} release notes given; at most ${NOTES_MAX}` });
  }
  input.notes.forEach((note, i) => {
    if (note.length === 0 || note.length > NOTE_MAX_CHARS || hasControlCharacter(note)) {
      refusals.push({
        code: "note_invalid",
        message: `release note ${i + 1} is ${note.length} characters; a note is 1 to ${NOTE_MAX_CHARS} characters on one line`,
      });
    }
  });
  const display = input.display ?? input.version;
  if (display.length === 0 || display.length > DISPLAY_MAX_CHARS || hasControlCharacter(display)) {
    refusals.push({
      code: "display_invalid",
      message: `display string is ${display.length} characters; it is 1 to ${DISPLAY_MAX_CHARS} characters on one line`,
    });
  }
  if (!input.devWifiPassword) {
    refusals.push({
      code: "wifi_password_unconfigured",
      message: `no developer Wi-Fi password is configured, so the image cannot be checked for it; set ${WIFI_PASSWORD_ENV} or pass --wifi-password-file FILE`,
    });
  }
  return refusals;
}

function readImage(imagePath: string): { bytes?: Uint8Array; refusal?: Refusal } {
  let stat: fs.Stats;
  try {
    stat = fs.statSync(imagePath);
  } catch (error) {
    return { refusal: { code: "image_unreadable", message: `cannot read image ${imagePath}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}` } };
  }
  if (!stat.isFile()) return { refusal: { code: "image_unreadable", message: `image ${imagePath} is not a regular file` } };
  if (stat.size === 0) return { refusal: { code: "image_empty", message: `image ${imagePath} is empty (0 bytes)` } };
  if (stat.size > OTA_SLOT_BYTES) {
    return {
      refusal: {
        code: "image_too_large",
        message: `image is ${stat.size} bytes and does not fit the 0x${OTA_SLOT_BYTES.toString(16).toUpperCase()} (${OTA_SLOT_BYTES}) byte OTA slot`,
      },
    };
  }
  const bytes = fs.readFileSync(imagePath);
  // Checked again on what was read: the file may have grown since the stat.
  if (bytes.length > OTA_SLOT_BYTES) return readImage(imagePath);
  return { bytes };
}

function checkImage(bytes: Uint8Array, input: PublishInput): Refusal[] {
  const refusals: Refusal[] = [];
  if (bytes[0] !== IMAGE_MAGIC) {
    refusals.push({
      code: "image_magic",
      message: `image starts with byte 0x${(bytes[0] ?? 0).toString(16).padStart(2, "0").toUpperCase()}, not 0xE9: not an ESP32 app image`,
    });
    return refusals;
  }
  const inspection = inspectAppImage(bytes);
  if (inspection.problems.length > 0) {
    refusals.push({ code: "image_corrupt", message: `image is truncated or corrupt: ${inspection.problems.join("; ")}` });
  }
  if (isReleaseVersion(input.version) && !findVersionString(bytes, input.version)) {
    refusals.push({
      code: "image_version_missing",
      message: `image does not contain its own version string '${input.version}' (an old build under a new number?)`,
    });
  }
  if (input.devWifiPassword && containsBytes(bytes, Buffer.from(input.devWifiPassword, "utf8"))) {
    refusals.push({
      code: "image_contains_wifi_password",
      message: "image contains the developer Wi-Fi password; build the release configuration without it",
    });
  }
  // A badge that installs a signed image without keys stops verifying: the next image could be anyone's.
  if (input.signingKey && trustedKeysIn(bytes).length === 0) {
    refusals.push({
      code: "image_trusts_no_key",
      message: "image is signed but trusts no public key, so badges running it would install unsigned images; build it with the release keys it trusts",
    });
  }
  return refusals;
}

function checkVersionOrder(manifest: Manifest, version: string): Refusal[] {
  if (findRelease(manifest, version)) {
    return [{ code: "version_exists", message: `version ${version} is already published; a published image never changes` }];
  }
  const parsed = parseVersion(version);
  const latest = manifest.releases.at(-1);
  const latestParsed = latest && parseVersion(latest.version);
  if (parsed && latest && latestParsed && compareVersions(parsed, latestParsed) <= 0) {
    return [
      {
        code: "version_not_newer",
        message: `version ${version} is not strictly newer than the latest published version ${latest.version}`,
      },
    ];
  }
  return [];
}

async function checkCanary(db: Kysely<Database>, deviceId: string | undefined, livemode: Livemode): Promise<Refusal[]> {
  if (deviceId === undefined) return [];
  const device = await findDevice(db, deviceId);
  if (!device) return [{ code: "canary_unknown", message: `canary ${deviceId} is not a known device (see badgebench devices list)` }];
  if (device.livemode !== livemode) {
    return [
      {
        code: "canary_other_mode",
        message: `canary ${deviceId} is a ${modeName(device.livemode)}-mode badge; a ${modeName(livemode)} release's canary must be a ${modeName(livemode)} badge (or publish with --mode ${modeName(device.livemode)})`,
      },
    ];
  }
  if (device.revoked_at !== null) return [{ code: "canary_revoked", message: `canary ${deviceId} has a revoked token` }];
  return [];
}

export async function publishRelease(db: Kysely<Database>, releases: ReleaseStore, input: PublishInput): Promise<ReleaseEntry> {
  const what = `publish ${input.version}`;
  const refusals = checkArguments(input);
  const { bytes, refusal } = readImage(input.imagePath);
  if (refusal) refusals.push(refusal);
  if (bytes) refusals.push(...checkImage(bytes, input));
  refusals.push(...(await checkCanary(db, input.canary, releases.livemode)));
  refusals.push(...checkVersionOrder(await releases.read(), input.version));
  if (refusals.length > 0 || !bytes) throw new PublishRefusal(what, refusals);

  return releases.withLock(db, async (locked) => {
    // Checked again under the lock: another publish may have landed since.
    const manifest = await locked.read();
    const orderRefusals = checkVersionOrder(manifest, input.version);
    if (orderRefusals.length > 0) throw new PublishRefusal(what, orderRefusals);
    const sha256 = sha256Hex(bytes);
    const entry: ReleaseEntry = {
      version: input.version,
      display: input.display ?? input.version,
      file: await locked.storeImage(bytes, input.version, sha256),
      size: bytes.length,
      md5: md5Hex(bytes),
      sha256,
      ...(input.signingKey ? { signature: signImage(bytes, input.signingKey) } : {}),
      notes: input.notes,
      published_at: (input.now ?? new Date()).toISOString(),
      canary: input.canary ?? null,
      promoted: null,
    };
    await locked.replaceManifest({
      ...manifest,
      fleet: entry.canary === null ? entry.version : manifest.fleet,
      releases: [...manifest.releases, entry],
    });
    return entry;
  });
}

export interface PromoteOptions {
  force?: boolean;
  /** the staged rollout completing, which promotes its own release */
  byRollout?: string;
  /** Why; recorded in the manifest. Required when forcing: an override nobody explained is not an audit trail. */
  reason?: string;
  now?: Date;
}

export const PROMOTE_REASON_MAX_CHARS = 200;

export interface PromotionCheck {
  entry: ReleaseEntry | undefined;
  /** the canary's `ota=ok|VERSION` received after the publish, when there is one */
  report: OtaReportsTable | undefined;
  /** why promoting now is refused; `canary_not_confirmed` is the one a forced promotion overrides */
  refusal: Refusal | undefined;
}

/**
 * Whether a release may become the fleet's: the one rule behind `release promote`, the API's
 * promote and the releases list's `promotion` field. A release in an open staged rollout goes to
 * the fleet through it (`byRollout`: the rollout completing), never around it.
 */
export async function checkPromotion(db: Kysely<Database>, livemode: Livemode, manifest: Manifest, version: string, byRollout?: string): Promise<PromotionCheck> {
  const entry = findRelease(manifest, version);
  const refused = (code: string, message: string): PromotionCheck => ({ entry, report: undefined, refusal: { code, message } });
  if (!entry) return refused("release_unknown", `no published release ${version}`);
  if (entry.canary === null || entry.promoted !== null) return refused("release_already_fleet", `${version} is already offered to the fleet`);
  const fleet = manifest.fleet === null ? undefined : findRelease(manifest, manifest.fleet);
  const newer = manifest.releases.slice(manifest.releases.indexOf(entry) + 1).find((r) => r === fleet);
  if (newer) return refused("release_superseded", `the fleet already runs ${newer.version}, which is newer than ${version}`);
  const rollout = await findOpenRollout(db, livemode);
  if (rollout?.version === version && rollout.id !== byRollout) {
    return refused("release_in_rollout", `${version} is in staged rollout ${rollout.id} (${rollout.status}); it reaches the fleet when the rollout completes, or abort the rollout first`);
  }
  const report = await latestOkReport(db, livemode, entry.canary, version, entry.published_at);
  if (!report) {
    return refused(
      "canary_not_confirmed",
      `canary ${entry.canary} has not reported ota=ok|${version} as a ${modeName(livemode)}-mode badge; wait for its sync, or force the promotion with a reason (recorded in the manifest)`,
    );
  }
  return { entry, report, refusal: undefined };
}

function checkReason(reason: string | undefined, overriding: boolean): Refusal | undefined {
  if (reason === undefined) {
    return overriding ? { code: "reason_missing", message: "a forced promotion needs a reason (--reason TEXT), recorded in the manifest" } : undefined;
  }
  if (reason.trim().length === 0 || reason.length > PROMOTE_REASON_MAX_CHARS || hasControlCharacter(reason)) {
    return { code: "reason_invalid", message: `the reason is 1 to ${PROMOTE_REASON_MAX_CHARS} characters on one line` };
  }
  return undefined;
}

export async function promoteRelease(
  db: Kysely<Database>,
  releases: ReleaseStore,
  version: string,
  options: PromoteOptions = {},
): Promise<ReleaseEntry> {
  const what = `promote ${version}`;
  return releases.withLock(db, async (locked) => {
    const manifest = await locked.read();
    const { entry, report, refusal } = await checkPromotion(locked.db, releases.livemode, manifest, version, options.byRollout);
    const overridden = refusal?.code === "canary_not_confirmed" && options.force === true;
    if (refusal && !overridden) throw new PublishRefusal(what, [refusal]);
    const reasonRefusal = checkReason(options.reason, overridden);
    if (reasonRefusal) throw new PublishRefusal(what, [reasonRefusal]);
    const promoted: ReleaseEntry = {
      ...entry!,
      promoted: {
        at: (options.now ?? new Date()).toISOString(),
        forced: !report,
        reason: options.reason ?? null,
        canary_report: report ? `${report.id} at ${report.received_at}` : null,
      },
    };
    await locked.replaceManifest({
      ...manifest,
      fleet: version,
      releases: manifest.releases.map((r) => (r === entry ? promoted : r)),
    });
    return promoted;
  });
}
