// The fault sweep (issue 4 item 8): one update attempt of a fresh virtual badge under one fault,
// at one byte offset, on one battery, against a real server, and the invariants it must keep.
// The cases themselves are generated elsewhere (sweep-cases.ts beside it, with fast-check); this
// module is runtime code: it plays a case, observes what happened, derives what should have
// happened from the case alone, and names every invariant that did not hold.
//
// A case: Tools > Check for Update on a badge at SWEEP_FACTORY_VERSION that has just booted
// (and, on external power, made its first sync), then time runs until nothing more will happen
// without an outside event. The server offers `release`; a network fault is played by a fault
// proxy between the badge and the server, a power fault by the virtual battery, and a
// crash-on-boot fault is the offered release itself.
import { performance } from "node:perf_hooks";
import { buildAppImage, errorReport, md5Hex, MIN_INSTALL_VOLTS, okReport } from "../../firmware/index.ts";
import { progressText } from "../model/badge-machine.ts";
import { CHECKPOINT_BYTES } from "../model/badge-storage.ts";
import type { Fault } from "../network/fault-proxy/faults.ts";
import { startFaultProxy, type FaultProxy } from "../network/fault-proxy/proxy.ts";
import { v1Client } from "../network/v1-client.ts";
import { Battery, type BrownoutPoint, type SwitchStep } from "../hardware/battery.ts";
import type { SlotName } from "../hardware/otadata.ts";
import { createVirtualBadge, type VirtualBadge } from "../virtual-badge/virtual-badge.ts";

/** The version every sweep badge is flashed with at the factory (ota_0). */
export const SWEEP_FACTORY_VERSION = "1.4.0";
/**
 * A small image keeps a case fast; 128 KiB (not 64) so that the download crosses a progress
 * checkpoint (CHECKPOINT_BYTES) before its end and a brownout report can say more than 0%.
 */
export const DEFAULT_SWEEP_IMAGE_BYTES = 128 * 1024;
/**
 * The badge's stall timeout in the sweep. Its stalls run on the simulated clock (the case's fault
 * proxy tells the badge when it holds the connection silent), so this costs no wall time.
 */
export const DEFAULT_SWEEP_STALL_TIMEOUT_MS = 200;
/**
 * The wall clock's stall backstop in the sweep: long, because every stall of a case is found on
 * the simulated clock, and with the badge's own 200 ms on the wall too a busy machine's slow
 * check or sync answer was taken for a stall, and the case failed an invariant it kept.
 */
const SWEEP_WALL_STALL_BACKSTOP_MS = 60_000;
/** The X line the fault proxy answers a status fault with on the badge endpoints. */
const PROXY_REFUSAL = "server_error injected by the fault proxy";
/** Simulated ms a case may take before it counts as hung (a full update is well under a minute). */
const CASE_LIMIT_MS = 3600_000;

export const SWEEP_FAULT_KINDS = [
  "none",
  "brownout-download",
  "brownout-switch",
  "drop",
  "corrupt",
  "stall",
  "http-5xx",
  "crash-on-boot",
] as const;

export type SweepFaultKind = (typeof SWEEP_FAULT_KINDS)[number];

/**
 * The one thing that goes wrong. Byte offsets count image bytes (download body bytes) from 0
 * and lie inside the image: `0 <= atByte < release.size`.
 */
export type SweepFault =
  | { kind: "none" }
  /** the power dies with exactly `atByte` image bytes written to the inactive slot */
  | { kind: "brownout-download"; atByte: number }
  /** the power dies during the otadata switch */
  | { kind: "brownout-switch"; step: SwitchStep }
  /** the proxy cuts the connection after `atByte` body bytes */
  | { kind: "drop"; atByte: number }
  /** the proxy flips bits of body byte `atByte` */
  | { kind: "corrupt"; atByte: number }
  /** the proxy stops sending after `atByte` body bytes, until the badge gives up */
  | { kind: "stall"; atByte: number }
  /** the proxy answers the download with this 5xx status, without asking the server */
  | { kind: "http-5xx"; status: number }
  /** the release offered crashes as it starts (the caller publishes such a release for the case) */
  | { kind: "crash-on-boot" };

export interface SweepCase {
  fault: SweepFault;
  /** the cell's volts at power-on (3.0 to 4.25) */
  volts: number;
  /** charging implies external power */
  charging: boolean;
  /** USB power: the radio works only with it */
  externalPower: boolean;
}

/** The release the server offers the case's device. */
export interface SweepRelease {
  version: string;
  size: number;
  md5: string;
  crashOnBoot: boolean;
}

export interface SweepOptions {
  /** the server itself (a fault proxy is put in front of it when the fault is a network one) */
  serverUrl: string;
  /** the device's token; one fresh device per case */
  token: string;
  deviceId: string;
  /** a key with devices:read, for GET /v1/devices/{id} */
  apiKey: string;
  release: SweepRelease;
  /** the badge's stall timeout, wall ms (default DEFAULT_SWEEP_STALL_TIMEOUT_MS) */
  stallTimeoutMs?: number;
}

/** What the case should come to, derived from the case (and the release) alone. */
export interface SweepExpectation {
  /** why, in a few words: no radio, the battery gate, or the install and how it ends */
  path: string;
  /** image downloads the badge starts: 1 when it installs, else 0 */
  downloads: number;
  /** the `ota=` report the server holds at the end (raw form); null: none ever reaches it */
  report: string | RegExp | null;
  /** the version that runs at the end */
  runs: string;
  bricked: boolean;
}

/** What happened, from the badge's observation log, its flash and NVS, and the server's device view. */
export interface SweepObserved {
  /** the machine's state at rest (`asleep`, `bricked`, ...) */
  state: string;
  runningVersion: string | null;
  runningSlot: SlotName | null;
  /** which image the running slot holds, by the MD5 of its bytes: the factory image, the offered one, or neither */
  runningImage: "factory" | "offered" | "other";
  /** the MD5 of the running slot's first release.size bytes (what the offered image would give) */
  runningSlotMd5: string;
  /** every boot of the offered version: its slot and the MD5 of that slot's first release.size bytes (a slot that runs is never written) */
  releaseBoots: Array<{ t: number; slot: SlotName; md5: string }>;
  /** every image download: the slot that ran when it started, and the badge's erases and writes to that slot until the next boot */
  downloads: Array<{ t: number; runningSlot: SlotName; writesToRunningSlot: number }>;
  /** reports in the order the badge stored them in NVS (`report.stored`) */
  reportsStored: Array<{ t: number; report: string }>;
  /** reports the server echoed (`report.cleared`): it stored them */
  reportsCleared: Array<{ t: number; report: string }>;
  /** the report still in NVS at the end */
  pendingReport: string | null;
  /** the server's `firmware.last_report`, raw form (`ok|1.5.0`, `err|1.5.0|why`); null: none */
  serverReport: string | null;
  /** whether the radio could work at the end (powered and on external power) */
  radio: boolean;
  powerLosses: number;
  /** from Check for Update to rest */
  simulatedMs: number;
  wallMs: number;
  /** the simulation or the server query failed: the case could not be played out */
  error: string | null;
}

export interface SweepResult {
  case: SweepCase;
  release: SweepRelease;
  stallTimeoutMs: number;
  expected: SweepExpectation;
  observed: SweepObserved;
  /** invariantViolations() of this result: empty when every invariant held */
  violations: string[];
}

/** One line for logs and failure messages. */
export function describeCase(c: SweepCase): string {
  const f = c.fault;
  const fault =
    f.kind === "none" || f.kind === "crash-on-boot"
      ? f.kind
      : f.kind === "brownout-switch"
        ? `${f.kind} ${f.step}`
        : f.kind === "http-5xx"
          ? `${f.kind} ${f.status}`
          : `${f.kind} at byte ${f.atByte}`;
  const power = c.charging ? "charging" : c.externalPower ? "USB, not charging" : "battery only";
  return `${fault}, ${c.volts.toFixed(3)} V, ${power}`;
}

/** Throws a TypeError naming what makes no sense in this case for this release. */
export function checkSweepCase(c: SweepCase, release: SweepRelease): void {
  const problems: string[] = [];
  if (!(Number.isFinite(c.volts) && c.volts >= 3.0 && c.volts <= 4.25)) problems.push(`volts ${c.volts} must be from 3.0 to 4.25`);
  if (c.charging && !c.externalPower) problems.push("charging needs external power");
  const f = c.fault;
  if (!SWEEP_FAULT_KINDS.includes(f.kind)) problems.push(`fault kind ${JSON.stringify(f.kind)} is not one of ${SWEEP_FAULT_KINDS.join(", ")}`);
  if ("atByte" in f && !(Number.isInteger(f.atByte) && f.atByte >= 0 && f.atByte < release.size)) {
    problems.push(`${f.kind} atByte ${f.atByte} must be a byte of the ${release.size}-byte image (0 to ${release.size - 1})`);
  }
  if (f.kind === "brownout-switch" && !["after-erase", "mid-write", "before-restart"].includes(f.step)) problems.push(`switch step ${JSON.stringify(f.step)}`);
  if (f.kind === "http-5xx" && !(Number.isInteger(f.status) && f.status >= 500 && f.status <= 599)) problems.push(`status ${f.status} is not a 5xx`);
  if (release.crashOnBoot !== (f.kind === "crash-on-boot")) {
    problems.push(`the release ${release.version} ${release.crashOnBoot ? "crashes on boot" : "does not crash on boot"} but the fault is ${f.kind}`);
  }
  if (problems.length > 0) throw new TypeError(`sweep case ${describeCase(c)}: ${problems.join("; ")}`);
}

/**
 * The volts the badge's install gate reads: the cell at power-on less what the two request
 * bursts before it drain when not charging (the first sync at boot, then the check). Replayed
 * on a virtual battery, as the machine hears it: a reading reaches the machine only when the
 * millivolts move.
 */
export function voltsAtInstallGate(c: SweepCase): number {
  const battery = new Battery({ volts: c.volts, charging: c.charging, externalPower: c.externalPower });
  let heard = battery.reading().volts;
  battery.onEvent((event) => {
    if (event.type === "reading") heard = event.reading.volts;
  });
  battery.drain("perRequest"); // the sync at boot: a fresh device's first contact is due
  battery.drain("perRequest"); // the update check
  return heard;
}

/** What the case should come to: from the case, the release and the stall timeout only. */
export function expectedOutcome(c: SweepCase, release: SweepRelease, stallTimeoutMs: number): SweepExpectation {
  const v = release.version;
  const nothing = (path: string): SweepExpectation => ({ path, downloads: 0, report: null, runs: SWEEP_FACTORY_VERSION, bricked: false });
  if (!c.externalPower) return nothing("no external power: no radio, the check never leaves the badge");
  if (!c.charging && voltsAtInstallGate(c) < MIN_INSTALL_VOLTS) {
    return nothing(`battery gate: ${voltsAtInstallGate(c).toFixed(4)} V at the gate is below ${MIN_INSTALL_VOLTS} V and not charging`);
  }
  const failed = (path: string, message: string | RegExp): SweepExpectation => ({
    path,
    downloads: 1,
    report: typeof message === "string" ? errorReport(v, message) : new RegExp(`^err\\|${escape(v)}\\|${message.source}$`),
    runs: SWEEP_FACTORY_VERSION,
    bricked: false,
  });
  const installed: SweepExpectation = { path: "installed", downloads: 1, report: okReport(v), runs: v, bricked: false };
  const f = c.fault;
  const S = release.size;
  switch (f.kind) {
    case "none":
      return installed;
    case "brownout-download": {
      // progress is recorded in NVS every CHECKPOINT_BYTES: the report says the last checkpoint
      const recorded = Math.floor(f.atByte / CHECKPOINT_BYTES) * CHECKPOINT_BYTES;
      return failed("power lost during the download", `power lost during download after ${progressText(recorded, S)}`);
    }
    case "brownout-switch":
      // the new otadata entry is whole only before the restart; then the new image boots
      return f.step === "before-restart"
        ? { ...installed, path: "power lost after the switch: the new image boots" }
        : failed("power lost during the switch: the old image boots", "power lost during the partition switch");
    case "drop":
      return failed("connection dropped", `download cut at ${progressText(f.atByte, S)}`);
    case "corrupt":
      // the badge's MD5 of what it received; any MD5 but the offer's
      return failed("one byte corrupted", new RegExp(`MD5 mismatch: the image gives (?!${release.md5})[0-9a-f]{32}, the offer said ${release.md5}`));
    case "stall":
      return failed("stalled", `download stalled at ${progressText(f.atByte, S)}: no data for ${stallTimeoutMs} ms`);
    case "http-5xx":
      return failed("download refused", `download refused: HTTP ${f.status} ${PROXY_REFUSAL}`);
    case "crash-on-boot":
      // the MD5 matches, the switch completes, the image crashes as it starts: no rollback, and
      // the firmware that would send the report never runs
      return { path: "bricked by a crash-on-boot image: no report can be sent", downloads: 1, report: null, runs: v, bricked: true };
  }
}

const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

function reportMatches(actual: string | null, expected: string | RegExp | null): boolean {
  if (expected === null || actual === null) return actual === expected;
  return typeof expected === "string" ? actual === expected : expected.test(actual);
}

const show = (report: string | RegExp | null) => (report === null ? "none" : typeof report === "string" ? JSON.stringify(report) : String(report));

/**
 * The invariants, each violation as a sentence; empty when all hold. The expectation is derived
 * again from the case, so a result whose observations were tampered with is judged on them.
 */
export function invariantViolations(result: Pick<SweepResult, "case" | "release" | "stallTimeoutMs" | "observed">): string[] {
  const { release, observed: o } = result;
  const expected = expectedOutcome(result.case, release, result.stallTimeoutMs);
  const violations: string[] = [];
  if (o.error !== null) violations.push(`the case could not be played out: ${o.error}`);

  // 1. The badge runs an image whose MD5 matched (or the factory's), unless it crashes on boot.
  if (o.runningImage === "other") {
    violations.push(`running image: ${o.runningSlot} holds neither the factory image nor the offered one (its first ${release.size} bytes give ${o.runningSlotMd5})`);
  } else {
    const version = o.runningImage === "factory" ? SWEEP_FACTORY_VERSION : release.version;
    if (o.runningVersion !== version) violations.push(`running image: ${o.runningSlot} holds the ${o.runningImage} image (${version}) but ${o.runningVersion} is running`);
  }
  const bricked = o.state === "bricked";
  if (bricked && !(o.runningImage === "offered" && release.crashOnBoot)) {
    violations.push(`running image: the badge is bricked running ${o.runningVersion}, which is not a crash-on-boot image whose MD5 matched`);
  }
  if (!bricked && o.runningImage === "offered" && release.crashOnBoot) violations.push("running image: a crash-on-boot image runs without crashing");

  // 5. No badge ever boots an image whose bytes differ from the release (issue 23: a resume that
  // appended a 200's body, or hashed on from the wrong state, would boot such an image).
  for (const boot of o.releaseBoots) {
    if (boot.md5 !== release.md5) violations.push(`booted a corrupt release: ${boot.slot} booted as ${release.version} at ${boot.t} ms, but its bytes give ${boot.md5}, not ${release.md5}`);
  }

  // 2. The slot that ran when a download started is never erased or written by it.
  for (const download of o.downloads) {
    if (download.writesToRunningSlot > 0) {
      violations.push(`running slot written: ${download.writesToRunningSlot} erase/write(s) to ${download.runningSlot}, the running slot, during the download started at ${download.t} ms`);
    }
  }

  // 3. The report the server holds, and what runs, match what the case should come to.
  if (!reportMatches(o.serverReport, expected.report)) {
    violations.push(`report: the server holds ${show(o.serverReport)}; the case (${expected.path}) expects ${show(expected.report)}`);
  }
  if (o.runningVersion !== expected.runs || bricked !== expected.bricked) {
    violations.push(`outcome: ${o.runningVersion} runs${bricked ? ", bricked" : ""}; the case (${expected.path}) expects ${expected.runs}${expected.bricked ? ", bricked" : ""}`);
  }
  if (o.downloads.length !== expected.downloads) {
    violations.push(`outcome: ${o.downloads.length} download(s) started; the case (${expected.path}) expects ${expected.downloads}`);
  }
  if (o.serverReport !== null) {
    const [outcome, version] = o.serverReport.split("|");
    const runs = outcome === "ok" ? version : SWEEP_FACTORY_VERSION;
    if (o.runningVersion !== runs) violations.push(`report: the server holds ${show(o.serverReport)} but ${o.runningVersion} runs`);
  }
  if (o.radio && o.pendingReport !== null) violations.push(`report: ${show(o.pendingReport)} is still pending in NVS although the radio works`);

  // 4. No report is lost across brownouts: each one stored reaches the server or is still pending.
  o.reportsStored.forEach(({ t, report }, i) => {
    const delivered = o.reportsCleared.some((cleared) => cleared.report === report && cleared.t >= t);
    const pending = i === o.reportsStored.length - 1 && o.pendingReport === report;
    if (!delivered && !pending) violations.push(`report lost: ${show(report)}, stored at ${t} ms, neither reached the server nor is pending in NVS`);
  });
  const lastDelivered = o.reportsCleared.at(-1)?.report ?? null;
  if (lastDelivered !== null && o.serverReport !== lastDelivered) {
    violations.push(`report: the server echoed ${show(lastDelivered)} but holds ${show(o.serverReport)}`);
  }
  return violations;
}

/** Plays one case on a fresh virtual badge against the server and judges it. */
export async function runSweepCase(c: SweepCase, options: SweepOptions): Promise<SweepResult> {
  const { release } = options;
  const stallTimeoutMs = options.stallTimeoutMs ?? DEFAULT_SWEEP_STALL_TIMEOUT_MS;
  checkSweepCase(c, release);
  const networkFault = proxyFault(c.fault);
  const brownout = brownoutPoint(c.fault);
  const proxy: FaultProxy | null = networkFault ? await startFaultProxy({ target: options.serverUrl, faults: [networkFault] }) : null;
  let badge: VirtualBadge | null = null;
  let error: string | null = null;
  let simStart = 0;
  let wallStart = performance.now();
  let wallMs = 0;
  let atRest = { state: "off", radio: false };
  try {
    badge = createVirtualBadge({
      serverUrl: proxy?.url ?? options.serverUrl,
      token: options.token,
      version: SWEEP_FACTORY_VERSION,
      battery: { volts: c.volts, charging: c.charging, externalPower: c.externalPower },
      faults: brownout ? { brownout } : undefined,
      // the proxy says when it holds a stalled connection: the stall then runs on the simulated clock
      network: { stallTimeoutMs, wallStallTimeoutMs: Math.max(stallTimeoutMs, SWEEP_WALL_STALL_BACKSTOP_MS), silentPeers: proxy ?? undefined },
    });
    await badge.runUntilState("awake.idle", { withinMs: CASE_LIMIT_MS });
    simStart = badge.clock.now();
    wallStart = performance.now();
    badge.checkForUpdate();
    await badge.runUntilIdle({ withinMs: CASE_LIMIT_MS });
  } catch (caught) {
    error = caught instanceof Error ? caught.message : String(caught);
  } finally {
    wallMs = performance.now() - wallStart;
    if (badge) atRest = { state: badge.state(), radio: badge.radio.isUp };
    badge?.stop();
    await proxy?.close();
  }
  let serverReport: string | null = null;
  try {
    serverReport = await lastReportOf(options);
  } catch (caught) {
    error ??= `GET /v1/devices/${options.deviceId}: ${caught instanceof Error ? caught.message : String(caught)}`;
  }
  const observed = badge ? observe(badge, release, { ...atRest, serverReport, error, simStart, wallMs }) : failedBeforeBadge(error, serverReport);
  const partial = { case: c, release, stallTimeoutMs, observed };
  return { ...partial, expected: expectedOutcome(c, release, stallTimeoutMs), violations: invariantViolations(partial) };
}

function proxyFault(fault: SweepFault): Fault | null {
  switch (fault.kind) {
    case "drop":
    case "corrupt":
    case "stall":
      return { kind: fault.kind, atByte: fault.atByte };
    case "http-5xx":
      return { kind: "status", code: fault.status };
    default:
      return null;
  }
}

function brownoutPoint(fault: SweepFault): BrownoutPoint | null {
  if (fault.kind === "brownout-download") return { atDownloadByte: fault.atByte };
  if (fault.kind === "brownout-switch") return { duringSwitch: fault.step };
  return null;
}

async function lastReportOf(options: SweepOptions): Promise<string | null> {
  const api = v1Client(options.serverUrl, options.apiKey);
  const { data, response } = await api.GET("/v1/devices/{id}", { params: { path: { id: options.deviceId } } });
  if (!data) throw new Error(`HTTP ${response.status}`);
  const report = data.firmware.last_report;
  if (report === null) return null;
  return report.outcome === "ok" ? okReport(report.version) : errorReport(report.version, report.message ?? "");
}

const factoryImages = new Map<string, { md5: string; length: number }>();

function factoryImage(version: string): { md5: string; length: number } {
  let image = factoryImages.get(version);
  if (!image) {
    const bytes = buildAppImage({ version }); // what createVirtualBadge flashes into ota_0
    image = { md5: md5Hex(bytes), length: bytes.length };
    factoryImages.set(version, image);
  }
  return image;
}

/**
 * MD5s of slot contents by SlotPages fingerprint (equal fingerprints, equal bytes): hashing the
 * factory image and the release every case holds again for each case was a twentieth of its time.
 */
const md5sByFingerprint = new Map<string, string>();

/** The MD5 of a slot's first `length` bytes. */
function slotMd5(badge: VirtualBadge, slot: SlotName, length: number): string {
  const fingerprint = badge.flash.slotFingerprint(slot, length);
  let md5 = fingerprint === null ? undefined : md5sByFingerprint.get(fingerprint);
  if (md5 === undefined) {
    md5 = md5Hex(badge.flash.peekSlot(slot, 0, length));
    if (md5sByFingerprint.size >= 256) md5sByFingerprint.clear();
    if (fingerprint !== null) md5sByFingerprint.set(fingerprint, md5);
  }
  return md5;
}

function observe(
  badge: VirtualBadge,
  release: SweepRelease,
  run: { state: string; radio: boolean; serverReport: string | null; error: string | null; simStart: number; wallMs: number },
): SweepObserved {
  const slot = badge.runningSlot();
  const factory = factoryImage(SWEEP_FACTORY_VERSION);
  const runningSlotMd5 = slot ? slotMd5(badge, slot, release.size) : md5Hex(new Uint8Array(0));
  const runningImage = !slot ? "other" : slotMd5(badge, slot, factory.length) === factory.md5 ? "factory" : runningSlotMd5 === release.md5 ? "offered" : "other";

  const boots = badge.observations("boot");
  const downloads = badge
    .observations("request")
    .filter((o) => o.detail.startsWith("GET "))
    .map(({ t }) => {
      const bootBefore = boots.filter((b) => b.t <= t).at(-1);
      const runningSlot = (bootBefore?.detail.split(" ")[0] ?? "ota_0") as SlotName;
      const until = boots.find((b) => b.t > t)?.t ?? Infinity;
      const writesToRunningSlot = badge.flash.writesTo(runningSlot).filter((op) => op.t >= t && op.t < until).length;
      return { t, runningSlot, writesToRunningSlot };
    });
  const entries = (kind: "report.stored" | "report.cleared") => badge.observations(kind).map(({ t, detail }) => ({ t, report: detail }));
  const releaseBoots = boots
    .map(({ t, detail }) => ({ t, slot: detail.split(" ")[0] as SlotName, version: detail.split(" ")[1] }))
    .filter((boot) => boot.version === release.version)
    .map(({ t, slot }) => ({ t, slot, md5: slotMd5(badge, slot, release.size) }));
  return {
    state: run.state,
    runningVersion: badge.runningVersion(),
    runningSlot: slot,
    runningImage,
    runningSlotMd5,
    releaseBoots,
    downloads,
    reportsStored: entries("report.stored"),
    reportsCleared: entries("report.cleared"),
    pendingReport: badge.pendingReport(),
    serverReport: run.serverReport,
    radio: run.radio,
    powerLosses: badge.observations("power").filter((o) => o.detail.startsWith("lost")).length,
    simulatedMs: badge.clock.now() - run.simStart,
    wallMs: run.wallMs,
    error: run.error,
  };
}

function failedBeforeBadge(error: string | null, serverReport: string | null): SweepObserved {
  const nothing = { runningVersion: null, runningSlot: null, releaseBoots: [], downloads: [], reportsStored: [], reportsCleared: [], pendingReport: null };
  const why = error ?? "the virtual badge could not be made";
  return { ...nothing, state: "off", runningImage: "other", runningSlotMd5: "", serverReport, radio: false, powerLosses: 0, simulatedMs: 0, wallMs: 0, error: why };
}
