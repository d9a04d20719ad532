// Pipelines (a named plan with an owner) and their stages, as the tool endpoint edits them.
// Stage lifecycle: see STAGE_TRANSITIONS; a refused move names both states. update_stage
// changes only the fields it is given (SPEC 3.3), in one UPDATE of those columns.
import { randomUUID } from "node:crypto";
import type { Kysely } from "kysely";
import { CursorCodec, filterFingerprint, toPage, type ListEnvelope } from "../cursor.ts";
import { newId } from "../ids.ts";
import * as store from "../store/pipelines-store.ts";
import type { Database, Livemode } from "../store/schema.ts";

export const STAGE_STATUSES = ["not_started", "in_progress", "blocked", "done", "cancelled"] as const;
export type StageStatus = (typeof STAGE_STATUSES)[number];

export const STAGE_PRIORITIES = ["low", "medium", "high", "urgent"] as const;
export type StagePriority = (typeof STAGE_PRIORITIES)[number];

/** A stage starts here; a stage created without a priority gets DEFAULT_PRIORITY. */
export const INITIAL_STATUS: StageStatus = "not_started";
export const DEFAULT_PRIORITY: StagePriority = "medium";

/** Where a stage may go from each status. Setting the status it already has changes nothing. */
export const STAGE_TRANSITIONS: Record<StageStatus, readonly StageStatus[]> = {
  not_started: ["in_progress", "blocked", "cancelled"],
  in_progress: ["not_started", "blocked", "done", "cancelled"],
  blocked: ["in_progress", "cancelled"],
  done: ["in_progress"],
  cancelled: ["not_started"],
};

/** An operation that failed on valid input: the tool answers it as an `isError` result. */
export class PipelineError extends Error {
  override name = "PipelineError";
}

export interface StageView {
  object: "stage";
  stage_id: string;
  pipeline_id: string;
  position: number;
  title: string;
  goal: string;
  priority: StagePriority;
  due_date: string | null;
  status: StageStatus;
  created_at: string;
}

export interface PipelineView {
  object: "pipeline";
  pipeline_id: string;
  livemode: boolean;
  name: string;
  overview: string;
  owner_email: string;
  created_at: string;
  stages: StageView[];
}

export interface PipelineSummary extends Omit<PipelineView, "stages"> {
  stage_count: number;
  stage_counts: Record<StageStatus, number>;
}

export interface NewPipeline {
  name: string;
  overview: string;
  owner_email: string;
  stages: { title: string; goal: string; priority?: StagePriority; dueDate?: string }[];
}

export interface PipelineQuery {
  owner_email?: string;
  name_contains?: string;
  stage_status?: StageStatus;
  limit: number;
  cursor?: string;
}

export interface StageUpdate {
  stage_id: string;
  /** null clears the due date */
  due_date?: string | null;
  status?: StageStatus;
}

const fold = (text: string) => text.toLowerCase();

function toStageView(row: store.StageRow): StageView {
  return {
    object: "stage",
    stage_id: row.id,
    pipeline_id: row.pipeline_id,
    position: row.position,
    title: row.title,
    goal: row.goal,
    priority: row.priority as StagePriority,
    due_date: row.due_date,
    status: row.status as StageStatus,
    created_at: row.created_at,
  };
}

function toPipelineView(row: store.PipelineRow, stages: store.StageRow[]): PipelineView {
  return {
    object: "pipeline",
    pipeline_id: row.id,
    livemode: row.livemode === 1,
    name: row.name,
    overview: row.overview,
    owner_email: row.owner_email,
    created_at: row.created_at,
    stages: stages.map(toStageView),
  };
}

const modeName = (livemode: Livemode) => (livemode ? "live" : "test");

export async function createPipeline(db: Kysely<Database>, livemode: Livemode, input: NewPipeline): Promise<PipelineView> {
  const now = new Date().toISOString();
  const pipeline: store.PipelineRow = {
    id: newId("pip"),
    livemode,
    name: input.name,
    name_folded: fold(input.name),
    overview: input.overview,
    owner_email: input.owner_email,
    owner_email_folded: fold(input.owner_email),
    created_at: now,
  };
  const stages: store.StageRow[] = input.stages.map((stage, position) => ({
    id: randomUUID(),
    pipeline_id: pipeline.id,
    position,
    title: stage.title,
    goal: stage.goal,
    priority: stage.priority ?? DEFAULT_PRIORITY,
    due_date: stage.dueDate ?? null,
    status: INITIAL_STATUS,
    created_at: now,
  }));
  await db.transaction().execute((trx) => store.insertPipeline(trx, pipeline, stages));
  return toPipelineView(pipeline, stages);
}

export async function getPipeline(db: Kysely<Database>, livemode: Livemode, id: string): Promise<PipelineView> {
  const pipeline = await store.findPipeline(db, id, livemode);
  if (!pipeline) throw new PipelineError(`No pipeline '${id}' among this ${modeName(livemode)}-mode key's pipelines.`);
  return toPipelineView(pipeline, await store.stagesOf(db, id));
}

/** Names the list and its filters for the cursor (see cursor.ts), as the filters are compared. */
export function pipelineListFingerprint(query: Omit<PipelineQuery, "limit" | "cursor">): string {
  return filterFingerprint("pipelines", {
    owner_email: query.owner_email === undefined ? undefined : fold(query.owner_email),
    name_contains: query.name_contains === undefined ? undefined : fold(query.name_contains),
    stage_status: query.stage_status,
  });
}

/** Pipelines in creation order (oldest first), with how many stages each has in each status. */
export async function listPipelines(
  db: Kysely<Database>,
  codec: CursorCodec,
  livemode: Livemode,
  query: PipelineQuery,
): Promise<ListEnvelope<PipelineSummary>> {
  const filters = pipelineListFingerprint(query);
  const position = query.cursor === undefined ? undefined : codec.decode(query.cursor, filters);
  const rows = await store.listPipelines(db, {
    livemode,
    ownerEmailFolded: query.owner_email === undefined ? undefined : fold(query.owner_email),
    nameFolded: query.name_contains === undefined ? undefined : fold(query.name_contains),
    stageStatus: query.stage_status,
    after: position?.after,
    limit: query.limit + 1,
  });
  const counts = new Map<string, Record<StageStatus, number>>();
  for (const row of rows) counts.set(row.id, Object.fromEntries(STAGE_STATUSES.map((s) => [s, 0])) as Record<StageStatus, number>);
  for (const { pipeline_id, status, count } of await store.stageCountsOf(db, rows.map((r) => r.id))) {
    counts.get(pipeline_id)![status as StageStatus] = Number(count);
  }
  return toPage(rows, query.limit, {
    codec,
    filters,
    keyOf: (row) => [row.created_at, row.id],
    view: (row) => {
      const { stages: _, ...summary } = toPipelineView(row, []);
      const stageCounts = counts.get(row.id)!;
      return { ...summary, stage_count: Object.values(stageCounts).reduce((a, b) => a + b, 0), stage_counts: stageCounts };
    },
  });
}

/**
 * Sets the passed fields of one stage and nothing else: one UPDATE of exactly those columns,
 * inside a write transaction that also checks the status move, so concurrent updates of other
 * fields are never overwritten with stale values.
 */
export async function updateStage(db: Kysely<Database>, livemode: Livemode, update: StageUpdate): Promise<StageView> {
  const id = update.stage_id.toLowerCase();
  return db.transaction().execute(async (trx) => {
    const stage = await store.findStageForUpdate(trx, id, livemode);
    if (!stage) throw new PipelineError(`No stage '${id}' in this ${modeName(livemode)}-mode key's pipelines.`);
    const changes: store.StageChanges = {};
    if (update.due_date !== undefined) changes.due_date = update.due_date;
    const from = stage.status as StageStatus;
    if (update.status !== undefined && update.status !== from) {
      const allowed = STAGE_TRANSITIONS[from];
      if (!allowed.includes(update.status)) {
        throw new PipelineError(
          `Cannot move stage ${id} from ${from} to ${update.status}: from ${from} a stage may move to ${allowed.join(", ")}.`,
        );
      }
      changes.status = update.status;
    }
    if (Object.keys(changes).length > 0 && !(await store.updateStage(trx, id, changes, changes.status && from))) {
      throw new PipelineError(`Stage ${id} changed status while this update ran; read it again and retry.`);
    }
    return toStageView((await store.findStage(trx, id, livemode))!);
  });
}
