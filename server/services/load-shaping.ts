// Load shaping for a fleet (issue 23): badges that were told the same recheck interval at the same
// moment (a fleet that checked when a release was published) would come back in lockstep, and a
// fleet that downloads at once holds every connection and the whole bandwidth. So the `S` the
// server sends is spread per badge, and the downloads in flight are capped: over the cap a
// download gets 503 with Retry-After, and the badge keeps its checkpoint and comes back then.

import { createHash } from "node:crypto";

/**
 * A badge's `S` is the nominal interval times 1 + f, with f in [0, RECHECK_SPREAD) from a stable
 * hash of the badge's id: never sooner than the nominal interval, at most 25 % later, the same
 * for a badge on every answer (so its own rhythm is steady) and spread evenly over a fleet.
 */
export const RECHECK_SPREAD = 0.25;

/** A number in [0, 1) that depends on the badge's id only. */
function stableFraction(deviceId: string): number {
  return createHash("sha256").update(deviceId).digest().readUInt32BE(0) / 2 ** 32;
}

/** `baseS` spread for this badge: in [baseS, baseS x (1 + RECHECK_SPREAD)), whole seconds. */
export function spreadRecheckS(baseS: number, deviceId: string): number {
  return baseS + Math.floor(baseS * RECHECK_SPREAD * stableFraction(deviceId));
}

export interface DownloadLimits {
  /** downloads in flight at most; the next gets 503 */
  maxConcurrent: number;
  /** the nominal Retry-After of that 503, spread per badge like `S` */
  retryAfterS: number;
}

/**
 * 500 downloads of the 1.9 MB slot in flight took the whole loopback bandwidth of the download
 * benchmark with the server at one core; a thousand keep a busy server's event loop responsive
 * and a fleet of 10,000 updated within minutes. Configurable ($BADGEBENCH_MAX_DOWNLOADS).
 */
export const DOWNLOAD_LIMITS: DownloadLimits = { maxConcurrent: 1000, retryAfterS: 60 };

/** Counts the downloads in flight against the cap. */
export class DownloadGate {
  #inFlight = 0;
  constructor(readonly limits: DownloadLimits) {}

  /** Takes a place for a download; false when the cap is reached. */
  enter(): boolean {
    if (this.#inFlight >= this.limits.maxConcurrent) return false;
    this.#inFlight++;
    return true;
  }

  leave(): void {
    this.#inFlight--;
  }

  retryAfterS(deviceId: string): number {
    return spreadRecheckS(this.limits.retryAfterS, deviceId);
  }
}

/** $BADGEBENCH_MAX_DOWNLOADS is not a whole number of at least 1. */
export class DownloadLimitsError extends Error {
  override name = "DownloadLimitsError";
}

/** The cap from $BADGEBENCH_MAX_DOWNLOADS (the configuration table), when set. */
export function downloadLimitsFromEnv(env = process.env): Partial<DownloadLimits> {
  const text = env.BADGEBENCH_MAX_DOWNLOADS;
  if (text === undefined || text === "") return {};
  const maxConcurrent = Number(text);
  if (!Number.isInteger(maxConcurrent) || maxConcurrent < 1) throw new DownloadLimitsError(`BADGEBENCH_MAX_DOWNLOADS must be a whole number of at least 1, got '${text}'`);
  return { maxConcurrent };
}
