// Moving the fleet from one release key to another (the procedure in server/releases/README.md,
// "Rotating the release key"), end to end on virtual badges against the real server:
// 1. a release signed with the old key whose image trusts the old and the new key; every badge
//    installs it;
// 2. then releases signed with the new key, whose images trust the new key only;
// after which the old key can sign nothing a badge installs. A badge that missed step 1 refuses
// step 2's release and says which key it holds: why step 1 must reach the whole fleet first.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { keyIdOf } from "../../firmware/index.ts";
import { readSigningKey } from "../../server/releases/signing-keys.ts";
import { scenarioKeyFile, scenarioPublicKey } from "../../badge-sim/runners/scenario-keys.ts";
import { startBadgeHarness, type BadgeHarness } from "../server/badge-harness.ts";
import { details, deviceView, newDevice, virtualBadge } from "./sim-harness.ts";
import type { VirtualBadge } from "../../badge-sim/virtual-badge/virtual-badge.ts";

let h: BadgeHarness;
beforeAll(async () => {
  h = await startBadgeHarness();
});
afterAll(() => h.close());

const OLD = { key: readSigningKey(scenarioKeyFile("old")), raw: scenarioPublicKey("old") };
const NEW = { key: readSigningKey(scenarioKeyFile("new")), raw: scenarioPublicKey("new") };

/** Checks for an update and runs until the badge rests again after whatever the check led to. */
async function checkAndSettle(badge: VirtualBadge, until: (badge: VirtualBadge) => boolean) {
  badge.checkForUpdate();
  await badge.runUntil((b) => until(b) && b.state() === "awake.idle");
}

describe("rotating the release key", () => {
  it("moves a badge from the old key to the new one, after which the old key signs nothing it installs", async () => {
    const device = await newDevice(h);
    const badge = virtualBadge(h, device.token, { trustedKeys: [OLD.raw] });
    const laggard = virtualBadge(h, (await newDevice(h)).token, { trustedKeys: [OLD.raw] });
    await badge.runUntilState("awake.idle");
    await laggard.runUntilState("awake.idle");

    // step 1: signed with the old key, trusting both
    await h.publish("1.5.0", { signingKey: OLD.key, trustedKeys: [OLD.raw, NEW.raw] });
    await checkAndSettle(badge, (b) => b.runningVersion() === "1.5.0");
    expect(details(badge, "signature")).toEqual([`verified: key ${keyIdOf(OLD.raw)} over 65536 bytes`]);

    // step 2: signed with the new key, trusting it alone
    await h.publish("1.6.0", { signingKey: NEW.key, trustedKeys: [NEW.raw] });
    await checkAndSettle(badge, (b) => b.runningVersion() === "1.6.0");
    expect(details(badge, "signature").at(-1)).toBe(`verified: key ${keyIdOf(NEW.raw)} over 65536 bytes`);
    expect((await deviceView(h, device.id)).firmware).toMatchObject({ state: "current", installed: { version: "1.6.0" } });

    // a badge that missed step 1 holds only the old key: it refuses 1.6.0 without downloading it
    await checkAndSettle(laggard, (b) => b.pendingReport() !== null || details(b, "report.sent").length > 0);
    expect(laggard.runningVersion()).toBe("1.4.0");
    expect(details(laggard, "report.stored")).toEqual([`err|1.6.0|1.6.0 is signed by key ${keyIdOf(NEW.raw)}, which this badge does not hold (it holds ${keyIdOf(OLD.raw)})`]);
    expect(details(laggard, "download")).toEqual([]);

    // the old key is retired: a release it signs is refused by the badge that rotated
    await h.publish("1.7.0", { signingKey: OLD.key, trustedKeys: [OLD.raw, NEW.raw] });
    await checkAndSettle(badge, (b) => details(b, "report.stored").some((report) => report.startsWith("err|1.7.0")));
    expect(badge.runningVersion()).toBe("1.6.0");
    expect(details(badge, "report.stored").at(-1)).toBe(`err|1.7.0|1.7.0 is signed by key ${keyIdOf(OLD.raw)}, which this badge does not hold (it holds ${keyIdOf(NEW.raw)})`);
  });
});
