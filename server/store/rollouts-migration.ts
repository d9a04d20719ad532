// Migration 0010 (issue 24): staged rollouts, one row per rollout. Apart from migrations.ts,
// which would otherwise pass 500 lines; migrations.ts lists it under its name like the others.
// One rollout per version and mode, ever (the unique index): an aborted release is not rolled out
// again, a fixed one is published under a new version.
import type { Expression, Kysely } from "kysely";

/** Creates the table; `t` is migrations.ts's columnTypes(db) (passed in: this module must not import the one that lists it). */
export async function createReleaseRollouts(db: Kysely<any>, t: { text: Expression<unknown> | "text"; real: "real" | "double precision" }): Promise<void> {
  await db.schema
    .createTable("release_rollouts")
    .addColumn("id", t.text, (c) => c.primaryKey())
    .addColumn("livemode", "integer", (c) => c.notNull())
    .addColumn("version", t.text, (c) => c.notNull())
    .addColumn("previous_version", t.text)
    .addColumn("published_at", t.text, (c) => c.notNull())
    .addColumn("status", t.text, (c) => c.notNull())
    .addColumn("stages", t.text, (c) => c.notNull())
    .addColumn("stage_index", "integer", (c) => c.notNull())
    .addColumn("stage_started_at", t.text, (c) => c.notNull())
    .addColumn("min_stage_seconds", "integer", (c) => c.notNull())
    .addColumn("min_ok_share", t.real, (c) => c.notNull())
    .addColumn("halt_failures", "integer", (c) => c.notNull())
    .addColumn("halt_failure_share", t.real, (c) => c.notNull())
    .addColumn("report_timeout_seconds", "integer", (c) => c.notNull())
    .addColumn("halt", t.text)
    .addColumn("accepted_failures", t.text, (c) => c.notNull())
    .addColumn("history", t.text, (c) => c.notNull())
    .addColumn("created_at", t.text, (c) => c.notNull())
    .addColumn("updated_at", t.text, (c) => c.notNull())
    .addColumn("ended_at", t.text)
    .execute();
  await db.schema.createIndex("release_rollouts_version").on("release_rollouts").columns(["livemode", "version"]).unique().execute();
  await db.schema.createIndex("release_rollouts_status").on("release_rollouts").columns(["livemode", "status"]).execute();
}
