// POST /api/badge/ota/check (SPEC 4.8): parses the badge's status, asks services/ota-offer.ts
// for the decision, and writes it as letter lines after `V1` and `S`: an offer (U, B, Z, M, P,
// then up to three L), `N <version>` for a badge that runs its target or newer, or `X <code> <message>`.
// A badge that announced `sig=ed25519` is also sent a signed release's `G <key id> <signature>`
// after `P` (firmware/badge-protocol.ts); any other badge gets the offer it always got.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Logger } from "pino";
import { announcesSignatures, downloadPath, parseBadgeRequest, SIGNATURE_LETTER, type ResponseLine } from "../../firmware/index.ts";
import type { ReleaseStores } from "../releases/release-store.ts";
import { spreadRecheckS } from "../services/load-shaping.ts";
import { answerCheck, type CheckDecision } from "../services/ota-offer.ts";
import type { OpenRollout } from "../services/rollouts.ts";
import type { WriteBatcher } from "../store/write-batcher.ts";
import { deviceOf, refusalLine, sendLines } from "./badge-http.ts";

function linesOf(decision: CheckDecision, verifiesSignatures: boolean): ResponseLine[] {
  if (decision.kind === "refused") return [refusalLine(decision.code, decision.message)];
  if (decision.kind === "current") return [{ letter: "N", value: decision.version }];
  const { release } = decision;
  return [
    { letter: "U", value: release.version },
    { letter: "B", value: release.display },
    { letter: "Z", value: String(release.size) },
    { letter: "M", value: release.md5 },
    { letter: "P", value: downloadPath(release.version) },
    ...(verifiesSignatures && release.signature ? [{ letter: SIGNATURE_LETTER, value: `${release.signature.key_id} ${release.signature.ed25519}` }] : []),
    ...release.notes.map((note) => ({ letter: "L", value: note })),
  ];
}

export function otaCheck(openRollout: OpenRollout, writes: WriteBatcher, releases: ReleaseStores, logger: Logger) {
  return async (req: IncomingMessage, res: ServerResponse) => {
    const request = parseBadgeRequest(req.body);
    const device = deviceOf(req);
    const { decision, recorded } = await answerCheck(openRollout, writes, releases, device, request.status);
    recorded.catch((err: unknown) => logger.error({ err, deviceId: device.id }, "recording a check failed"));
    // Spread per badge, so a fleet told the same interval at once does not come back at once.
    sendLines(res, 200, spreadRecheckS(decision.recheckAfterS, device.id), linesOf(decision, announcesSignatures(request)));
  };
}
