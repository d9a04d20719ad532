// Benchmarks GET /v1/devices as the fleet page calls it, at `--badges` (10,000) badges: every
// state is worked out per request from each badge's latest fetch and report, so a page costs a
// pass over the whole mode. Half the badges have a fetch and a report (as after a rollout).
// Figures, medians of `--requests` (30) each, alternating: the first page sorted by state (the
// page's default), a page filtered to one state, the 100th page of a cursor walk by name; the
// baseline, in the same run, is GET /v1/devices/{id} (one badge, the same auth and state rules).
// Usage: npx tsx scripts/bench/bench-fleet-list.ts [--badges 10000] [--requests 30] [--json]
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { pino } from "pino";
import { buildAppImage } from "../../firmware/index.ts";
import { startServer } from "../../server/main.ts";
import { publishRelease } from "../../server/releases/publishing.ts";
import { FileReleaseStore } from "../../server/releases/release-store.ts";
import { createApiKey } from "../../server/services/api-keys.ts";
import { importSchool } from "../../server/services/school-import.ts";
import { commandLine, log, median, percentile, round, cpusAndNode } from "./bench-common.ts";
import { benchArgs, positiveInt, writeReport } from "./bench-cli.ts";

const TARGET_MS = 250;
const PAGE = 50;

async function main(): Promise<void> {
  const values = benchArgs({ badges: { type: "string", default: "10000" }, requests: { type: "string", default: "30" } });
  const badges = positiveInt("badges", values.badges);
  const requests = positiveInt("requests", values.requests);
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "badgebench-bench-fleet-"));
  const server = await startServer({ dataDir, port: 0, host: "127.0.0.1", sync: "normal", logger: pino({ level: "silent" }) });
  try {
    const db = server.store.db;
    await importSchool(db, { rooms: [{ code: "R1", name: "Room 1" }, { code: "R2", name: "Room 2" }], students: [], courses: [], enrollments: [], sessions: [] }, { mode: "test" });
    const password = "bench-wifi";
    const releases = new FileReleaseStore(dataDir, 0);
    for (const version of ["1.4.0", "1.5.0"]) {
      const image = path.join(dataDir, `${version}.bin`);
      fs.writeFileSync(image, buildAppImage({ version, size: 64 * 1024 }));
      await publishRelease(db, releases, { imagePath: image, version, notes: [], devWifiPassword: password });
    }
    log(`inserting ${badges} badges`);
    const now = Date.now();
    const at = (agoMs: number) => new Date(now - agoMs).toISOString();
    await db.transaction().execute(async (trx) => {
      for (let from = 0; from < badges; from += 500) {
        const ids = Array.from({ length: Math.min(500, badges - from) }, (_, j) => from + j);
        await trx
          .insertInto("devices")
          .values(
            ids.map((i) => ({
              id: `dev_bench${String(i).padStart(6, "0")}`,
              livemode: 0 as const,
              room: i % 2 === 0 ? "R1" : "R2",
              model: i % 3 === 0 ? "badge-v1" : "badge-v2",
              name: `Badge ${i}`,
              created_at: at(badges - i),
              token_lookup: null,
              token_hash: null,
              token_hint: null,
              revoked_at: null,
              installed_version: i % 7 === 0 ? null : i % 2 === 0 ? "1.5.0" : "1.4.0",
              installed_display: null,
              battery_volts: 3.5 + (i % 80) / 100,
              charging: (i % 2) as 0 | 1,
              last_check_at: at(i * 1000),
              last_sync_at: at(i * 500),
              offered_version: null,
              offered_at: null,
            })),
          )
          .execute();
        const rolledOut = ids.filter((i) => i % 2 === 0);
        if (rolledOut.length === 0) continue;
        await trx
          .insertInto("ota_fetches")
          .values(rolledOut.map((i) => ({ id: `fet_bench${i}`, device_id: `dev_bench${String(i).padStart(6, "0")}`, version: "1.5.0", size: 65536, first_byte: 0, last_byte: 65535, bytes_sent: 65536, outcome: "completed" as const, started_at: at(7_200_000), ended_at: at(7_190_000) })))
          .execute();
        await trx
          .insertInto("ota_reports")
          .values(rolledOut.map((i) => ({ id: `rpt_bench${i}`, device_id: `dev_bench${String(i).padStart(6, "0")}`, version: "1.5.0", outcome: i % 10 === 0 ? ("err" as const) : ("ok" as const), message: i % 10 === 0 ? "download cut at 51%" : null, report: i % 10 === 0 ? "err|1.5.0|download cut at 51%" : "ok|1.5.0", received_at: at(7_000_000) })))
          .execute();
      }
    });
    const key = (await createApiKey(db, { mode: "test", scopes: ["devices:read"] })).secret;
    const get = async (urlPath: string) => {
      const started = performance.now();
      const response = await fetch(`${server.url}${urlPath}`, { headers: { authorization: `Bearer ${key}` } });
      const body = (await response.json()) as { next_cursor?: string | null; total_count?: number };
      if (response.status !== 200) throw new Error(`${urlPath}: HTTP ${response.status} ${JSON.stringify(body)}`);
      return { ms: performance.now() - started, body };
    };

    // The cursor of the 99th page, for the 100th (a walk sorted by name).
    let cursor: string | null | undefined = null;
    for (let page = 1; page < 100 && cursor !== undefined; page++) {
      const { body } = await get(`/v1/devices?sort=name&limit=${PAGE}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
      cursor = body.next_cursor ?? undefined;
    }
    if (!cursor) throw new Error(`fewer than 100 pages of ${PAGE}: use --badges 5000 or more`);
    const kinds = {
      first_page_by_state: `/v1/devices?sort=state&limit=${PAGE}`,
      filtered_failed: `/v1/devices?state=failed&sort=last_seen&order=desc&limit=${PAGE}`,
      page_100_by_name: `/v1/devices?sort=name&limit=${PAGE}&cursor=${encodeURIComponent(cursor)}`,
      baseline_one_badge: "/v1/devices/dev_bench000042",
    };
    const samples = Object.fromEntries(Object.keys(kinds).map((k) => [k, [] as number[]])) as Record<keyof typeof kinds, number[]>;
    for (const kind of Object.keys(kinds) as (keyof typeof kinds)[]) await get(kinds[kind]);
    for (let i = 0; i < requests; i++) {
      for (const kind of Object.keys(kinds) as (keyof typeof kinds)[]) samples[kind].push((await get(kinds[kind])).ms);
    }
    const figures = Object.fromEntries(
      Object.entries(samples).map(([kind, ms]) => [kind, { median_ms: round(median(ms), 1), p90_ms: round(percentile(ms, 90), 1) }]),
    ) as Record<keyof typeof kinds, { median_ms: number; p90_ms: number }>;
    const report = {
      figure: "fleet_list",
      badges,
      requests,
      machine: cpusAndNode(),
      ...figures,
      target_ms: TARGET_MS,
      pass: figures.first_page_by_state.median_ms < TARGET_MS,
      command: commandLine("bench-fleet-list.ts"),
    };
    writeReport(report, values.json, (r) => {
      const f = figures;
      return [
        ...Object.entries(f).map(([kind, k]) => `${kind}: median ${k.median_ms} ms, p90 ${k.p90_ms} ms`),
        `| GET /v1/devices at ${badges.toLocaleString("en-US")} badges (half with a fetch and a report), ${PAGE} per page, ${requests} requests each, alternating; baseline GET /v1/devices/{id} | ` +
          `first page by state **${f.first_page_by_state.median_ms} ms** (p90 ${f.first_page_by_state.p90_ms}), filtered to failed ${f.filtered_failed.median_ms} ms, 100th page by name ${f.page_100_by_name.median_ms} ms; one badge ${f.baseline_one_badge.median_ms} ms | ` +
          `first page under ${TARGET_MS} ms | \`${r.command}\` |`,
      ];
    });
  } finally {
    await server.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

await main();
