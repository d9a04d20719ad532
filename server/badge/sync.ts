// POST /api/badge/sync: the badge's periodic report, in the check's text format.
//
// Request lines: v, sv, fw, bat, chg as in the check; at most one `ota=` outcome report
// (`ok|<version>` or `err|<version>|<message>`, SPEC 2.7); any number (up to MAX_TAPS) of
// `tap=<n>|<card UID>|<unix seconds>`, where n is the tap's number in the badge's queue
// (firmware/badge-protocol.ts reads them all).
//
// Response lines after `V1` and `S <seconds to the next sync>` (spread per badge,
// services/load-shaping.ts): `T <server unix time>` (the
// badge sets its clock from it); `O <report>` when the outcome report is stored, so the badge
// can clear it; one `A <n>` (accepted) or `R <n> <reason>` (rejected, kept for review) per tap,
// so the badge can clear its queue either way. The rules are services/badge-sync.ts's. A report
// on the version of a staged rollout has the rollout evaluated before the answer (rollouts.ts).
import type { IncomingMessage, ServerResponse } from "node:http";
import { parseBadgeRequest, parseReport, parseTaps, RECHECK_AFTER_S, type ResponseLine } from "../../firmware/index.ts";
import { syncBadge } from "../services/badge-sync.ts";
import type { Clock, RolloutEvaluator } from "../services/rollouts.ts";
import { spreadRecheckS } from "../services/load-shaping.ts";
import type { WriteBatcher } from "../store/write-batcher.ts";
import { deviceOf, sendLines } from "./badge-http.ts";

export function badgeSync(writes: WriteBatcher, rollouts: RolloutEvaluator, clock: Clock) {
  return async (req: IncomingMessage, res: ServerResponse) => {
    const device = deviceOf(req);
    const request = parseBadgeRequest(req.body, ["tap"]);
    const taps = parseTaps(request.repeated.get("tap") ?? []);
    const report = parseReport(request.single.get("ota"));
    const now = clock();
    const verdicts = await syncBadge(writes, device, { status: request.status, report, taps }, now, rollouts);
    sendLines(res, 200, spreadRecheckS(RECHECK_AFTER_S.sync, device.id), [
      { letter: "T", value: String(Math.floor(now.getTime() / 1000)) },
      ...(report ? [{ letter: "O", value: report.raw }] : []),
      ...taps.map((tap, i): ResponseLine => {
        const verdict = verdicts[i]!;
        return verdict.result === "accepted" ? { letter: "A", value: tap.n } : { letter: "R", value: `${tap.n} ${verdict.reason}` };
      }),
    ]);
  };
}
