// `release rollout create|list|show|advance|pause|resume|abort`: staged rollouts (issue 24) from
// the command line, on the store like `release promote`, with the same rules and refusals as
// /v1/rollouts (server/services/rollouts.ts). A rollout is named by its release's version (one
// rollout per version and mode). Bad settings are a usage error naming the option (exit 2); a
// refusal (a halted rollout advanced, a second rollout of one version) is one line, exit 1.
import type { Argv } from "yargs";
import { failUsage } from "../cli-failure.ts";
import { adminOptions, print, releaseStoresOf, withStore, type AdminArgs } from "./admin.ts";
import { table } from "../../../badge-sim/reports/text.ts";
import type { RolloutView } from "../../../server/services/rollouts.ts";
import type { Store } from "../../../server/store/database.ts";

const MODES = ["test", "live"] as const;
type ModeName = (typeof MODES)[number];
const livemodeOf = (mode: ModeName) => (mode === "live" ? 1 : 0);
const modeOption = { choices: MODES, default: "test" as ModeName, describe: "whose rollout: test badges' or live ones'" } as const;
const ACTIONS = {
  advance: "open the next stage now (past the last, the release becomes the fleet's); refused unless active",
  pause: "offer the release to no one new until resumed",
  resume: "resume a paused or halted rollout (resuming a halt accepts the failures it stopped for)",
  abort: "end the rollout: the fleet stays on the previous release",
} as const;

const services = () => import("../../../server/services/rollouts.ts");

/** The settings as POST /v1/rollouts takes them, from the options; checked by the same schema, a mistake is a usage error naming the option. */
async function settingsOf(args: { json: boolean; version: string; stages?: string; minStageSeconds?: number; minOkShare?: number; haltFailures?: number; haltFailureShare?: number; reportTimeoutSeconds?: number }) {
  const { rolloutSettings } = await import("../../../server/services/rollout-rules.ts");
  const body = {
    version: args.version,
    stages: args.stages?.split(",").map((stage) => (stage.trim() === "" ? Number.NaN : Number(stage))),
    min_stage_seconds: args.minStageSeconds,
    min_ok_share: args.minOkShare,
    halt_failures: args.haltFailures,
    halt_failure_share: args.haltFailureShare,
    report_timeout_seconds: args.reportTimeoutSeconds,
  };
  const parsed = rolloutSettings.safeParse(Object.fromEntries(Object.entries(body).filter(([, value]) => value !== undefined)));
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0]!;
  const field = String(issue.path[0]);
  const given = field === "version" ? args.version : args[camel(field) as keyof typeof args];
  return failUsage(args.json ? ["--json"] : [], `${field === "version" ? "version" : `--${field.replace(/_/g, "-")}`} ${JSON.stringify(given ?? null)}: ${issue.message}`);
}

const camel = (field: string) => field.replace(/_(\w)/g, (_, c: string) => c.toUpperCase());

const percent = (share: number) => `${+(share * 100).toFixed(1)} %`;

function describeRollout(r: RolloutView): string {
  const head = `rollout ${r.id} of ${r.version} (${r.livemode ? "live" : "test"}, from ${r.previous_version ?? "no release"}): ${r.status}, stage ${r.stage.index + 1} of ${r.stages.length} (${r.stage.percent} %) since ${r.stage.started_at}`;
  const rows = r.counts.stages.map((s) => [`${s.percent} %`, s.open ? "open" : "", String(s.badges), String(s.downloaded), String(s.ok), String(s.failed)]);
  const limits = `advances after ${r.settings.min_stage_seconds} s with ${percent(r.settings.min_ok_share)} ok; halts at ${r.settings.halt_failures} failures or ${percent(r.settings.halt_failure_share)} of the stage; silent ${r.settings.report_timeout_seconds} s after a download = failed`;
  const lines = [head, limits, table(["stage", "", "badges", "downloaded", "ok", "failed"], rows)];
  if (r.status === "halted" && r.halt) {
    lines.push(`halted at ${r.halt.at}: ${r.halt.why}; resume or abort it`);
    for (const failure of r.halt.failures) lines.push(`  ${failure.device_id} (${failure.name}): ${failure.reason}`);
  }
  return lines.join("\n");
}

type RolloutArgs = AdminArgs & { mode: ModeName };

async function withRollouts(args: RolloutArgs, run: (store: Store, livemode: 0 | 1) => Promise<void>) {
  await withStore(args, (store) => run(store, livemodeOf(args.mode)));
}

export function rolloutCommands(y: Argv): Argv {
  let cli = y
    .demandCommand(1, "name a rollout command")
    .command(
      "create <version>",
      "start a staged rollout of a canary release whose canary reported ota=ok",
      (k) =>
        adminOptions(k)
          .positional("version", { type: "string", demandOption: true, describe: "the canary release's version" })
          .option("mode", modeOption)
          .option("stages", { type: "string", describe: "increasing percentages of the fleet ending at 100 (default 5,25,50,100)" })
          .option("min-stage-seconds", { type: "number", describe: "the least time a stage runs before it advances (default 3600)" })
          .option("min-ok-share", { type: "number", describe: "the share (0-1) of the stage's badges that must report ok before it advances (default 0.5)" })
          .option("halt-failures", { type: "number", describe: "halt at this many failing badges (default 5)" })
          .option("halt-failure-share", { type: "number", describe: "halt when this share (over 0, up to 1) of the stage's badges failed (default 0.05)" })
          .option("report-timeout-seconds", { type: "number", describe: "a badge silent this long after a download began counts as failed (default 1800)" }),
      async (args) => {
        const settings = await settingsOf(args);
        await withRollouts(args, async (store, livemode) => {
          const releases = (await releaseStoresOf(store, args))[livemode];
          const { createRollout } = await services();
          const view = await store.db.transaction().execute((trx) => createRollout(trx, releases, settings, new Date()));
          print(args, view, describeRollout(view));
        });
      },
    )
    .command(
      "list",
      "the mode's rollouts, newest first",
      (k) => adminOptions(k).option("mode", modeOption),
      (args) =>
        withRollouts(args, async (store, livemode) => {
          const views = await (await services()).listRolloutViews(store.db, livemode, new Date());
          const rows = views.map((r) => [r.id, r.version, r.status, `${r.stage.percent} %`, String(r.counts.ok), String(r.counts.failed), r.created_at]);
          print(args, { object: "list", data: views }, rows.length ? table(["id", "version", "status", "stage", "ok", "failed", "created"], rows) : `no ${args.mode} rollouts`);
        }),
    )
    .command(
      "show <version>",
      "a rollout: its stage, counts per stage, halt and why",
      (k) => adminOptions(k).positional("version", { type: "string", demandOption: true, describe: "the rollout's release version" }).option("mode", modeOption),
      (args) =>
        withRollouts(args, async (store, livemode) => {
          const { getRolloutView, rolloutIdOfVersion } = await services();
          const view = await getRolloutView(store.db, livemode, await rolloutIdOfVersion(store.db, livemode, args.version), new Date());
          print(args, view, describeRollout(view));
        }),
    );
  for (const [action, describe] of Object.entries(ACTIONS) as Array<[keyof typeof ACTIONS, string]>) {
    cli = cli.command(
      `${action} <version>`,
      describe,
      (k) => adminOptions(k).positional("version", { type: "string", demandOption: true, describe: "the rollout's release version" }).option("mode", modeOption),
      (args) =>
        withRollouts(args, async (store, livemode) => {
          const releases = (await releaseStoresOf(store, args))[livemode];
          const { actOnRollout, rolloutIdOfVersion } = await services();
          const id = await rolloutIdOfVersion(store.db, livemode, args.version);
          const view = await store.db.transaction().execute((trx) => actOnRollout(trx, releases, id, action, new Date()));
          print(args, view, describeRollout(view));
        }),
    );
  }
  return cli;
}
