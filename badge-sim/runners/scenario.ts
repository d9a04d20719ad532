// Scenario files (fixtures/scenarios/*.json): what a badge starts as, what the server offers,
// what the wearer does, which faults strike, and what must be observed. One file runs unchanged
// on the simulated badge and, later, on a real one (hil/). The schema is the documentation of
// the format; fixtures/scenarios/README.md explains it field by field.
import { z } from "zod";
import { isReleaseVersion, OTA_SLOT_BYTES, parseVersion } from "../../firmware/index.ts";
import { badgeMachine } from "../model/badge-machine.ts";
import { faultSchema } from "../network/fault-proxy/faults.ts";
import { SCENARIO_KEY_NAMES } from "./scenario-keys.ts";
import { describeIssues, displayName, readJsonFile } from "./json-file.ts";

const version = z.string().refine((v) => parseVersion(v) !== null, "expected three dotted numbers, like 1.4.0 (a -dev or +build suffix is allowed)");
const releaseVersion = z.string().refine(isReleaseVersion, "expected a publishable version, like 1.5.0 or 1.5.0-rc1");
const signingKey = z.enum(SCENARIO_KEY_NAMES, { error: `expected a key of fixtures/signing-keys: ${SCENARIO_KEY_NAMES.join(", ")}` });
const cardUid = z.string().regex(/^[0-9A-F]{8,20}$/, "expected a card UID of 8 to 20 upper-case hex digits");

const step = z.discriminatedUnion("do", [
  z.strictObject({ do: z.literal("menu.checkForUpdate") }),
  z.strictObject({ do: z.literal("card.tap"), uid: cardUid }),
  z.strictObject({ do: z.literal("power.plug") }),
  z.strictObject({ do: z.literal("power.unplug") }),
  z.strictObject({ do: z.literal("sync") }),
  z.strictObject({ do: z.literal("wait"), seconds: z.number().positive().max(7 * 24 * 3600) }),
]);

const powerFault = z.union([
  z.strictObject({
    kind: z.literal("brownout"),
    atPercent: z.number().min(0).lt(100, "expected a percent below 100 (the download is over at 100; use during: switch)"),
  }),
  z.strictObject({ kind: z.literal("brownout"), during: z.literal("switch") }),
]);

/** `*` matches any run of characters; anything else must match exactly. */
const reportPattern = z.string().regex(/^(ok|err)\|/, "expected ok|<version> or err|<version>|<message>; * matches anything");

/** Every state of the badge machine as a dotted path, and `off` (no power). */
export const STATE_NAMES: string[] = ["off", ...statePathsOf(badgeMachine.root)];

function statePathsOf(node: { states: Record<string, { path: string[]; states: Record<string, unknown> }> }): string[] {
  return Object.values(node.states).flatMap((child) => [child.path.join("."), ...statePathsOf(child as typeof node)]);
}

export const FLEET_STATES = ["current", "outdated", "unreleased", "updating", "failed", "no_report", "unknown"] as const;

export const scenarioSchema = z.strictObject({
  name: z.string().min(1).max(80),
  description: z.string().min(1),
  badge: z.strictObject({
    version,
    display: z.string().min(1).max(40).optional(),
    battery: z.strictObject({ volts: z.number().min(2.5).max(4.4), charging: z.boolean() }),
    /** Plugged into external power (USB); the radio works only then. */
    externalPower: z.boolean(),
    token: z.enum(["valid", "revoked"]).default("valid"),
    /** Release keys its firmware trusts (fixtures/signing-keys/); with any, it verifies signed releases. */
    trustedKeys: z.array(signingKey).max(2).default([]),
  }),
  server: z.strictObject({
    /** Versions published before the release, oldest first: the fleet's history (e.g. the badge's own version). */
    published: z.array(releaseVersion).default([]),
    release: z
      .strictObject({
        version: releaseVersion,
        size: z.int().min(1024).max(OTA_SLOT_BYTES).default(256 * 1024),
        crashOnBoot: z.boolean().default(false),
        notes: z.array(z.string().min(1).max(40)).max(3).default([]),
        /** Published with `--signing-key` of this key; unsigned when absent. */
        signedWith: signingKey.optional(),
        /** Keys the release's own image trusts (default: the badge's), which the badge verifies with once it runs it. */
        trustedKeys: z.array(signingKey).max(2).optional(),
      })
      .nullable(),
  }),
  steps: z.array(step).min(1),
  faults: z
    .strictObject({
      network: z.array(faultSchema.refine((f) => !(f.path instanceof RegExp), "a scenario file names paths as strings")).default([]),
      power: z.array(powerFault).default([]),
    })
    .default({ network: [], power: [] }),
  expect: z
    .strictObject({
      /** States the badge passes through, in this order (others may come between); `online` matches `online.checking`. */
      states: z.array(z.enum(STATE_NAMES, { error: `expected a state of the badge machine: ${STATE_NAMES.join(", ")}` })).optional(),
      /** Screen texts shown, in this order; each is a substring of what the screen said. */
      screen: z.array(z.string().min(1)).optional(),
      runningVersion: version.optional(),
      /** The last `ota=` report the server received, or null for none. */
      report: reportPattern.nullable().optional(),
      /** The badge's firmware state in GET /v1/devices at the end. */
      fleetState: z.enum(FLEET_STATES).optional(),
      /** The badge ended with no device token (the server revoked it). */
      unprovisioned: z.boolean().optional(),
    })
    .refine((e) => Object.keys(e).length > 0, "expected at least one observation"),
});

export type Scenario = z.output<typeof scenarioSchema> & { file: string };

/** A scenario file that cannot be used; the message names the file, the field and what was expected. */
export class ScenarioError extends Error {
  override name = "ScenarioError";
}

/** What powers the badge as the scenario starts, in the console's words (firmware/console.ts POWER_SOURCES). */
export function startingPower(scenario: Scenario): "battery" | "external" | "charging" {
  const { badge } = scenario;
  return !badge.externalPower ? "battery" : badge.battery.charging ? "charging" : "external";
}

export function parseScenario(json: unknown, file: string): Scenario {
  const parsed = scenarioSchema.safeParse(json);
  if (!parsed.success) throw new ScenarioError(`${file}: not a valid scenario:\n${describeIssues(parsed.error).join("\n")}`);
  return { ...parsed.data, file };
}

export function loadScenario(file: string): Scenario {
  return parseScenario(readJsonFile(file, (message) => new ScenarioError(message)), displayName(file));
}

/** Matches an `ota=` report against a pattern where `*` stands for any run of characters. */
export function reportMatches(pattern: string, report: string): boolean {
  const regex = new RegExp(`^${pattern.split("*").map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join(".*")}$`);
  return regex.test(report);
}
