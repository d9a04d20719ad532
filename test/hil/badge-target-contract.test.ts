// One contract for every BadgeTarget (badge-sim/runners/badge-target.ts): the same suite runs against
// the virtual badge, and against the simulated badge served on a serial line and driven through
// SerialConsole and SerialTarget, over @serialport/binding-mock and over a socat pty pair. A
// scenario file runs unchanged on any target that passes it.
import path from "node:path";
import { describe, expect, it } from "vitest";
import { virtualTarget, type BadgeTarget, type BadgeTargetFactory } from "../../badge-sim/runners/badge-target.ts";
import { loadScenario, type Scenario } from "../../badge-sim/runners/scenario.ts";
import type { ScenarioTarget } from "../../badge-sim/runners/scenario-runner.ts";
import { simSerialTarget } from "../../hil/sim-serial-badge.ts";
import { prepareInProcess } from "../../scripts/cli/sim-run.ts";

const SCENARIOS = path.join(import.meta.dirname, "../../fixtures/scenarios");
const scenario = (file: string): Scenario => loadScenario(path.join(SCENARIOS, file));
const RESTING = ["awake.idle", "awake.plugInPrompt", "asleep", "unprovisioned", "bricked", "off"];

/** A server set up for `file`, and a target on it; both released afterwards. */
async function withTarget(factory: BadgeTargetFactory, file: string, use: (target: BadgeTarget) => Promise<void>): Promise<void> {
  const played = scenario(file);
  const server = (await prepareInProcess(played)) as ScenarioTarget;
  try {
    const target = await factory({ scenario: played, serverUrl: server.serverUrl, token: server.token, stallTimeoutMs: 500 });
    try {
      await use(target);
    } finally {
      await target.close();
    }
  } finally {
    await server.close();
  }
}

function badgeTargetContract(makeTarget: () => BadgeTargetFactory): void {
  it("comes to rest after power-on, provisioned, running the version it was flashed with", async () => {
    await withTarget(makeTarget(), "happy-path.json", async (target) => {
      await target.comeToRest();
      expect(RESTING).toContain(target.state());
      expect(target.state()).not.toBe("off");
      expect(target.runningVersion()).toBe("1.4.0");
      expect(target.isProvisioned()).toBe(true);
      expect(target.stateHistory()[0]).toBe("booting");
      expect(target.stateHistory().at(-1)).toBe(target.state());
      expect(target.observations.some((o) => o.kind === "boot")).toBe(true);
    });
  });

  it("checks for an update: downloads, switches, restarts into it", async () => {
    await withTarget(makeTarget(), "happy-path.json", async (target) => {
      await target.comeToRest();
      const before = target.elapsedMs();
      await target.checkForUpdate();
      await target.comeToRest({ poweredOnly: true });
      expect(target.runningVersion()).toBe("1.5.0");
      expect(target.stateHistory()).toEqual(expect.arrayContaining(["online.checking", "online.downloading", "online.switching", "restarting"]));
      expect(target.screenHistory().some((text) => text.includes("Updated to 1.5.0"))).toBe(true);
      expect(target.elapsedMs()).toBeGreaterThanOrEqual(before);
    });
  });

  it("a brownout armed at 50 % leaves it off; with power again it runs the old version", async () => {
    await withTarget(makeTarget(), "brownout-50-percent.json", async (target) => {
      await target.armBrownout({ kind: "brownout", atPercent: 50 });
      await target.comeToRest();
      await target.checkForUpdate();
      await target.comeToRest();
      expect(target.state()).toBe("off");
      await target.plugIn();
      await target.comeToRest({ poweredOnly: true });
      expect(target.state()).not.toBe("off");
      expect(target.runningVersion()).toBe("1.4.0");
      expect(target.stateHistory()).toEqual(expect.arrayContaining(["online.downloading", "off", "booting"]));
    });
  });

  it("queues a card tap, syncs, and lets time pass", async () => {
    await withTarget(makeTarget(), "already-current.json", async (target) => {
      await target.comeToRest();
      await target.tapCard("04A1B2C3D0");
      await target.comeToRest();
      expect(target.observations.some((o) => o.kind === "tap.queued" && o.detail.includes("04A1B2C3D0"))).toBe(true);
      await target.syncNow();
      await target.comeToRest();
      expect(target.stateHistory()).toContain("online.syncing");
      await target.wait(60);
      await target.comeToRest();
      expect(RESTING).toContain(target.state());
    });
  });

  it("forgets a revoked token", async () => {
    await withTarget(makeTarget(), "revoked-token.json", async (target) => {
      await target.comeToRest();
      await target.checkForUpdate();
      await target.comeToRest({ poweredOnly: true });
      expect(target.isProvisioned()).toBe(false);
      expect(target.state()).toBe("unprovisioned");
    });
  });
}

describe("the virtual badge", () => badgeTargetContract(() => virtualTarget));
describe("the simulated badge over a serial line (binding-mock)", () => badgeTargetContract(() => simSerialTarget({ transport: "mock" })));
describe("the simulated badge over a socat pty pair", () => badgeTargetContract(() => simSerialTarget({ transport: "pty" })));
