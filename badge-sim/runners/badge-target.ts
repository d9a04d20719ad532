// The target interface a scenario is played on (issue 5): the wearer's and the world's actions,
// "let it run until it rests", and what the checks read. The virtual badge implements it here;
// hil/serial-target.ts implements it over a badge's serial console (a real badge, or the
// simulated one served on a serial line), so one scenario file runs unchanged on either.
import type { SilentPeers } from "../network/badge-client.ts";
import type { FaultProxy } from "../network/fault-proxy/proxy.ts";
import type { BrownoutPoint } from "../hardware/battery.ts";
import type { Scenario } from "./scenario.ts";
import { scenarioPublicKey } from "./scenario-keys.ts";
import type { Observation } from "../virtual-badge/observation-log.ts";
import { createVirtualBadge, type VirtualBadge } from "../virtual-badge/virtual-badge.ts";

/** A scenario's power fault, as the file says it. */
export type PowerFault = Scenario["faults"]["power"][number];

/**
 * Where a step ends: the badge waits for the wearer, sleeps, cannot go on, or has no power (a
 * power fault struck, so the next step happens while the power is out).
 */
export const RESTING_STATES: ReadonlySet<string> = new Set(["awake.idle", "awake.plugInPrompt", "asleep", "unprovisioned", "bricked", "off"]);

export const isRestingState = (state: string, options: { poweredOnly?: boolean } = {}) => RESTING_STATES.has(state) && !(options.poweredOnly && state === "off");

export interface BadgeTarget {
  // --- what the wearer and the world do (each resolves once the action was delivered, not done)
  checkForUpdate(): Promise<void>;
  syncNow(): Promise<void>;
  tapCard(uid: string): Promise<void>;
  plugIn(): Promise<void>;
  unplug(): Promise<void>;
  /** lets `seconds` of badge time pass (simulated for the virtual badge, wall time for a real one) */
  wait(seconds: number): Promise<void>;
  /** arms a power fault; it strikes later, where it says (a download percent, the partition switch) */
  armBrownout(fault: PowerFault): Promise<void>;
  /** resolves when the badge is in a resting state (`RESTING_STATES`; with `poweredOnly`, not `off`) */
  comeToRest(options?: { poweredOnly?: boolean }): Promise<void>;

  // --- what the checks read
  /** the current state as a dotted path, `off` without power */
  state(): string;
  runningVersion(): string | null;
  /** the badge has a device token */
  isProvisioned(): boolean;
  /** every state entered, in order (including `off`) */
  stateHistory(): string[];
  /** every screen text shown, in order (`""` when the screen went off) */
  screenHistory(): string[];
  /** the log for reports (JUnit system-out, --json) */
  readonly observations: Observation[];
  /** badge time since the target was made: simulated ms for the virtual badge, wall ms on a serial line */
  elapsedMs(): number;
  /** checks of the target's own, added to the scenario's (e.g. the model oracle's verdict on a real badge) */
  extraChecks?(): Array<{ field: string; expected: unknown; observed: unknown; passed: boolean }>;
  /** releases the target (stops the virtual badge, closes the port) */
  close(): Promise<void>;
}

/** What a target is made from: the scenario, and where the badge's server (or the fault proxy before it) is. */
export interface BadgeTargetSetup {
  scenario: Scenario;
  serverUrl: string;
  /** the device token the server set up for the scenario */
  token: string;
  /** ms the badge waits on a silent download */
  stallTimeoutMs: number;
  /** the fault proxy in this process, which says when it holds a connection silent (stalls then run on the simulated clock) */
  silentPeers?: SilentPeers;
  /** the fault proxy in the badge's path, when there is one: a real badge's power cut at a byte holds the download there */
  faultProxy?: FaultProxy;
}

export type BadgeTargetFactory = (setup: BadgeTargetSetup) => Promise<BadgeTarget>;

/** The virtual badge's options for a scenario, so every way of serving one starts it the same. */
export function virtualBadgeFor(setup: BadgeTargetSetup): VirtualBadge {
  const { scenario } = setup;
  return createVirtualBadge({
    serverUrl: setup.serverUrl,
    token: setup.token,
    version: scenario.badge.version,
    display: scenario.badge.display,
    battery: { ...scenario.badge.battery, externalPower: scenario.badge.externalPower },
    network: { stallTimeoutMs: setup.stallTimeoutMs, silentPeers: setup.silentPeers },
    trustedKeys: scenario.badge.trustedKeys.map(scenarioPublicKey),
  });
}

export function brownoutPoint(fault: PowerFault): BrownoutPoint {
  // The middle of the otadata write: the moment the switch is least finished.
  return "during" in fault ? { duringSwitch: "mid-write" } : { atDownloadPercent: fault.atPercent };
}

const isResting = (badge: VirtualBadge) => isRestingState(badge.state());
const isRestingPowered = (badge: VirtualBadge) => isRestingState(badge.state(), { poweredOnly: true });

/** The default target: a virtual badge on a simulated clock, set up as the scenario says. */
export const virtualTarget: BadgeTargetFactory = async (setup) => virtualBadgeTarget(virtualBadgeFor(setup));

/** A `BadgeTarget` over a virtual badge that already exists. */
export function virtualBadgeTarget(badge: VirtualBadge): BadgeTarget {
  const startedAt = badge.clock.now();
  return {
    checkForUpdate: async () => badge.checkForUpdate(),
    syncNow: async () => badge.syncNow(),
    tapCard: async (uid) => badge.tapCard(uid),
    plugIn: async () => badge.plugIn(),
    unplug: async () => badge.unplug(),
    wait: (seconds) => badge.advance(seconds * 1000),
    armBrownout: async (fault) => badge.battery.brownoutAt(brownoutPoint(fault)),
    comeToRest: (options = {}) => badge.runUntil(options.poweredOnly ? isRestingPowered : isResting),
    state: () => badge.state(),
    runningVersion: () => badge.runningVersion(),
    isProvisioned: () => badge.token() !== null,
    stateHistory: () => badge.observations("state").map((o) => o.detail),
    screenHistory: () => badge.observations("screen").map((o) => o.detail),
    observations: badge.log,
    elapsedMs: () => badge.clock.now() - startedAt,
    close: async () => badge.stop(),
  };
}
