// The rules of a staged rollout (issue 24), pure so they read as what they are and are tested
// without a server:
// - a badge's place in every rollout is a stable hash of its id, a number in [0, 100): the same
//   badges form the first 5 % every time, and since stages only grow a badge never leaves a
//   stage it was in (stage i holds the badges whose place is below stages[i]);
// - a badge's outcome is its latest report of the version since its publish: `ok`,
//   `failed` (an `ota=err`, or no report at all `report_timeout_seconds` after the start of a
//   download that was not cut: a badge that bricked reports nothing), else `pending`. The time
//   runs from the start, which the server records as the request arrives; the end is recorded
//   after the last byte left, or never when the server stopped mid-send;
// - an open rollout halts when the failures not yet accepted by an operator reach
//   `halt_failures`, or `halt_failure_share` of the current stage's badges;
// - an active rollout advances when its stage is `min_stage_seconds` old and `min_ok_share` of
//   the stage's badges run the release (reported ok); past the last stage (100) it completes.
import { createHash } from "node:crypto";
import { z } from "zod";
import type { ReleaseRolloutsTable } from "../store/schema.ts";

export const MAX_STAGES = 10;
const MAX_MIN_STAGE_SECONDS = 30 * 24 * 3600;
const MIN_REPORT_TIMEOUT_SECONDS = 60;
const MAX_REPORT_TIMEOUT_SECONDS = 7 * 24 * 3600;

export const DEFAULT_ROLLOUT = {
  stages: [5, 25, 50, 100],
  min_stage_seconds: 3600,
  min_ok_share: 0.5,
  halt_failures: 5,
  halt_failure_share: 0.05,
  report_timeout_seconds: 1800,
};

const stagesSchema = z
  .array(z.number().int("must hold whole percentages").min(1, "must hold percentages from 1 to 100").max(100, "must hold percentages from 1 to 100 (none over 100)"))
  .min(1, "must hold at least one stage, ending at 100")
  .max(MAX_STAGES, `must hold at most ${MAX_STAGES} stages`)
  .refine((stages) => stages.every((percent, i) => i === 0 || percent > stages[i - 1]!), "must be strictly increasing (like [5, 25, 50, 100])")
  .refine((stages) => stages.at(-1) === 100, "must end at 100 (the whole fleet)");

/** A rollout's settings as POST /v1/rollouts and `release rollout create` take them. */
export const rolloutSettings = z.strictObject({
  version: z.string().min(1).max(40),
  stages: stagesSchema.optional().default(DEFAULT_ROLLOUT.stages),
  min_stage_seconds: z.number().int().min(0).max(MAX_MIN_STAGE_SECONDS).optional().default(DEFAULT_ROLLOUT.min_stage_seconds),
  min_ok_share: z.number().min(0).max(1).optional().default(DEFAULT_ROLLOUT.min_ok_share),
  halt_failures: z.number().int().min(1).max(1_000_000).optional().default(DEFAULT_ROLLOUT.halt_failures),
  halt_failure_share: z.number().gt(0).max(1).optional().default(DEFAULT_ROLLOUT.halt_failure_share),
  report_timeout_seconds: z.number().int().min(MIN_REPORT_TIMEOUT_SECONDS).max(MAX_REPORT_TIMEOUT_SECONDS).optional().default(DEFAULT_ROLLOUT.report_timeout_seconds),
});
export type RolloutSettings = z.output<typeof rolloutSettings>;

/** A badge's place in every rollout, in [0, 100): the first 32 bits of SHA-256 of its id. */
export function rolloutPlace(deviceId: string): number {
  return (createHash("sha256").update(deviceId).digest().readUInt32BE(0) / 2 ** 32) * 100;
}

export const stagesOf = (rollout: Pick<ReleaseRolloutsTable, "stages">): number[] => JSON.parse(rollout.stages) as number[];

/** Whether the badge is inside the rollout's current stage. */
export function inCurrentStage(rollout: Pick<ReleaseRolloutsTable, "stages" | "stage_index">, deviceId: string): boolean {
  return rolloutPlace(deviceId) < stagesOf(rollout)[rollout.stage_index]!;
}

/** A badge's outcome, and whether it fetched the image (a download started) since the publish. */
export type BadgeOutcome = ({ kind: "ok" } | { kind: "failed"; reason: string; at: string } | { kind: "pending" }) & { downloaded: boolean };

interface Report {
  device_id: string;
  outcome: "ok" | "err";
  message: string | null;
  received_at: string;
}
interface Fetch {
  device_id: string;
  outcome: string;
  started_at: string;
}

/** Each badge's outcome from the version's reports and fetches since its publish (both oldest first); badges absent did nothing yet. */
export function badgeOutcomes(reports: Report[], fetches: Fetch[], now: Date, reportTimeoutSeconds: number): Map<string, BadgeOutcome> {
  const outcomes = new Map<string, BadgeOutcome>();
  const fetched = new Set(fetches.map((fetch) => fetch.device_id));
  const lastReport = new Map<string, Report>();
  for (const report of reports) lastReport.set(report.device_id, report);
  const lastCompleted = new Map<string, Fetch>();
  for (const fetch of fetches) {
    // A fetch still `sending` counts: its end is recorded after the last byte left, or never.
    if (fetch.outcome !== "cut") lastCompleted.set(fetch.device_id, fetch);
    outcomes.set(fetch.device_id, { kind: "pending", downloaded: true });
  }
  for (const [deviceId, report] of lastReport) {
    const downloaded = fetched.has(deviceId);
    outcomes.set(deviceId, report.outcome === "ok" ? { kind: "ok", downloaded } : { kind: "failed", reason: `ota=err: ${report.message ?? "no message"}`, at: report.received_at, downloaded });
  }
  const deadline = now.getTime() - reportTimeoutSeconds * 1000;
  for (const [deviceId, fetch] of lastCompleted) {
    const report = lastReport.get(deviceId);
    if (report && report.received_at >= fetch.started_at) continue;
    const startedAt = Date.parse(fetch.started_at);
    if (startedAt <= deadline) {
      const at = new Date(startedAt + reportTimeoutSeconds * 1000).toISOString();
      outcomes.set(deviceId, { kind: "failed", reason: `no report ${reportTimeoutSeconds} s after its download began`, at, downloaded: true });
    }
  }
  return outcomes;
}

export interface StageCount {
  percent: number;
  /** whether this stage has opened (it is the current one or an earlier one) */
  open: boolean;
  badges: number;
  downloaded: number;
  ok: number;
  failed: number;
}

export interface Tally {
  /** the badges of each stage's band: stage i holds places in [stages[i-1], stages[i]) */
  stages: StageCount[];
  /** badges inside the current stage (all bands up to it) */
  inStage: number;
  okInStage: number;
  /** failures an operator has not accepted, with their reasons, oldest first */
  newFailures: RolloutFailure[];
}

export interface RolloutFailure {
  device_id: string;
  name: string;
  reason: string;
  at: string;
}

export function tally(rollout: ReleaseRolloutsTable, badges: Array<{ id: string; name: string }>, outcomes: Map<string, BadgeOutcome>): Tally {
  const stages = stagesOf(rollout);
  const counts: StageCount[] = stages.map((percent, i) => ({ percent, open: i <= rollout.stage_index, badges: 0, downloaded: 0, ok: 0, failed: 0 }));
  const accepted = new Set(JSON.parse(rollout.accepted_failures) as string[]);
  const newFailures: Tally["newFailures"] = [];
  let inStage = 0;
  let okInStage = 0;
  for (const badge of badges) {
    const place = rolloutPlace(badge.id);
    const band = stages.findIndex((percent) => place < percent);
    const count = counts[band]!;
    const outcome = outcomes.get(badge.id);
    count.badges++;
    if (outcome?.downloaded) count.downloaded++;
    if (outcome?.kind === "ok") count.ok++;
    if (outcome?.kind === "failed") {
      count.failed++;
      if (!accepted.has(badge.id)) newFailures.push({ device_id: badge.id, name: badge.name, reason: outcome.reason, at: outcome.at });
    }
    if (band <= rollout.stage_index) {
      inStage++;
      if (outcome?.kind === "ok") okInStage++;
    }
  }
  newFailures.sort((a, b) => a.at.localeCompare(b.at) || a.device_id.localeCompare(b.device_id));
  return { stages: counts, inStage, okInStage, newFailures };
}

export type RolloutDecision = { kind: "halt"; why: string } | { kind: "advance" } | { kind: "complete" } | { kind: "wait" };

/** What an open rollout does now, given its tally. */
export function decideRollout(rollout: ReleaseRolloutsTable, counts: Tally, now: Date): RolloutDecision {
  if (rollout.status === "halted" || rollout.status === "aborted" || rollout.status === "completed") return { kind: "wait" };
  const failures = counts.newFailures.length;
  if (failures >= rollout.halt_failures) return { kind: "halt", why: `${failures} ${failures === 1 ? "badge" : "badges"} failed, the limit is ${rollout.halt_failures}` };
  if (failures > 0 && counts.inStage > 0 && failures / counts.inStage >= rollout.halt_failure_share) {
    const share = ((failures / counts.inStage) * 100).toFixed(1);
    return { kind: "halt", why: `${failures} of the stage's ${counts.inStage} badges failed (${share} %), the limit is ${rollout.halt_failure_share * 100} %` };
  }
  if (rollout.status !== "active") return { kind: "wait" };
  const stageAgeMs = now.getTime() - Date.parse(rollout.stage_started_at);
  if (stageAgeMs < rollout.min_stage_seconds * 1000) return { kind: "wait" };
  const okShare = counts.inStage === 0 ? 1 : counts.okInStage / counts.inStage;
  if (okShare < rollout.min_ok_share) return { kind: "wait" };
  return rollout.stage_index === stagesOf(rollout).length - 1 ? { kind: "complete" } : { kind: "advance" };
}
