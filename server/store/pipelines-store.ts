// Pipelines and their stages (the tool endpoint's resources). Queries are written once for
// SQLite and PostgreSQL: the name search is a LIKE on a column folded to lower case in code,
// with an explicit ESCAPE, and an update touches only the columns it is given.
import { sql } from "kysely";
import { forUpdate } from "./dialect.ts";
import type { Db, Livemode, PipelinesTable, StagesTable } from "./schema.ts";

export type PipelineRow = PipelinesTable;
export type StageRow = StagesTable;

export async function insertPipeline(db: Db, pipeline: PipelineRow, stages: StageRow[]): Promise<void> {
  await db.insertInto("pipelines").values(pipeline).execute();
  await db.insertInto("stages").values(stages).execute();
}

export async function findPipeline(db: Db, id: string, livemode: Livemode): Promise<PipelineRow | undefined> {
  return db.selectFrom("pipelines").selectAll().where("id", "=", id).where("livemode", "=", livemode).executeTakeFirst();
}

export async function stagesOf(db: Db, pipelineId: string): Promise<StageRow[]> {
  return db.selectFrom("stages").selectAll().where("pipeline_id", "=", pipelineId).orderBy("position").execute();
}

/** How many stages each pipeline has in each status (statuses with no stage are absent). */
export async function stageCountsOf(db: Db, pipelineIds: string[]) {
  if (pipelineIds.length === 0) return [];
  return db
    .selectFrom("stages")
    .select(["pipeline_id", "status", (eb) => eb.fn.countAll<number>().as("count")])
    .where("pipeline_id", "in", pipelineIds)
    .groupBy(["pipeline_id", "status"])
    .execute();
}

/** The stage and the mode of its pipeline, so callers can keep modes apart. */
export async function findStage(db: Db, id: string, livemode: Livemode): Promise<StageRow | undefined> {
  return stageQuery(db, id, livemode).executeTakeFirst();
}

/** The stage, locked until the transaction `trx` ends: a concurrent update waits and then sees this one's status. */
export async function findStageForUpdate(trx: Db, id: string, livemode: Livemode): Promise<StageRow | undefined> {
  return forUpdate(trx, stageQuery(trx, id, livemode)).executeTakeFirst();
}

const stageQuery = (db: Db, id: string, livemode: Livemode) =>
  db
    .selectFrom("stages")
    .innerJoin("pipelines", "pipelines.id", "stages.pipeline_id")
    .selectAll("stages")
    .where("stages.id", "=", id)
    .where("pipelines.livemode", "=", livemode);

export interface PipelineFilter {
  livemode: Livemode;
  /** lower-cased e-mail */
  ownerEmailFolded?: string;
  /** lower-cased substring of the name */
  nameFolded?: string;
  /** only pipelines with at least one stage in this status */
  stageStatus?: string;
  /** keyset position: only rows after (created_at, id) */
  after?: [string, string];
  limit: number;
}

const escapeLike = (text: string) => text.replace(/[\\%_]/g, (c) => `\\${c}`);

export async function listPipelines(db: Db, filter: PipelineFilter): Promise<PipelineRow[]> {
  let query = db.selectFrom("pipelines").selectAll().where("livemode", "=", filter.livemode);
  if (filter.ownerEmailFolded !== undefined) query = query.where("owner_email_folded", "=", filter.ownerEmailFolded);
  if (filter.nameFolded !== undefined) {
    query = query.where(sql<boolean>`name_folded like ${`%${escapeLike(filter.nameFolded)}%`} escape '\\'`);
  }
  if (filter.stageStatus !== undefined) {
    const status = filter.stageStatus;
    query = query.where(({ exists, selectFrom }) =>
      exists(
        selectFrom("stages")
          .select("stages.id")
          .whereRef("stages.pipeline_id", "=", "pipelines.id")
          .where("stages.status", "=", status),
      ),
    );
  }
  if (filter.after) {
    const [createdAt, id] = filter.after;
    query = query.where((eb) =>
      eb.or([eb("created_at", ">", createdAt), eb.and([eb("created_at", "=", createdAt), eb("id", ">", id)])]),
    );
  }
  return query.orderBy("created_at").orderBy("id").limit(filter.limit).execute();
}

export type StageChanges = Partial<Pick<StageRow, "due_date" | "status">>;

/**
 * Sets exactly the given columns of one stage in one UPDATE. With `expectedStatus` the row is
 * changed only while its status is still that one (the transition was checked against it), so
 * two writers cannot both move a stage from the same state. Returns whether a row changed.
 */
export async function updateStage(db: Db, id: string, changes: StageChanges, expectedStatus?: string): Promise<boolean> {
  let query = db.updateTable("stages").set(changes).where("id", "=", id);
  if (expectedStatus !== undefined) query = query.where("status", "=", expectedStatus);
  const result = await query.executeTakeFirst();
  return result.numUpdatedRows > 0n;
}
