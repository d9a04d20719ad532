// POST /api/badge/ota/check (SPEC 4.8). The answer, after `V1` and `S`:
// - an offer (U, B, Z, M, P, then up to three L) when the badge's target release is strictly
//   newer than what it runs, so a hand-flashed dev build is never moved back;
// - `N <version>` when it already runs its target release or something newer;
// - `X <code> <message>` when nothing can be offered (no release, battery too low).
import type { IncomingMessage, ServerResponse } from "node:http";
import { compareVersions, parseVersion, type ResponseLine } from "../../firmware/index.ts";
import { targetFor, type ReleaseStore } from "../releases/release-store.ts";
import { recordCheck } from "../store/devices-store.ts";
import { lockKeys, type WriteBatcher } from "../store/write-batcher.ts";
import { deviceOf, RECHECK_AFTER_S, refusalLine, sendLines } from "./badge-http.ts";
import { MIN_INSTALL_VOLTS, parseBadgeRequest } from "./badge-request.ts";

export const downloadPath = (version: string) => `/api/badge/ota/download?v=${encodeURIComponent(version)}`;

export function otaCheck(writes: WriteBatcher, releases: ReleaseStore) {
  return async (req: IncomingMessage, res: ServerResponse) => {
    const device = deviceOf(req);
    const { status } = parseBadgeRequest(req.body);
    const target = targetFor(await releases.read(), device.id);
    const targetVersion = target && parseVersion(target.version);
    let recheck: number;
    let lines: ResponseLine[];
    let offered: string | null = null;
    if (!target || !targetVersion) {
      recheck = RECHECK_AFTER_S.noRelease;
      lines = [refusalLine("no_release", "no release is published for this badge")];
    } else if (compareVersions(status.version, targetVersion) >= 0) {
      recheck = RECHECK_AFTER_S.current;
      lines = [{ letter: "N", value: target.version }];
    } else if (status.battery < MIN_INSTALL_VOLTS && !status.charging) {
      recheck = RECHECK_AFTER_S.batteryLow;
      lines = [refusalLine("battery_low", `battery ${status.battery} V is below ${MIN_INSTALL_VOLTS} V; charge the badge to update`)];
    } else {
      recheck = RECHECK_AFTER_S.offer;
      offered = target.version;
      lines = [
        { letter: "U", value: target.version },
        { letter: "B", value: target.display },
        { letter: "Z", value: String(target.size) },
        { letter: "M", value: target.md5 },
        { letter: "P", value: downloadPath(target.version) },
        ...target.notes.map((note) => ({ letter: "L", value: note })),
      ];
    }
    const report = {
      installed_version: status.version.text,
      installed_display: status.display,
      battery_volts: status.battery,
      charging: status.charging ? (1 as const) : (0 as const),
    };
    const now = new Date().toISOString();
    await writes.run((trx) => recordCheck(trx, device.id, report, now, offered), { lockKey: lockKeys.device(device.id) });
    sendLines(res, 200, recheck, lines);
  };
}
