// Staged rollouts' rows (release_rollouts) and what a rollout's evaluation reads about the fleet:
// the mode's badges, and the reports and fetches of the rollout's version since it began. Every
// write of a rollout's row runs through `announceChange` (change-feed.ts): each instance keeps its
// modes' open rollouts in memory for the badges' checks and downloads, and this empties them.
import { announceChange } from "./change-feed.ts";
import type { Db, Livemode, ReleaseRolloutsTable, RolloutStatus } from "./schema.ts";

/** A rollout that still decides what badges are offered: only one per mode at a time. */
export const OPEN_STATUSES: readonly RolloutStatus[] = ["active", "paused", "halted"];

export async function insertRollout(db: Db, row: ReleaseRolloutsTable): Promise<void> {
  await announceChange(db, (trx) => trx.insertInto("release_rollouts").values(row).execute());
}

export function findRollout(db: Db, livemode: Livemode, id: string): Promise<ReleaseRolloutsTable | undefined> {
  return db.selectFrom("release_rollouts").selectAll().where("livemode", "=", livemode).where("id", "=", id).executeTakeFirst();
}

export function findRolloutOfVersion(db: Db, livemode: Livemode, version: string): Promise<ReleaseRolloutsTable | undefined> {
  return db.selectFrom("release_rollouts").selectAll().where("livemode", "=", livemode).where("version", "=", version).executeTakeFirst();
}

/** The mode's open rollout (active, paused or halted), if any. */
export function findOpenRollout(db: Db, livemode: Livemode): Promise<ReleaseRolloutsTable | undefined> {
  return db.selectFrom("release_rollouts").selectAll().where("livemode", "=", livemode).where("status", "in", OPEN_STATUSES).executeTakeFirst();
}

/** Every mode's open rollouts: what the server's timer evaluates. */
export function listOpenRollouts(db: Db): Promise<ReleaseRolloutsTable[]> {
  return db.selectFrom("release_rollouts").selectAll().where("status", "in", OPEN_STATUSES).orderBy("created_at").execute();
}

/** The mode's rollouts, newest first. */
export function listRollouts(db: Db, livemode: Livemode): Promise<ReleaseRolloutsTable[]> {
  return db.selectFrom("release_rollouts").selectAll().where("livemode", "=", livemode).orderBy("created_at", "desc").orderBy("id", "desc").execute();
}

/**
 * Writes `changes` if the row is still as `seen` left it (same status, stage and update time):
 * two evaluations or an evaluation and an operator racing change it once. False when it was not.
 * Called only for a change (an evaluation that decides nothing writes nothing), so the caches of
 * open rollouts are not emptied by every badge's report.
 */
export async function updateRollout(db: Db, seen: ReleaseRolloutsTable, changes: Partial<ReleaseRolloutsTable>): Promise<boolean> {
  const result = await announceChange(db, (trx) =>
    trx
      .updateTable("release_rollouts")
      .set(changes)
      .where("id", "=", seen.id)
      .where("status", "=", seen.status)
      .where("stage_index", "=", seen.stage_index)
      .where("updated_at", "=", seen.updated_at)
      .executeTakeFirst(),
  );
  return Number(result.numUpdatedRows) === 1;
}

/** The mode's badges whose token works (a revoked badge is no longer part of the fleet). */
export function fleetBadges(db: Db, livemode: Livemode): Promise<Array<{ id: string; name: string }>> {
  return db.selectFrom("devices").select(["id", "name"]).where("livemode", "=", livemode).where("revoked_at", "is", null).execute();
}

/** The reports of `version` from the mode's badges received at or after `since`, oldest first. */
export function reportsOfVersion(db: Db, livemode: Livemode, version: string, since: string) {
  return db
    .selectFrom("ota_reports as r")
    .innerJoin("devices as d", "d.id", "r.device_id")
    .select(["r.device_id", "r.outcome", "r.message", "r.received_at"])
    .where("d.livemode", "=", livemode)
    .where("r.version", "=", version)
    .where("r.received_at", ">=", since)
    .orderBy("r.received_at")
    .execute();
}

/** The fetches of `version` by the mode's badges started at or after `since`, oldest first. */
export function fetchesOfVersion(db: Db, livemode: Livemode, version: string, since: string) {
  return db
    .selectFrom("ota_fetches as f")
    .innerJoin("devices as d", "d.id", "f.device_id")
    .select(["f.device_id", "f.outcome", "f.started_at"])
    .where("d.livemode", "=", livemode)
    .where("f.version", "=", version)
    .where("f.started_at", ">=", since)
    .orderBy("f.started_at")
    .execute();
}
