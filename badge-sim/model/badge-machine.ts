// The badge firmware as a statechart: SPEC 3.4 and its badge-side rules, one boot at a time.
// A run of this machine is the time between two chip starts; it ends in `restarting` (after an
// install, or after a failed one) or `wakingUp` (deep sleep ends in a reset on an ESP32), and
// the badge starts a fresh one. A brownout is not a transition: the power just stops, RAM (this
// machine's context) is gone, and the next run reads what NVS kept.
//
// Guards look only at the context and the event, so paths through the chart are decided by
// events and actor outputs alone. Effects (HTTP, flash, NVS) are named actors and actions that
// the badge supplies with `.provide()`; here they are empty, which is the bare model.
import { and, assign, fromCallback, fromPromise, setup, type SnapshotFrom, type StateValue } from "xstate";
import { compareVersions, errorReport, MIN_INSTALL_VOLTS, okReport, OTA_SLOT_BYTES, parseVersion } from "../../firmware/index.ts";
import type { CheckAnswer, Offer, SyncAnswer } from "../network/badge-client.ts";
import type { InstallRecord } from "./badge-storage.ts";
import type { BatteryReading } from "../hardware/battery.ts";
import type { SlotName } from "../hardware/otadata.ts";

export const SLEEP_AFTER_MS = 30_000;
/** How long a failed update stays on screen before the badge restarts on its old firmware. */
export const FAILURE_SCREEN_MS = 3_000;

/** What the boot actor found: the image that runs and what NVS holds. */
export interface BootResult {
  slot: SlotName;
  version: string;
  crashesOnBoot: boolean;
  provisioned: boolean;
  /** an install that was under way when the badge last stopped */
  install: InstallRecord | null;
  pendingReport: string | null;
  contactDue: boolean;
  /** key ids of the release keys the running image trusts (firmware/signature.ts); empty: it verifies no signatures */
  trustedKeyIds: string[];
}

export interface BadgeInput {
  battery: BatteryReading;
}

export interface BadgeContext {
  battery: BatteryReading;
  running: { slot: SlotName; version: string } | null;
  /** whether the badge should sync at its next chance (decided at boot from NVS) */
  contactDue: boolean;
  offer: Offer | null;
  /** image bytes received so far */
  received: number;
  /** the screen's second line: the last thing worth telling the wearer */
  notice: string | null;
  /** the running image's trusted release keys (BootResult.trustedKeyIds) */
  trustedKeyIds: string[];
}

export type BadgeEvent =
  | { type: "menu.checkForUpdate" }
  | { type: "menu.syncNow" }
  | { type: "button.press" }
  | { type: "card.tap"; uid: string }
  | { type: "power.plugged"; battery: BatteryReading }
  | { type: "power.unplugged"; battery: BatteryReading }
  | { type: "battery.changed"; battery: BatteryReading }
  | { type: "download.progress"; bytes: number }
  | { type: "download.finished"; md5: string }
  | { type: "download.failed"; reason: string; status: number | null }
  /** a resume was answered 206 at the checkpoint: the slot keeps the bytes before it (issue 23) */
  | { type: "download.resumed"; bytes: number }
  /** a resume was answered 200 (or 416): the image comes again from byte 0 */
  | { type: "download.restarted"; reason: string }
  /** 503 over the server's download cap: keep the checkpoint, come back after Retry-After */
  | { type: "download.busy"; retryAfterS: number };

/** `51% (983 of 1920 KiB)` */
export function progressText(bytes: number, total: number): string {
  return `${Math.floor((bytes * 100) / total)}% (${Math.floor(bytes / 1024)} of ${Math.floor(total / 1024)} KiB)`;
}

/** The report of an install the power interrupted, from what it recorded as it went. */
function interruptedReport(boot: BootResult): string {
  const record = boot.install!;
  const why =
    record.stage === "switch" ? "power lost during the partition switch" : `power lost during download after ${progressText(record.bytes, record.total)}`;
  return errorReport(record.version, why);
}

/** What the wearer is told about a stored report. */
function reportNotice(report: string, running: string): string {
  const [outcome, version, ...message] = report.split("|");
  return outcome === "ok" ? `Updated to ${version}` : `Update to ${version} failed: ${message.join("|")}. Still running ${running}`;
}

/** Why an offer cannot be installed whatever the battery says, or null. */
function offerProblem(offer: Offer, running: string): string | null {
  const offered = parseVersion(offer.version);
  const current = parseVersion(running);
  if (!offered) return `${offer.version} is not a version`;
  if (current && compareVersions(offered, current) <= 0) return `${offer.version} is not newer than ${running}`;
  if (offer.size > OTA_SLOT_BYTES) return `${offer.size} bytes do not fit the ${OTA_SLOT_BYTES}-byte slot`;
  return null;
}

/**
 * Why a badge that verifies signatures will not take this offer, or null (also null for a badge
 * holding no key: it verifies nothing, as firmware before signed releases).
 */
export function signatureProblem(offer: Offer, trustedKeyIds: string[]): string | null {
  if (trustedKeyIds.length === 0) return null;
  if (!offer.signature) return `${offer.version} is not signed; this badge installs signed releases only`;
  if (!trustedKeyIds.includes(offer.signature.keyId)) {
    return `${offer.version} is signed by key ${offer.signature.keyId}, which this badge does not hold (it holds ${trustedKeyIds.join(", ")})`;
  }
  return null;
}

function checkNotice(answer: CheckAnswer, context: BadgeContext): string {
  switch (answer.kind) {
    case "current":
      return `Up to date (latest release ${answer.latest})`;
    case "refused":
      return `No update: ${answer.message || answer.code}`;
    case "offer":
      return `Ignored offer: ${offerProblem(answer.offer, context.running!.version)}`;
    case "failed":
      return `Update check failed: ${answer.message}`;
    case "unauthorized":
      return "Device token refused";
  }
}

const recheckOf = (answer: CheckAnswer | SyncAnswer) => ("recheckAfterS" in answer ? answer.recheckAfterS : null);

const notProvided = (name: string) => () => Promise.reject(new Error(`the ${name} actor is supplied by the badge with machine.provide()`));

export const badgeMachine = setup({
  types: {
    context: {} as BadgeContext,
    events: {} as BadgeEvent,
    input: {} as BadgeInput,
  },
  actors: {
    boot: fromPromise<BootResult>(notProvided("boot")),
    check: fromPromise<CheckAnswer>(notProvided("check")),
    sync: fromPromise<SyncAnswer>(notProvided("sync")),
    /** Streams the offered image into the inactive slot, MD5 as it writes; sends download.* back. */
    download: fromCallback<BadgeEvent, Offer>(() => {
      throw new Error("the download actor is supplied by the badge with machine.provide()");
    }),
    /** Writes otadata so the new slot boots; the last act of an install. */
    switchBootSlot: fromPromise<void, Offer>(notProvided("switchBootSlot")),
    /** Checks the offer's Ed25519 signature over the whole image written; null when it holds, else why not. */
    verifySignature: fromPromise<string | null, Offer>(notProvided("verifySignature")),
  },
  actions: {
    storeReport: (_, _params: { report: string }) => {},
    forgetToken: () => {},
    queueTap: (_, _params: { uid: string }) => {},
    applySync: (_, _params: { answer: Extract<SyncAnswer, { kind: "synced" }> }) => {},
    rememberCheck: (_, _params: { recheckAfterS: number | null }) => {},
    rememberContactFailure: (_, _params: { recheckAfterS: number | null }) => {},
    rememberBoot: assign((_, boot: BootResult) => ({
      running: { slot: boot.slot, version: boot.version },
      trustedKeyIds: boot.trustedKeyIds,
      // an install record always becomes a report at this boot, and a report is sent at once
      contactDue: boot.contactDue || boot.install !== null,
      notice: boot.pendingReport === null ? null : reportNotice(boot.pendingReport, boot.version),
    })),
    rememberBattery: assign((_, params: { battery: BatteryReading }) => ({ battery: params.battery })),
    rememberOffer: assign((_, params: { offer: Offer }) => ({ offer: params.offer, received: 0 })),
    rememberProgress: assign((_, params: { bytes: number }) => ({ received: params.bytes })),
    notify: assign((_, params: { text: string | null }) => ({ notice: params.text })),
    markContacted: assign({ contactDue: false }),
  },
  guards: {
    doesImageCrashOnBoot: (_, boot: BootResult) => boot.crashesOnBoot,
    isUnprovisioned: (_, boot: BootResult) => !boot.provisioned,
    didInstallSucceed: (_, boot: BootResult) => boot.install !== null && boot.install.version === boot.version,
    wasInstallInterrupted: (_, boot: BootResult) => boot.install !== null,
    isOnExternalPower: ({ context }) => context.battery.externalPower,
    isContactDue: ({ context }) => context.contactDue,
    isUnauthorized: (_, answer: CheckAnswer | SyncAnswer) => answer.kind === "unauthorized",
    isOfferInstallable: ({ context }, answer: CheckAnswer) => answer.kind === "offer" && offerProblem(answer.offer, context.running!.version) === null,
    isCheckFailed: (_, answer: CheckAnswer) => answer.kind === "failed",
    isBatteryOkForInstall: ({ context }) => context.battery.volts >= MIN_INSTALL_VOLTS || context.battery.charging,
    isImageIntact: ({ context }, params: { md5: string }) => params.md5 === context.offer?.md5,
    isSignedImageIntact: ({ context }, params: { md5: string }) => params.md5 === context.offer?.md5 && context.trustedKeyIds.length > 0,
    isOfferSignatureUnusable: ({ context }) => signatureProblem(context.offer!, context.trustedKeyIds) !== null,
    isSignatureValid: (_, problem: string | null) => problem === null,
    isDownloadUnauthorized: (_, params: { status: number | null }) => params.status === 401,
    isSynced: (_, answer: SyncAnswer) => answer.kind === "synced",
  },
}).createMachine({
  id: "badge",
  initial: "booting",
  context: ({ input }) => ({ battery: input.battery, running: null, contactDue: false, offer: null, received: 0, notice: null, trustedKeyIds: [] }),
  on: {
    "battery.changed": { actions: { type: "rememberBattery", params: ({ event }) => event } },
    "power.plugged": { actions: { type: "rememberBattery", params: ({ event }) => event } },
    "power.unplugged": { actions: { type: "rememberBattery", params: ({ event }) => event } },
  },
  states: {
    booting: {
      invoke: {
        id: "boot",
        src: "boot",
        onDone: [
          {
            guard: { type: "doesImageCrashOnBoot", params: ({ event }) => event.output },
            target: "bricked",
            actions: { type: "rememberBoot", params: ({ event }) => event.output },
          },
          {
            guard: { type: "isUnprovisioned", params: ({ event }) => event.output },
            target: "unprovisioned",
            actions: { type: "rememberBoot", params: ({ event }) => event.output },
          },
          {
            guard: { type: "didInstallSucceed", params: ({ event }) => event.output },
            target: "awake",
            actions: [
              { type: "rememberBoot", params: ({ event }) => event.output },
              { type: "storeReport", params: ({ event }) => ({ report: okReport(event.output.version) }) },
              { type: "notify", params: ({ event }) => ({ text: `Updated to ${event.output.version}` }) },
            ],
          },
          {
            guard: { type: "wasInstallInterrupted", params: ({ event }) => event.output },
            target: "awake",
            actions: [
              { type: "rememberBoot", params: ({ event }) => event.output },
              { type: "storeReport", params: ({ event }) => ({ report: interruptedReport(event.output) }) },
              { type: "notify", params: ({ event }) => ({ text: reportNotice(interruptedReport(event.output), event.output.version) }) },
            ],
          },
          { target: "awake", actions: { type: "rememberBoot", params: ({ event }) => event.output } },
        ],
      },
    },
    awake: {
      initial: "opportunity",
      after: { [SLEEP_AFTER_MS]: "asleep" },
      on: {
        "menu.checkForUpdate": [{ guard: "isOnExternalPower", target: "#badge.online.checking" }, { target: ".plugInPrompt", reenter: true }],
        "menu.syncNow": [{ guard: "isOnExternalPower", target: "#badge.online.syncing" }, { target: ".plugInPrompt", reenter: true }],
        "button.press": { target: ".idle", reenter: true },
        "card.tap": {
          target: ".idle",
          reenter: true,
          actions: [
            { type: "queueTap", params: ({ event }) => event },
            { type: "notify", params: ({ event }) => ({ text: `Card ${event.uid} saved` }) },
          ],
        },
        "power.plugged": { target: ".opportunity", reenter: true, actions: { type: "rememberBattery", params: ({ event }) => event } },
      },
      states: {
        /** A chance to reach the server on the badge's own account: boot, or being plugged in. */
        opportunity: {
          always: [{ guard: and(["isOnExternalPower", "isContactDue"]), target: "#badge.online.syncing" }, { target: "idle" }],
        },
        idle: {},
        plugInPrompt: {},
      },
    },
    online: {
      initial: "syncing",
      on: { "card.tap": { actions: { type: "queueTap", params: ({ event }) => event } } },
      states: {
        syncing: {
          invoke: {
            id: "sync",
            src: "sync",
            onDone: [
              {
                guard: { type: "isUnauthorized", params: ({ event }) => event.output },
                target: "#badge.unprovisioned",
                actions: "forgetToken",
              },
              {
                guard: { type: "isSynced", params: ({ event }) => event.output },
                target: "#badge.awake.idle",
                actions: [{ type: "applySync", params: ({ event }) => ({ answer: event.output as Extract<SyncAnswer, { kind: "synced" }> }) }, "markContacted"],
              },
              {
                target: "#badge.awake.idle",
                actions: [
                  { type: "rememberContactFailure", params: ({ event }) => ({ recheckAfterS: recheckOf(event.output) }) },
                  "markContacted",
                  { type: "notify", params: ({ event }) => ({ text: `Sync failed: ${(event.output as Extract<SyncAnswer, { kind: "failed" }>).message}` }) },
                ],
              },
            ],
          },
          on: {
            "power.unplugged": {
              target: "#badge.awake.idle",
              actions: [{ type: "rememberBattery", params: ({ event }) => event }, { type: "notify", params: { text: "Unplugged: radio off, sync stopped" } }],
            },
          },
        },
        checking: {
          invoke: {
            id: "check",
            src: "check",
            onDone: [
              {
                guard: { type: "isUnauthorized", params: ({ event }) => event.output },
                target: "#badge.unprovisioned",
                actions: "forgetToken",
              },
              {
                guard: { type: "isOfferInstallable", params: ({ event }) => event.output },
                target: "offered",
                actions: [
                  { type: "rememberCheck", params: ({ event }) => ({ recheckAfterS: recheckOf(event.output) }) },
                  { type: "rememberOffer", params: ({ event }) => ({ offer: (event.output as Extract<CheckAnswer, { kind: "offer" }>).offer }) },
                ],
              },
              {
                guard: { type: "isCheckFailed", params: ({ event }) => event.output },
                target: "#badge.awake.idle",
                actions: [
                  { type: "rememberContactFailure", params: ({ event }) => ({ recheckAfterS: recheckOf(event.output) }) },
                  { type: "notify", params: ({ context, event }) => ({ text: checkNotice(event.output, context) }) },
                ],
              },
              // already current, refused, or an offer the badge will not install now
              {
                target: "#badge.awake.idle",
                actions: [
                  { type: "rememberCheck", params: ({ event }) => ({ recheckAfterS: recheckOf(event.output) }) },
                  { type: "notify", params: ({ context, event }) => ({ text: checkNotice(event.output, context) }) },
                ],
              },
            ],
          },
          on: {
            "power.unplugged": {
              target: "#badge.awake.idle",
              actions: [{ type: "rememberBattery", params: ({ event }) => event }, { type: "notify", params: { text: "Unplugged: radio off, update check stopped" } }],
            },
          },
        },
        /** The badge's own battery gate: it holds even when the server offered. */
        offered: {
          always: [
            {
              guard: "isOfferSignatureUnusable",
              target: "#badge.updateFailed",
              actions: { type: "notify", params: ({ context }) => ({ text: signatureProblem(context.offer!, context.trustedKeyIds) }) },
            },
            { guard: "isBatteryOkForInstall", target: "downloading", actions: { type: "notify", params: { text: null } } },
            {
              target: "#badge.awake.idle",
              actions: {
                type: "notify",
                params: ({ context }) => ({ text: `Update ${context.offer!.version} needs ${MIN_INSTALL_VOLTS} V or charging (battery at ${context.battery.volts.toFixed(2)} V)` }),
              },
            },
          ],
        },
        downloading: {
          invoke: { id: "download", src: "download", input: ({ context }) => context.offer! },
          on: {
            "download.progress": { actions: { type: "rememberProgress", params: ({ event }) => event } },
            // Resuming a cut download (issue 23): the state stays `downloading`, whose path the
            // C badge prints too; what changes is where the bytes start.
            "download.resumed": {
              actions: [
                { type: "rememberProgress", params: ({ event }) => event },
                { type: "notify", params: ({ context, event }) => ({ text: `Resuming at ${progressText(event.bytes, context.offer!.size)}` }) },
              ],
            },
            "download.restarted": {
              actions: [{ type: "rememberProgress", params: { bytes: 0 } }, { type: "notify", params: ({ event }) => ({ text: event.reason }) }],
            },
            "download.busy": {
              target: "#badge.awake.idle",
              actions: [
                { type: "rememberContactFailure", params: ({ event }) => ({ recheckAfterS: event.retryAfterS }) },
                { type: "notify", params: ({ event }) => ({ text: `Server busy: the update continues in ${event.retryAfterS} s` }) },
              ],
            },
            "download.finished": [
              { guard: { type: "isSignedImageIntact", params: ({ event }) => event }, target: "verifying" },
              { guard: { type: "isImageIntact", params: ({ event }) => event }, target: "switching" },
              {
                target: "#badge.updateFailed",
                actions: { type: "notify", params: ({ context, event }) => ({ text: `MD5 mismatch: the image gives ${event.md5}, the offer said ${context.offer!.md5}` }) },
              },
            ],
            "download.failed": [
              {
                guard: { type: "isDownloadUnauthorized", params: ({ event }) => event },
                target: "#badge.updateFailed",
                actions: ["forgetToken", { type: "notify", params: ({ event }) => ({ text: event.reason }) }],
              },
              { target: "#badge.updateFailed", actions: { type: "notify", params: ({ event }) => ({ text: event.reason }) } },
            ],
            "power.unplugged": {
              target: "#badge.updateFailed",
              actions: [
                { type: "rememberBattery", params: ({ event }) => event },
                { type: "notify", params: ({ context }) => ({ text: `external power removed during download at ${progressText(context.received, context.offer!.size)}` }) },
              ],
            },
          },
        },
        /** A badge holding release keys checks the signature over the whole image before it switches. */
        verifying: {
          invoke: {
            id: "verifySignature",
            src: "verifySignature",
            input: ({ context }) => context.offer!,
            onDone: [
              { guard: { type: "isSignatureValid", params: ({ event }) => event.output }, target: "switching" },
              { target: "#badge.updateFailed", actions: { type: "notify", params: ({ event }) => ({ text: event.output }) } },
            ],
          },
        },
        switching: {
          invoke: { id: "switchBootSlot", src: "switchBootSlot", input: ({ context }) => context.offer!, onDone: "#badge.restarting" },
        },
      },
    },
    /** Says why on screen, stores the `ota=err` report, then restarts on the firmware it runs. */
    updateFailed: {
      entry: [
        { type: "storeReport", params: ({ context }) => ({ report: errorReport(context.offer!.version, context.notice!) }) },
        { type: "rememberContactFailure", params: { recheckAfterS: null } },
      ],
      after: { [FAILURE_SCREEN_MS]: "restarting" },
      on: { "card.tap": { actions: { type: "queueTap", params: ({ event }) => event } } },
    },
    asleep: {
      on: {
        "button.press": "wakingUp",
        "card.tap": { target: "wakingUp", actions: { type: "queueTap", params: ({ event }) => event } },
        "power.plugged": "wakingUp",
      },
    },
    unprovisioned: {
      after: { [SLEEP_AFTER_MS]: "asleep" },
    },
    /** The new image verified and was switched to, but crashes as it starts: no rollback, so it stays. */
    bricked: {},
    restarting: { type: "final" },
    wakingUp: { type: "final" },
  },
});

export type BadgeSnapshot = SnapshotFrom<typeof badgeMachine>;

/** Paths already written out, by the state value they are of: a snapshot's value is never changed, and the screen asks again at every percent of a download. */
const statePaths = new WeakMap<object, string>();

/** `awake.idle` for `{ awake: "idle" }`. */
export function statePath(value: StateValue): string {
  if (typeof value === "string") return value;
  let path = statePaths.get(value);
  if (path === undefined) {
    path = Object.entries(value)
      .map(([key, child]) => (child === undefined ? key : `${key}.${statePath(child)}`))
      .join(",");
    statePaths.set(value, path);
  }
  return path;
}

/** A screen's title line, then the notice under it if there is one. */
function titleWithNotice(title: string, notice: string | null): string {
  return notice ? `${title}\n${notice}` : title;
}

/**
 * What the badge's screen shows in a state: a title line, then the notice if there is one.
 * `downloaded`: the image bytes written, when the caller knows more than the machine's last
 * `download.progress` (the virtual badge feeds the screen without an event per percent).
 */
export function screenOf(snapshot: BadgeSnapshot, downloaded: number | null = null): string {
  const { context } = snapshot;
  const running = context.running?.version ?? "";
  const offer = context.offer;
  switch (statePath(snapshot.value)) {
    case "booting":
      return "Starting...";
    case "awake.opportunity":
    case "awake.idle":
      return titleWithNotice(`Badge ${running} - ready`, context.notice);
    case "awake.plugInPrompt":
      return "Plug in to reach the server\nThe radio only works on external power";
    case "online.syncing":
      return titleWithNotice("Syncing...", context.notice);
    case "online.checking":
    case "online.offered":
      return "Checking for update...";
    case "online.downloading":
      // A resume's notice ("Resuming at 75%", or why it starts over) stays under the progress.
      return `Updating to ${offer!.version}\nDownloading ${progressText(downloaded ?? context.received, offer!.size)}${context.notice ? `\n${context.notice}` : ""}`;
    case "online.verifying":
      return `Updating to ${offer!.version}\nChecking the signature`;
    case "online.switching":
      return `Updating to ${offer!.version}\nInstalling, keep the badge plugged in`;
    case "updateFailed":
      return `Update to ${offer!.version} failed\n${context.notice}\nRestarting on ${running}`;
    case "asleep":
      return "";
    case "unprovisioned":
      return "Not provisioned\nThis badge has no device token; ask IT to set it up again";
    case "bricked":
      return `Firmware ${running} crashes at start\nRecovery: reflash over USB`;
    case "restarting":
    case "wakingUp":
      return "Restarting...";
    default:
      return "";
  }
}
