// Model coverage of the badge statechart (issue 4 item 7). @xstate/graph generates paths through
// `badgeMachine`, each path is run on a real actor of it, and the figure is the share of the
// machine's transitions that those runs took, as the actor's inspection reported them: what ran,
// not what the graph promised. A transition here is one candidate: each guarded branch of an
// `on`, `always`, `after` or invoke `onDone` list counts on its own.
import { getShortestPaths, type StatePath } from "@xstate/graph";
import {
  __unsafe_getAllOwnEventDescriptors,
  createActor,
  fromCallback,
  fromPromise,
  SimulatedClock,
  type ActorLogic,
  type AnyStateMachine,
  type AnyStateNode,
  type AnyTransitionDefinition,
} from "xstate";
import type { CheckAnswer, Offer, SyncAnswer } from "../network/badge-client.ts";
import { badgeMachine, statePath, type BadgeEvent, type BadgeInput, type BadgeSnapshot, type BootResult } from "./badge-machine.ts";
import type { InstallRecord } from "./badge-storage.ts";
import type { BatteryReading } from "../hardware/battery.ts";
import { counted } from "../reports/text.ts";

/** The machine's own events plus those xstate makes: an invoked actor's result, a timer firing. */
export type ModelEvent = BadgeEvent | { type: `xstate.done.actor.${string}`; output: unknown } | { type: `xstate.after.${string}` };
export type ModelPath = StatePath<BadgeSnapshot, ModelEvent>;

export interface ModelTransition {
  /** `awake --menu.checkForUpdate [isOnExternalPower]--> online.checking` */
  id: string;
  /** the state node the transition is written on (`badge` for the root) */
  source: string;
  targets: string[];
}

export interface CoverageReport {
  transitions: number;
  exercised: number;
  share: number;
  /** ids of the transitions no run took */
  missed: string[];
  paths: number;
  /** steps where the actor was not in the state the graph predicted */
  failures: string[];
}

const nodeName = (node: AnyStateNode) => node.path.join(".") || node.machine.id;

type Guard = NonNullable<AnyTransitionDefinition["guard"]>;

function guardName(guard: Guard): string {
  if (typeof guard === "string") return guard;
  // and() / or() / not() are functions carrying the guards they combine
  if (typeof guard === "function") return "guards" in guard ? `${guard.name}(${(guard.guards as Guard[]).map(guardName).join(", ")})` : guard.name;
  return guard.type;
}

function eventName(eventType: string): string {
  if (eventType === "") return "always";
  const delayed = /^xstate\.after\.(\d+)\./.exec(eventType);
  if (delayed) return `after ${delayed[1]} ms`;
  return eventType.replace(/^xstate\.done\.actor\.(.*)$/, "$1 done");
}

/** Every candidate transition of `machine`, keyed by its definition object, in document order. */
function transitionsOf(machine: AnyStateMachine): Map<AnyTransitionDefinition, ModelTransition> {
  const found = new Map<AnyTransitionDefinition, ModelTransition>();
  const visit = (node: AnyStateNode) => {
    // node.transitions holds `on`, invoke `onDone` and `after`; `always` is kept apart
    for (const candidates of [...node.transitions.values(), node.always ?? []]) {
      candidates.forEach((transition, index) => {
        const targets = (transition.target ?? []).map(nodeName);
        const guard = transition.guard ? ` [${guardName(transition.guard)}]` : index > 0 ? " [else]" : "";
        const id = `${nodeName(node)} --${eventName(transition.eventType)}${guard}--> ${targets.join(", ") || "(stays)"}`;
        found.set(transition, { id, source: nodeName(node), targets });
      });
    }
    Object.values(node.states).forEach(visit);
  };
  visit(machine.root);
  return found;
}

// Effects are not the model's business: actors that never settle leave every result to the path.
const pending = <Output, Input = unknown>() => fromPromise<Output, Input>(() => new Promise(() => {}));
const modelUnderTest = badgeMachine.provide({
  actors: {
    boot: pending<BootResult>(),
    check: pending<CheckAnswer>(),
    sync: pending<SyncAnswer>(),
    switchBootSlot: pending<void, Offer>(),
    verifySignature: pending<string | null, Offer>(),
    download: fromCallback<BadgeEvent, Offer>(() => {}),
  },
});
// the same chart as badgeMachine; its own definition objects are what its actors report taking
const modelTransitions = transitionsOf(modelUnderTest);

export function listTransitions(): ModelTransition[] {
  return [...modelTransitions.values()];
}

// The finite set of events the paths are made of. Guards read the event, so each variant below
// is there to reach a branch: every boot outcome, every kind of answer (and an offer that is
// not newer), good and bad MD5s, a 401 and another failure, battery readings either side of
// MIN_INSTALL_VOLTS with and without charging and external power.
const RUNNING = "1.4.0";
const HELD_KEY = "a1".repeat(8);
const SIGNATURE = new Uint8Array(64);
const install = (version: string, stage: InstallRecord["stage"]): InstallRecord => ({ version, display: version, stage, bytes: 65_536, total: 131_072 });
const plainBoot: BootResult = { slot: "ota_0", version: RUNNING, crashesOnBoot: false, provisioned: true, install: null, pendingReport: null, contactDue: false, trustedKeyIds: [] };
const BOOTS: Record<string, BootResult> = {
  crashes: { ...plainBoot, slot: "ota_1", version: "1.6.0", crashesOnBoot: true, install: install("1.6.0", "switch") },
  unprovisioned: { ...plainBoot, provisioned: false },
  "install succeeded": { ...plainBoot, slot: "ota_1", version: "1.5.0", install: install("1.5.0", "switch") },
  "install interrupted": { ...plainBoot, install: install("1.5.0", "download") },
  "contact due": { ...plainBoot, contactDue: true, pendingReport: "err|1.5.0|download cut at 50% (64 of 128 KiB)" },
  plain: plainBoot,
  "verifies signatures": { ...plainBoot, trustedKeyIds: [HELD_KEY] },
};
const OFFER: Offer = { version: "1.6.0", display: "1.6.0", size: 131_072, md5: "5f".repeat(16), path: "/api/badge/ota/download?v=1.6.0", notes: [] };
const CHECKS: Record<string, CheckAnswer> = {
  offer: { kind: "offer", offer: OFFER, recheckAfterS: 3600 },
  "offer not newer": { kind: "offer", offer: { ...OFFER, version: RUNNING }, recheckAfterS: 3600 },
  "signed offer": { kind: "offer", offer: { ...OFFER, signature: { keyId: HELD_KEY, signature: SIGNATURE } }, recheckAfterS: 3600 },
  "offer signed by an unknown key": { kind: "offer", offer: { ...OFFER, signature: { keyId: "b2".repeat(8), signature: SIGNATURE } }, recheckAfterS: 3600 },
  current: { kind: "current", latest: RUNNING, recheckAfterS: 3600 },
  refused: { kind: "refused", code: "no_release", message: "no release for this badge", recheckAfterS: 3600 },
  unauthorized: { kind: "unauthorized" },
  failed: { kind: "failed", message: "HTTP 503", recheckAfterS: null },
};
const SYNCS: Record<string, SyncAnswer> = {
  synced: { kind: "synced", serverUnixS: 1_760_000_000, echoedReport: null, taps: [], recheckAfterS: 300 },
  unauthorized: { kind: "unauthorized" },
  failed: { kind: "failed", message: "connection refused", recheckAfterS: null },
};
const reading = (volts: number, externalPower: boolean, charging: boolean): BatteryReading => ({ volts, externalPower, charging });
const PLUGGED = [reading(3.95, true, true), reading(3.7, true, true), reading(3.95, true, false), reading(3.7, true, false)];
const UNPLUGGED = [reading(3.95, false, false), reading(3.7, false, false)];
const INPUT: BadgeInput = { battery: reading(3.95, true, true) };
const readingName = (battery: BatteryReading) =>
  `${battery.volts.toFixed(2)} V${battery.externalPower ? " external" : ""}${battery.charging ? " charging" : ""}`;
const done = (actor: string, outputs: Record<string, unknown>) =>
  Object.entries(outputs).map(([name, output]): [string, ModelEvent] => [`${actor} done: ${name}`, { type: `xstate.done.actor.${actor}`, output }]);

/** Each event and its name; keyed by the object, as the graph hands the same objects back in its steps. */
const EVENTS = new Map<ModelEvent, string>(
  (
    [
      ...done("boot", BOOTS),
      ...done("check", CHECKS),
      ...done("sync", SYNCS),
      ...done("switchBootSlot", { switched: undefined }),
      ...done("verifySignature", { "signature holds": null, "signature does not verify": "the signature by key a1a1a1a1a1a1a1a1 does not verify" }),
      ["menu.checkForUpdate", { type: "menu.checkForUpdate" }],
      ["menu.syncNow", { type: "menu.syncNow" }],
      ["button.press", { type: "button.press" }],
      ["card.tap", { type: "card.tap", uid: "04C0FFEE00" }],
      ...PLUGGED.map((battery): [string, ModelEvent] => [`power.plugged ${readingName(battery)}`, { type: "power.plugged", battery }]),
      ...UNPLUGGED.map((battery): [string, ModelEvent] => [`power.unplugged ${readingName(battery)}`, { type: "power.unplugged", battery }]),
      ...[...PLUGGED, ...UNPLUGGED].map((battery): [string, ModelEvent] => [`battery.changed ${readingName(battery)}`, { type: "battery.changed", battery }]),
      ["download.progress", { type: "download.progress", bytes: 65_536 }],
      ["download.finished: MD5 matches", { type: "download.finished", md5: OFFER.md5 }],
      ["download.finished: MD5 differs", { type: "download.finished", md5: "00".repeat(16) }],
      ["download.failed: 401", { type: "download.failed", reason: "download refused: HTTP 401", status: 401 }],
      ["download.failed: cut", { type: "download.failed", reason: "download cut at 50% (64 of 128 KiB)", status: null }],
      ["download.resumed", { type: "download.resumed", bytes: 65_536 }],
      ["download.restarted", { type: "download.restarted", reason: "the server sent the whole image instead of bytes 65536-: starting over from byte 0" }],
      ["download.busy", { type: "download.busy", retryAfterS: 60 }],
      // the timers, as the machine names them: `xstate.after.30000.badge.awake`
      ...[...modelTransitions.keys()]
        .filter((transition) => transition.eventType.startsWith("xstate.after."))
        .map((transition): [string, ModelEvent] => [transition.eventType, { type: transition.eventType as `xstate.after.${string}` }]),
    ] satisfies Array<[string, ModelEvent]>
  ).map(([name, event]) => [event, name]),
);

/**
 * What distinguishes two states for the graph: the state, and the context that guards read
 * (battery, contact due, the running version, whether the badge verifies signatures and who
 * signed the offer). The rest of the offer, progress and notice steer no guard outside
 * `downloading`, where the offer is always OFFER, so they are left out to stay finite.
 */
function stateKey(snapshot: BadgeSnapshot): string {
  const { battery, contactDue, running, trustedKeyIds, offer } = snapshot.context;
  // who signed the offer steers guards only on a badge that verifies: elsewhere it is left out, so the graph stays small
  const signing = trustedKeyIds.length === 0 ? "" : `, verifies${offer?.signature ? `, offer signed by ${offer.signature.keyId}` : ""}`;
  return `${statePath(snapshot.value)} (${readingName(battery)}${contactDue ? ", contact due" : ""}${running ? `, runs ${running.version}` : ""}${signing})`;
}

/**
 * Shortest paths through the machine, one to every transition and the state it leads to: the
 * graph's vertex is "transitions taken => state", so a path to every vertex takes every
 * transition the events can reach, in every context they reach it in. A path that is a prefix
 * of another is dropped, as the longer one runs it too.
 */
export function generatePaths(): ModelPath[] {
  // the cast admits xstate's own events (done, after), which BadgeEvent leaves out but the machine takes
  const paths = getShortestPaths(modelUnderTest as unknown as ActorLogic<BadgeSnapshot, ModelEvent, BadgeInput>, {
    input: INPUT,
    events: (snapshot) => {
      if (snapshot.status !== "active") return [];
      const handled = new Set(__unsafe_getAllOwnEventDescriptors(snapshot));
      return [...EVENTS.keys()].filter((event) => handled.has(event.type));
    },
    serializeEvent: (event) => EVENTS.get(event)!,
    serializeState: (snapshot, event, previous) => {
      if (!event || !previous) return stateKey(snapshot);
      // the first microstep's transitions; an `always` one that follows shows in where it led
      const taken = modelUnderTest.getTransitionData(previous, event as BadgeEvent).map((definition) => modelTransitions.get(definition)!.id);
      return `${taken.join(" + ")} => ${stateKey(snapshot)}`;
    },
  });
  const eventNames = (path: ModelPath) => path.steps.slice(1).map((step) => EVENTS.get(step.event)!);
  const prefixes = new Set(paths.flatMap((path) => eventNames(path).map((_, length, names) => names.slice(0, length).join("\n"))));
  return paths.filter((path) => !prefixes.has(eventNames(path).join("\n")));
}

/**
 * Runs `paths` on real actors and measures the transitions they took. Done events are sent to
 * the actor as its children would send them (xstate matches them by type alone); a timer step
 * advances the actor's simulated clock instead, so it counts only if the machine armed the timer.
 */
export function runPaths(paths: ModelPath[]): CoverageReport {
  const taken = new Set<string>();
  const failures: string[] = [];
  paths.forEach((path, index) => {
    const clock = new SimulatedClock();
    const actor = createActor(modelUnderTest, {
      input: INPUT,
      clock,
      inspect: (inspection) => {
        if (inspection.type !== "@xstate.microstep") return;
        for (const definition of inspection._transitions) {
          const id = modelTransitions.get(definition)?.id;
          if (id) taken.add(id);
          else failures.push(`path ${index + 1}: took a transition of ${definition.source.id} on "${definition.eventType}" that listTransitions() misses`);
        }
      },
    }).start();
    const sent: string[] = [];
    for (const { event, state } of path.steps.slice(1)) {
      sent.push(EVENTS.get(event)!);
      const delay = /^xstate\.after\.(\d+)\./.exec(event.type);
      if (delay) clock.increment(Number(delay[1]));
      else actor.send(event as BadgeEvent); // xstate's done events are not BadgeEvents; the machine takes them
      const reached = stateKey(actor.getSnapshot());
      if (reached !== stateKey(state)) {
        failures.push(`path ${index + 1} (${sent.join(", ")}): expected ${stateKey(state)}, the actor is in ${reached}`);
        break;
      }
    }
    actor.stop();
  });
  const all = listTransitions().map((transition) => transition.id);
  const missed = all.filter((id) => !taken.has(id));
  const exercised = all.length - missed.length;
  return { transitions: all.length, exercised, share: exercised / all.length, missed, paths: paths.length, failures };
}

export function measureModelCoverage(): CoverageReport {
  return runPaths(generatePaths());
}

/** `model coverage: 43 of 43 transitions (100.0 %) over 120 paths`, then what was missed or failed. */
export function formatCoverage(report: CoverageReport): string {
  const lines = [
    `model coverage: ${report.exercised} of ${report.transitions} transitions (${(report.share * 100).toFixed(1)} %) over ${counted(report.paths, "path")}`,
    ...report.missed.map((id) => `  missed: ${id}`),
    ...report.failures.map((failure) => `  failed: ${failure}`),
  ];
  return lines.join("\n");
}
