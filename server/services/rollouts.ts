// Staged rollouts (issue 24): create one for a canary release whose canary reported ok, read it
// with its counts per stage, move it (advance, pause, resume, abort), and let its rules
// (rollout-rules.ts) advance, halt or complete it. Every change is one compare-and-set update of
// the rollout's row with its history entry and, for an advance, a halt or the completion, its
// webhook event, in one transaction: an operator and the evaluation racing change it once.
//
// Who moves a rollout on its own: `RolloutEvaluator`, after every badge sync that reported on the
// rollout's version (so an `ota=err` halts it before the sync is answered), and on the server's
// timer (ROLLOUT_EVALUATION_INTERVAL_MS: the minimum stage time passing, a silent badge's report
// timeout running out). Both read the time from the clock the server was given, so tests move it.
import type { Kysely, Transaction } from "kysely";
import type { Logger } from "pino";
import type { Manifest, ReleaseEntry } from "../../firmware/index.ts";
import { ApiError, conflict, notFound } from "../errors.ts";
import { newId } from "../ids.ts";
import { checkPromotion, promoteRelease } from "../releases/publishing.ts";
import { findRelease, targetFor, type ReleaseStore, type ReleaseStores } from "../releases/release-store.ts";
import type { ChangeFeed } from "../store/change-feed.ts";
import * as store from "../store/rollouts-store.ts";
import type { Database, Livemode, ReleaseRolloutsTable, RolloutStatus } from "../store/schema.ts";
import type { WriteBatcher } from "../store/write-batcher.ts";
import { writeEvent, type EventType } from "./outbox.ts";
import { cachedLookup } from "./feed-cache.ts";
import { badgeOutcomes, decideRollout, inCurrentStage, stagesOf, tally, type RolloutFailure, type RolloutSettings, type StageCount } from "./rollout-rules.ts";

/** How often the server evaluates open rollouts on its own (a stage's minimum time, a silent badge's timeout). */
export const ROLLOUT_EVALUATION_INTERVAL_MS = 30_000;
/** A halt names at most this many badges (the counts say how many failed in all). */
const HALT_BADGES_SHOWN = 50;

export type Clock = () => Date;
export const ROLLOUT_ACTIONS = ["advance", "pause", "resume", "abort"] as const;
export type RolloutAction = (typeof ROLLOUT_ACTIONS)[number];
type HistoryAction = RolloutAction | "created" | "halted" | "completed";

export interface RolloutHistoryEntry {
  at: string;
  action: HistoryAction;
  /** the stage's percentage after the change */
  stage: number;
  by: "operator" | "rules";
  note: string | null;
}

export interface RolloutHalt {
  at: string;
  why: string;
  failures: RolloutFailure[];
}

export interface RolloutView {
  object: "release_rollout";
  id: string;
  livemode: boolean;
  version: string;
  previous_version: string | null;
  status: RolloutStatus;
  stages: number[];
  stage: { index: number; percent: number; started_at: string };
  settings: Omit<RolloutSettings, "version" | "stages">;
  counts: { badges: number; downloaded: number; ok: number; failed: number; stages: StageCount[] };
  /** failing badges an operator has not accepted (by resuming), oldest first */
  failures: RolloutFailure[];
  /** the last halt: why, and which badges; null when it never halted */
  halt: RolloutHalt | null;
  history: RolloutHistoryEntry[];
  created_at: string;
  updated_at: string;
  ended_at: string | null;
}

async function tallyOf(db: Kysely<Database>, row: ReleaseRolloutsTable, now: Date) {
  const [badges, reports, fetches] = await Promise.all([
    store.fleetBadges(db, row.livemode),
    store.reportsOfVersion(db, row.livemode, row.version, row.published_at),
    store.fetchesOfVersion(db, row.livemode, row.version, row.published_at),
  ]);
  return tally(row, badges, badgeOutcomes(reports, fetches, now, row.report_timeout_seconds));
}

async function rolloutView(db: Kysely<Database>, row: ReleaseRolloutsTable, now: Date): Promise<RolloutView> {
  const counts = await tallyOf(db, row, now);
  const stages = stagesOf(row);
  const sum = (field: "badges" | "downloaded" | "ok" | "failed") => counts.stages.reduce((total, stage) => total + stage[field], 0);
  return {
    object: "release_rollout",
    id: row.id,
    livemode: row.livemode === 1,
    version: row.version,
    previous_version: row.previous_version,
    status: row.status,
    stages,
    stage: { index: row.stage_index, percent: stages[row.stage_index]!, started_at: row.stage_started_at },
    settings: {
      min_stage_seconds: row.min_stage_seconds,
      min_ok_share: row.min_ok_share,
      halt_failures: row.halt_failures,
      halt_failure_share: row.halt_failure_share,
      report_timeout_seconds: row.report_timeout_seconds,
    },
    counts: { badges: sum("badges"), downloaded: sum("downloaded"), ok: sum("ok"), failed: sum("failed"), stages: counts.stages },
    failures: counts.newFailures,
    halt: row.halt === null ? null : (JSON.parse(row.halt) as RolloutHalt),
    history: JSON.parse(row.history) as RolloutHistoryEntry[],
    created_at: row.created_at,
    updated_at: row.updated_at,
    ended_at: row.ended_at,
  };
}

/** The mode's rollouts, newest first (the history of its rollouts). */
export async function listRolloutViews(db: Kysely<Database>, livemode: Livemode, now: Date): Promise<RolloutView[]> {
  return Promise.all((await store.listRollouts(db, livemode)).map((row) => rolloutView(db, row, now)));
}

async function rolloutRow(db: Kysely<Database>, livemode: Livemode, id: string): Promise<ReleaseRolloutsTable> {
  const row = await store.findRollout(db, livemode, id);
  if (!row) throw notFound("rollout", id, "id");
  return row;
}

export async function getRolloutView(db: Kysely<Database>, livemode: Livemode, id: string, now: Date): Promise<RolloutView> {
  return rolloutView(db, await rolloutRow(db, livemode, id), now);
}

/** The rollout of `version` in the mode, for the command line (which names releases by version). */
export async function rolloutIdOfVersion(db: Kysely<Database>, livemode: Livemode, version: string): Promise<string> {
  const row = await store.findRolloutOfVersion(db, livemode, version);
  if (!row) throw notFound("rollout of release", version, "version");
  return row.id;
}

/** Starts a staged rollout of a canary release whose canary reported ok; refusals name the input. */
export async function createRollout(trx: Transaction<Database>, releases: ReleaseStore, settings: RolloutSettings, now: Date): Promise<RolloutView> {
  const livemode = releases.livemode;
  const manifest = await releases.read(trx);
  const existing = await store.findRolloutOfVersion(trx, livemode, settings.version);
  if (existing) {
    throw conflict("rollout_exists", `Release ${settings.version} already has rollout ${existing.id} (${existing.status}); a release is rolled out once, publish a fixed one under a new version.`, "version");
  }
  const { entry, refusal } = await checkPromotion(trx, livemode, manifest, settings.version);
  if (refusal) {
    const message = `Cannot roll out ${settings.version}: ${refusal.message}.`;
    if (refusal.code === "release_unknown") throw new ApiError(404, "invalid_request_error", refusal.code, message, { param: "version" });
    throw conflict(refusal.code, message, "version");
  }
  const open = await store.findOpenRollout(trx, livemode);
  if (open) throw conflict("rollout_open", `Rollout ${open.id} of ${open.version} is ${open.status}; finish or abort it before starting another.`, "version");
  const at = now.toISOString();
  const { version, stages, ...limits } = settings;
  const row: ReleaseRolloutsTable = {
    id: newId("rol", now.getTime()),
    livemode,
    version,
    previous_version: manifest.fleet,
    published_at: entry!.published_at,
    status: "active",
    stages: JSON.stringify(stages),
    stage_index: 0,
    stage_started_at: at,
    ...limits,
    halt: null,
    accepted_failures: "[]",
    history: JSON.stringify([{ at, action: "created", stage: stages[0]!, by: "operator", note: null } satisfies RolloutHistoryEntry]),
    created_at: at,
    updated_at: at,
    ended_at: null,
  };
  await store.insertRollout(trx, row);
  return rolloutView(trx, row, now);
}

interface Change {
  changes: Partial<ReleaseRolloutsTable>;
  action: HistoryAction;
  by: RolloutHistoryEntry["by"];
  note?: string;
  event?: EventType;
}

/** Writes one change (compare-and-set) with its history entry and event; false when the row changed meanwhile. */
async function applyChange(trx: Transaction<Database>, row: ReleaseRolloutsTable, { changes, action, by, note, event }: Change, now: Date): Promise<ReleaseRolloutsTable | undefined> {
  const at = now.toISOString();
  const next = { ...row, ...changes, updated_at: at };
  const entry: RolloutHistoryEntry = { at, action, stage: stagesOf(next)[next.stage_index]!, by, note: note ?? null };
  next.history = JSON.stringify([...(JSON.parse(row.history) as RolloutHistoryEntry[]), entry]);
  if (!(await store.updateRollout(trx, row, { ...changes, history: next.history, updated_at: at }))) return undefined;
  if (event) await writeEvent(trx, row.livemode, event, { object: await rolloutView(trx, next, now) }, now);
  return next;
}

/** The next stage, or past the last one the release becomes the fleet's (promoted) and the rollout completes. */
async function moveOn(trx: Transaction<Database>, releases: ReleaseStore, row: ReleaseRolloutsTable, by: RolloutHistoryEntry["by"], now: Date) {
  const at = now.toISOString();
  if (row.stage_index < stagesOf(row).length - 1) {
    return applyChange(trx, row, { changes: { stage_index: row.stage_index + 1, stage_started_at: at }, action: "advance", by, event: "release.rollout_advanced" }, now);
  }
  await promoteRelease(trx, releases, row.version, { reason: `staged rollout ${row.id} completed`, byRollout: row.id, now });
  return applyChange(trx, row, { changes: { status: "completed", ended_at: at }, action: "completed", by, event: "release.rollout_completed" }, now);
}

function refuseAction(row: ReleaseRolloutsTable, action: RolloutAction): ApiError | undefined {
  const ended = row.status === "aborted" || row.status === "completed";
  if (ended) return conflict("rollout_ended", `Cannot ${action} rollout ${row.id}: it is ${row.status}.`, "id");
  if (action === "advance" && row.status !== "active") {
    return conflict(`rollout_${row.status}`, `Cannot advance rollout ${row.id}: it is ${row.status}; resume it first (or abort it).`, "id");
  }
  if (action === "pause" && row.status !== "active") return conflict(`rollout_${row.status}`, `Cannot pause rollout ${row.id}: it is ${row.status}, not active.`, "id");
  if (action === "resume" && row.status === "active") return conflict("rollout_active", `Cannot resume rollout ${row.id}: it is already active.`, "id");
  return undefined;
}

/** An operator's action; refused (409, nothing changed) when the rollout's status does not allow it. */
export async function actOnRollout(trx: Transaction<Database>, releases: ReleaseStore, id: string, action: RolloutAction, now: Date): Promise<RolloutView> {
  const row = await rolloutRow(trx, releases.livemode, id);
  const refusal = refuseAction(row, action);
  if (refusal) throw refusal;
  const by = "operator";
  let next: ReleaseRolloutsTable | undefined;
  if (action === "advance") next = await moveOn(trx, releases, row, by, now);
  if (action === "pause") next = await applyChange(trx, row, { changes: { status: "paused" }, action, by }, now);
  if (action === "abort") next = await applyChange(trx, row, { changes: { status: "aborted", ended_at: now.toISOString() }, action, by }, now);
  if (action === "resume") {
    // Resuming a halt accepts the failures it stopped for: only new ones count against the limits.
    const accepted = new Set([...(JSON.parse(row.accepted_failures) as string[]), ...(await tallyOf(trx, row, now)).newFailures.map((f) => f.device_id)]);
    const note = row.status === "halted" ? `accepted ${accepted.size} failing badges` : undefined;
    next = await applyChange(trx, row, { changes: { status: "active", accepted_failures: JSON.stringify([...accepted]) }, action, by, note }, now);
  }
  if (!next) throw conflict("rollout_changed", `Rollout ${id} changed while this ${action} ran; read it again and retry.`, "id");
  return rolloutView(trx, next, now);
}

/** Applies the rules to an open rollout: halts, advances or completes it when they say so. */
async function evaluateRollout(trx: Transaction<Database>, releases: ReleaseStore, row: ReleaseRolloutsTable, now: Date): Promise<void> {
  const counts = await tallyOf(trx, row, now);
  const decision = decideRollout(row, counts, now);
  if (decision.kind === "halt") {
    const halt: RolloutHalt = { at: now.toISOString(), why: decision.why, failures: counts.newFailures.slice(0, HALT_BADGES_SHOWN) };
    await applyChange(trx, row, { changes: { status: "halted", halt: JSON.stringify(halt) }, action: "halted", by: "rules", note: decision.why, event: "release.rollout_halted" }, now);
  } else if (decision.kind === "advance" || decision.kind === "complete") {
    await moveOn(trx, releases, row, "rules", now);
  }
}

/** The mode's open rollout (active, paused or halted), if any, as the badges' checks and downloads read it. */
export type OpenRollout = (livemode: Livemode) => Promise<ReleaseRolloutsTable | undefined>;

/**
 * Each mode's open rollout, or its absence, kept in memory until the change feed moves
 * (feed-cache.ts): every write of a rollout's row announces itself (rollouts-store.ts), so a
 * rollout created, moved or ended on any instance is seen from the next check after its
 * notification, never later than the feed's check interval. The row is kept, not a decision:
 * which badges a rollout offers to follows from its row alone (its status, stages and stage
 * index; a stage opens only by an evaluation writing the row), decided afresh for each badge.
 */
export function cachedOpenRollout(db: Kysely<Database>, changes: ChangeFeed): OpenRollout {
  return cachedLookup(changes, (livemode: Livemode) => store.findOpenRollout(db, livemode), { capacity: 2, keepMissing: true });
}

/**
 * The release a badge is offered: its target (the fleet's release, or its canary release), or
 * the release of the mode's active rollout when the badge is inside the current stage. A
 * paused, halted or aborted rollout offers to no one new.
 */
export async function offeredRelease(openRollout: OpenRollout, manifest: Manifest, livemode: Livemode, deviceId: string): Promise<ReleaseEntry | undefined> {
  const target = targetFor(manifest, deviceId);
  const rollout = await openRollout(livemode);
  if (rollout?.status !== "active" || !inCurrentStage(rollout, deviceId)) return target;
  const entry = findRelease(manifest, rollout.version);
  if (!entry) return target;
  const newer = !target || manifest.releases.indexOf(entry) > manifest.releases.indexOf(target);
  return newer ? entry : target;
}

/** Evaluates open rollouts: on the server's timer, and after a badge reported on a rollout's version. */
export class RolloutEvaluator {
  constructor(private readonly deps: { db: Kysely<Database>; writes: WriteBatcher; releases: ReleaseStores; clock: Clock; logger: Logger }) {}

  /** Every mode's open rollouts; what the timer runs (and tests call, having moved the clock). */
  async evaluateAll(): Promise<void> {
    for (const row of await store.listOpenRollouts(this.deps.db)) await this.#evaluate(row.livemode, row.id);
  }

  /** After a badge of `livemode` reported on `version`: evaluates the open rollout of that version. Never throws. */
  async afterReport(livemode: Livemode, version: string): Promise<void> {
    try {
      const open = await store.findOpenRollout(this.deps.db, livemode);
      if (open?.version === version) await this.#evaluate(livemode, open.id);
    } catch (err) {
      this.deps.logger.error({ err }, "rollout evaluation after a report failed");
    }
  }

  async #evaluate(livemode: Livemode, id: string): Promise<void> {
    const { writes, releases, clock } = this.deps;
    await writes.run(async (trx) => {
      // Read again inside the transaction: another evaluation may have moved it.
      const row = await store.findRollout(trx, livemode, id);
      if (row && store.OPEN_STATUSES.includes(row.status)) await evaluateRollout(trx, releases[livemode], row, clock());
    });
  }
}
