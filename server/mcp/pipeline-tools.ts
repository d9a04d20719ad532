// The tools of /api/mcp: each with the scope it needs, a zod input schema (checked by the route
// before the SDK sees the call, so a bad argument is a JSON-RPC -32602 naming the field) and a
// zod output schema (the SDK checks every result against it). Spellings follow SPEC 4.7:
// `dueDate` inside create_pipeline stages, `due_date` in update_stage.
import type { Kysely } from "kysely";
import { z } from "zod";
import type { CursorCodec } from "../cursor.ts";
import { ApiError } from "../errors.ts";
import { idParam } from "../http/validation.ts";
import { isoDate } from "../iso-date.ts";
import type { Scope } from "../services/api-keys.ts";
import * as pipelines from "../services/pipelines.ts";
import { STAGE_PRIORITIES, STAGE_STATUSES } from "../services/pipelines.ts";
import type { Database, Livemode } from "../store/schema.ts";

export interface ToolContext {
  db: Kysely<Database>;
  codec: CursorCodec;
  livemode: Livemode;
}

export interface ToolDefinition<Input extends z.ZodType = z.ZodType, Output extends z.ZodObject = z.ZodObject> {
  name: string;
  title: string;
  description: string;
  scope: Scope;
  readOnly: boolean;
  /** calling it twice with the same arguments leaves the same state */
  idempotent: boolean;
  /** it may overwrite what is there (false: it only reads, or only adds) */
  destructive: boolean;
  /** argument names that are the other tool's spelling, with this tool's (SPEC 4.7 uses both) */
  misspellings?: Record<string, string>;
  input: Input;
  output: Output;
  run(context: ToolContext, args: z.output<Input>): Promise<z.output<Output>>;
}

const text = (max: number) =>
  z
    .string()
    .trim()
    .min(1, "must not be empty")
    .max(max, `must be at most ${max} characters`);

const email = z.email({ error: "must be an e-mail address (like ada@example.org)" }).max(254, "must be at most 254 characters");
const date = isoDate;
const stageStatus = z.enum(STAGE_STATUSES, { error: `must be one of ${STAGE_STATUSES.join(", ")}` });
const priority = z.enum(STAGE_PRIORITIES, { error: `must be one of ${STAGE_PRIORITIES.join(", ")}` });

const stageView = z.object({
  object: z.literal("stage"),
  stage_id: z.uuid(),
  pipeline_id: z.string(),
  position: z.number().int(),
  title: z.string(),
  goal: z.string(),
  priority,
  due_date: z.string().nullable(),
  status: stageStatus,
  created_at: z.string(),
});

const pipelineFields = {
  object: z.literal("pipeline"),
  pipeline_id: z.string(),
  livemode: z.boolean(),
  name: z.string(),
  overview: z.string(),
  owner_email: z.string(),
  created_at: z.string(),
};

const pipelineView = z.object({ ...pipelineFields, stages: z.array(stageView) });

const pipelineSummary = z.object({
  ...pipelineFields,
  stage_count: z.number().int(),
  stage_counts: z.object(Object.fromEntries(STAGE_STATUSES.map((s) => [s, z.number().int()])) as Record<pipelines.StageStatus, z.ZodNumber>),
});

const defineTool = <Input extends z.ZodType, Output extends z.ZodObject>(tool: ToolDefinition<Input, Output>) => tool;

/** The tools, built around the installation's cursor codec (list_pipelines checks cursors). */
export function pipelineTools(codec: CursorCodec) {
  const listInput = z
    .strictObject({
      owner_email: email.optional().describe("only pipelines owned by this e-mail (case-insensitive)"),
      name_contains: text(200).optional().describe("only pipelines whose name contains this text (case-insensitive)"),
      stage_status: stageStatus.optional().describe("only pipelines with at least one stage in this status"),
      limit: z.number().int("must be a whole number").min(1, "must be at least 1").max(100, "must be at most 100").default(20).describe("page size, 1 to 100"),
      cursor: z.string().min(1).max(2000, "must be at most 2000 characters").optional().describe("next_cursor of the previous page, unchanged"),
    })
    .superRefine((args, ctx) => {
      if (args.cursor === undefined) return;
      try {
        codec.decode(args.cursor, pipelines.pipelineListFingerprint(args));
      } catch (error) {
        if (!(error instanceof ApiError)) throw error;
        ctx.addIssue({ code: "custom", path: ["cursor"], message: error.message, input: args.cursor });
      }
    });

  return [
    defineTool({
      name: "list_pipelines",
      title: "List pipelines",
      description:
        "Finds pipelines (oldest first), optionally by owner e-mail, a text in the name, or a status that at least one stage has. " +
        "Each item carries its pipeline_id and how many stages it has in each status. Follow next_cursor while has_more is true.",
      scope: "pipelines:read",
      readOnly: true,
      idempotent: true,
      destructive: false,
      input: listInput,
      output: z.object({
        object: z.literal("list"),
        has_more: z.boolean(),
        next_cursor: z.string().nullable(),
        data: z.array(pipelineSummary),
      }),
      run: (context, args) => pipelines.listPipelines(context.db, context.codec, context.livemode, args),
    }),
    defineTool({
      name: "get_pipeline",
      title: "Get a pipeline",
      description: "Reads one pipeline with all its stages in order; each stage carries its stage_id (a UUID) for update_stage.",
      scope: "pipelines:read",
      readOnly: true,
      idempotent: true,
      destructive: false,
      input: z.strictObject({ pipeline_id: idParam("pip").describe("the pipeline_id from list_pipelines") }),
      output: pipelineView,
      run: (context, args) => pipelines.getPipeline(context.db, context.livemode, args.pipeline_id),
    }),
    defineTool({
      name: "create_pipeline",
      title: "Create a pipeline",
      description:
        `Creates a pipeline with its stages, in the order given. Every stage starts ${pipelines.INITIAL_STATUS}; ` +
        `priority is one of ${STAGE_PRIORITIES.join(", ")} (default ${pipelines.DEFAULT_PRIORITY}); dueDate is YYYY-MM-DD.`,
      scope: "pipelines:write",
      readOnly: false,
      idempotent: false,
      destructive: false,
      misspellings: { due_date: "dueDate" },
      input: z.strictObject({
        name: text(200),
        overview: text(10_000),
        owner_email: email,
        stages: z
          .array(
            z.strictObject({
              title: text(200),
              goal: text(2_000),
              priority: priority.optional(),
              dueDate: date.optional().describe("YYYY-MM-DD"),
            }),
            { error: "must be an array of stages" },
          )
          .min(1, "must list at least one stage")
          .max(100, "must list at most 100 stages"),
      }),
      output: pipelineView,
      run: (context, args) => pipelines.createPipeline(context.db, context.livemode, args),
    }),
    defineTool({
      name: "update_stage",
      title: "Update a stage",
      description:
        "Changes only the fields passed (due_date, status); every other field stays as it is. due_date is YYYY-MM-DD, or null to clear it. " +
        `Status moves: ${Object.entries(pipelines.STAGE_TRANSITIONS).map(([from, to]) => `${from} -> ${to.join("|")}`).join("; ")}.`,
      scope: "pipelines:write",
      readOnly: false,
      idempotent: true,
      destructive: true,
      misspellings: { dueDate: "due_date" },
      input: z
        .strictObject({
          stage_id: z.uuid({ error: "must be a UUID (the stage_id from get_pipeline)" }),
          due_date: date.nullable().optional().describe("YYYY-MM-DD, or null to clear the due date"),
          status: stageStatus.optional(),
        })
        .refine((args) => args.due_date !== undefined || args.status !== undefined, {
          path: ["due_date"],
          message: "nothing to change: pass due_date, status or both",
        }),
      output: stageView,
      run: (context, args) => pipelines.updateStage(context.db, context.livemode, args),
    }),
  ];
}

export type PipelineTool = ReturnType<typeof pipelineTools>[number];
