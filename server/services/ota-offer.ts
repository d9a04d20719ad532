// The OTA check's decision (SPEC 4.8), apart from HTTP and storage so it reads as the rule it is:
// - an offer when the badge's target release is strictly newer than what it runs, so a
//   hand-flashed dev build is never moved back, and the battery allows an install;
// - `current` when it already runs its target release or something newer;
// - a refusal when nothing can be offered (no release, battery too low).
// `answerCheck` is the service the route calls: it reads the target, decides, records the check.
import { compareVersions, MIN_INSTALL_VOLTS, parseVersion, RECHECK_AFTER_S, type BadgeStatus, type ReleaseEntry } from "../../firmware/index.ts";
import type { ReleaseStores } from "../releases/release-store.ts";
import { checkRecords } from "../store/devices-store.ts";
import { lockKeys, type WriteBatcher } from "../store/write-batcher.ts";
import { deviceReportOf, type DevicePrincipal } from "./devices.ts";
import { offeredRelease, type OpenRollout } from "./rollouts.ts";

export type CheckDecision =
  | { kind: "offer"; release: ReleaseEntry; recheckAfterS: number }
  | { kind: "current"; version: string; recheckAfterS: number }
  | { kind: "refused"; code: "no_release" | "battery_low"; message: string; recheckAfterS: number };

/** What to answer a badge reporting `status` whose target release is `target`; pure. */
export function decideOffer(status: BadgeStatus, target: ReleaseEntry | undefined): CheckDecision {
  const targetVersion = target && parseVersion(target.version);
  if (!target || !targetVersion) {
    return { kind: "refused", code: "no_release", message: "no release is published for this badge", recheckAfterS: RECHECK_AFTER_S.noRelease };
  }
  if (compareVersions(parseVersion(status.version)!, targetVersion) >= 0) {
    return { kind: "current", version: target.version, recheckAfterS: RECHECK_AFTER_S.current };
  }
  if (status.volts < MIN_INSTALL_VOLTS && !status.charging) {
    const message = `battery ${status.volts} V is below ${MIN_INSTALL_VOLTS} V; charge the badge to update`;
    return { kind: "refused", code: "battery_low", message, recheckAfterS: RECHECK_AFTER_S.batteryLow };
  }
  return { kind: "offer", release: target, recheckAfterS: RECHECK_AFTER_S.offer };
}

/**
 * Decides the check of a parsed request and records it on the badge's devices row (the status it
 * reported, the version offered, if any). The target is the staged rollout's release for a badge
 * inside its current stage (services/rollouts.ts), else the fleet's or the badge's canary release.
 *
 * The decision is answered at once; `recorded` settles when the record is committed. The answer
 * does not depend on the record, and the record acknowledges nothing: the badge's status, which its
 * next check or sync reports again, and the version offered, which its next check offers again. A
 * badge is not kept waiting for a group commit (with 5,000 badges checking at the same moment,
 * their answers waited hundreds of ms for each other's commits). A read on this instance after
 * the answer still sees the record (WriteBatcher.answeredAheadSettled); a record that arrives
 * after newer status of the badge is dropped (devices-store.ts recordCheck).
 */
export async function answerCheck(
  openRollout: OpenRollout,
  writes: WriteBatcher,
  releases: ReleaseStores,
  device: DevicePrincipal,
  status: BadgeStatus,
): Promise<{ decision: CheckDecision; recorded: Promise<void> }> {
  const target = await offeredRelease(openRollout, await releases[device.livemode].read(), device.livemode, device.id);
  const decision = decideOffer(status, target);
  const offered = decision.kind === "offer" ? decision.release.version : null;
  const now = new Date().toISOString();
  const recorded = writes.runCombinable(checkRecords, { id: device.id, report: deviceReportOf(status), now, offeredVersion: offered }, {
    lockKey: lockKeys.device(device.id),
    answeredAhead: true,
    // Nobody waits for it to be durable: on SQLite a group of checks alone skips the log sync.
    durable: false,
  });
  return { decision, recorded };
}
