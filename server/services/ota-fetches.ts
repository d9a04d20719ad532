// A badge's image download (SPEC 4.9), apart from HTTP: which release a badge may fetch (only
// its own target, the one a check would offer it) and the record of every fetch, opened before
// the first byte with the bytes of the image it serves (a resuming badge asks for a range), and
// closed with the bytes handed to the connection and whether all were.
import { quote, type ReleaseEntry } from "../../firmware/index.ts";
import { newId } from "../ids.ts";
import { findRelease, type ReleaseStores } from "../releases/release-store.ts";
import { finishFetch, insertFetch } from "../store/ota-store.ts";
import type { OtaFetchesTable } from "../store/schema.ts";
import type { WriteBatcher } from "../store/write-batcher.ts";
import type { DevicePrincipal } from "./devices.ts";
import { offeredRelease, type OpenRollout } from "./rollouts.ts";

export type FetchPermit =
  | { kind: "refused"; status: 403 | 404; code: "release_unknown" | "not_offered"; message: string }
  | { kind: "allowed"; entry: ReleaseEntry; image: Buffer };

/** Checks that `device` may fetch `version` and reads the image. */
export async function permitFetch(openRollout: OpenRollout, releaseStores: ReleaseStores, device: DevicePrincipal, version: string): Promise<FetchPermit> {
  // A badge downloads only from its own mode's releases.
  const releases = releaseStores[device.livemode];
  const manifest = await releases.read();
  const entry = findRelease(manifest, version);
  if (!entry) return { kind: "refused", status: 404, code: "release_unknown", message: `no published release ${quote(version, 40)}` };
  if ((await offeredRelease(openRollout, manifest, device.livemode, device.id))?.version !== entry.version) {
    return { kind: "refused", status: 403, code: "not_offered", message: `release ${entry.version} is not offered to this badge; check for updates first` };
  }
  return { kind: "allowed", entry, image: await releases.imageBytes(entry) };
}

/** Records the fetch of bytes `firstByte` to `lastByte` of `entry` as `sending`; returns its id. */
export async function startFetch(writes: WriteBatcher, device: DevicePrincipal, entry: ReleaseEntry, firstByte: number, lastByte: number, now: Date): Promise<string> {
  const fetchId = newId("fch");
  const startedAt = now.toISOString();
  await writes.run((trx) =>
    insertFetch(trx, {
      id: fetchId,
      device_id: device.id,
      version: entry.version,
      size: entry.size,
      first_byte: firstByte,
      last_byte: lastByte,
      bytes_sent: 0,
      outcome: "sending",
      started_at: startedAt,
      ended_at: null,
    }),
  );
  return fetchId;
}

/** Closes the fetch's record: `completed` when every byte it served was handed to the connection, else `cut`. */
export async function endFetch(writes: WriteBatcher, fetchId: string, outcome: Extract<OtaFetchesTable["outcome"], "completed" | "cut">, bytesSent: number, now: Date): Promise<void> {
  const endedAt = now.toISOString();
  await writes.run((trx) => finishFetch(trx, fetchId, outcome, bytesSent, endedAt));
}
