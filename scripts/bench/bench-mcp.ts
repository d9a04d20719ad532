// The tool endpoint under load. Every request to /api/mcp is checked by the route, then answered
// by a fresh stateless SDK server (McpServer + transport built per request), so the figure that
// matters is what that costs next to a /v1 read doing comparable work on the same server in
// the same run: GET /v1/sessions/{id} (key check, one indexed query, JSON).
//
// Usage: npx tsx scripts/bench/bench-mcp.ts [--connections N] [--duration S] [--json]
import path from "node:path";
import { createApiKey } from "../../server/services/api-keys.ts";
import { createPipeline } from "../../server/services/pipelines.ts";
import { importSchool } from "../../server/services/school-import.ts";
import { openStore } from "../../server/store/database.ts";
import { commandLine, load, log, round, spawnBadgebench, stopServer, withTempDir, type AutocannonRequest, type LoadResult, type LoadSettings } from "./bench-common.ts";
import { benchArgs, positiveInt, writeReport } from "./bench-cli.ts";

interface Prepared {
  key: string;
  sessionId: string;
  pipelineId: string;
  stageId: string;
}

async function prepare(dataDir: string): Promise<Prepared> {
  const store = await openStore({ dataDir, sync: "normal" });
  try {
    const day = new Date().toISOString().slice(0, 10);
    await importSchool(
      store.db,
      {
        rooms: [{ code: "R1", name: "Room 1" }],
        students: [{ external_id: "S1", name: "Student 1" }],
        courses: [{ code: "MATH", name: "Mathematics" }],
        enrollments: [{ course_code: "MATH", external_ids: ["S1"] }],
        sessions: [{ course_code: "MATH", room: "R1", starts_at: `${day}T08:00:00Z`, ends_at: `${day}T09:00:00Z` }],
      },
      { mode: "test" },
    );
    const key = await createApiKey(store.db, { mode: "test", scopes: ["attendance:read", "pipelines:write"], name: "bench mcp" });
    const pipeline = await createPipeline(store.db, 0, {
      name: "Bench pipeline",
      overview: "Ten stages, read and updated under load.",
      owner_email: "bench@example.org",
      stages: Array.from({ length: 10 }, (_, i) => ({ title: `Stage ${i + 1}`, goal: `Goal ${i + 1}`, priority: "high", dueDate: "2026-06-01" })),
    });
    const session = await store.db.selectFrom("sessions").select("id").executeTakeFirstOrThrow();
    return { key: key.secret, sessionId: session.id, pipelineId: pipeline.pipeline_id, stageId: pipeline.stages[0]!.stage_id };
  } finally {
    await store.close();
  }
}

const mcp = (key: string, method: string, params?: unknown): AutocannonRequest => ({
  method: "POST",
  path: "/api/mcp",
  headers: { authorization: `Bearer ${key}`, "content-type": "application/json", accept: "application/json", "mcp-protocol-version": "2025-06-18" },
  body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, ...(params === undefined ? {} : { params }) }),
});

/** Sends the request once and refuses to measure one that does not succeed (a -32602 is a 200 too). */
async function checkOnce(url: string, request: AutocannonRequest): Promise<void> {
  const response = await fetch(`${url}${request.path}`, { method: request.method, headers: request.headers, body: request.body });
  const text = await response.text();
  const body = JSON.parse(text) as { error?: unknown; result?: { isError?: boolean } };
  if (response.status !== 200 || body.error !== undefined || body.result?.isError) {
    throw new Error(`${request.method} ${request.path} ${request.body ?? ""} does not succeed: ${response.status} ${text}`);
  }
}

interface Row extends LoadResult {
  name: string;
  /** requests per second relative to the /v1 baseline of the same run */
  ratio: number;
}

async function main(): Promise<void> {
  const values = benchArgs({ connections: { type: "string", default: "10" }, duration: { type: "string", default: "5" } });
  const settings: LoadSettings = { connections: positiveInt("connections", values.connections), durationS: positiveInt("duration", values.duration), warmupS: 1 };

  await withTempDir("badgebench-bench-mcp-", async (tmp) => {
    const dataDir = path.join(tmp, "data");
    const prepared = await prepare(dataDir);
    const { child, url } = await spawnBadgebench(dataDir, "full");
    try {
      const runs: [string, AutocannonRequest][] = [
        ["baseline GET /v1/sessions/{id}", { method: "GET", path: `/v1/sessions/${prepared.sessionId}`, headers: { authorization: `Bearer ${prepared.key}` } }],
        ["initialize", mcp(prepared.key, "initialize", { protocolVersion: "2025-06-18", capabilities: {} })],
        ["tools/list", mcp(prepared.key, "tools/list")],
        ["get_pipeline (10 stages)", mcp(prepared.key, "tools/call", { name: "get_pipeline", arguments: { pipeline_id: prepared.pipelineId } })],
        ["list_pipelines", mcp(prepared.key, "tools/call", { name: "list_pipelines", arguments: {} })],
        ["update_stage due_date (write, sync=full)", mcp(prepared.key, "tools/call", { name: "update_stage", arguments: { stage_id: prepared.stageId, due_date: "2026-07-01" } })],
      ];
      const rows: Row[] = [];
      for (const [name, request] of runs) {
        await checkOnce(url, request);
        log(`measuring ${name}`);
        const result = await load(url, settings, [request]);
        if (result.non2xx > 0 || result.errors > 0) throw new Error(`${name}: ${result.non2xx} non-2xx, ${result.errors} errors`);
        rows.push({ name, ...result, ratio: rows.length === 0 ? 1 : round(result.rps / rows[0]!.rps, 3) });
      }
      const report = { command: commandLine("bench-mcp.ts"), connections: settings.connections, duration_s: settings.durationS, runs: rows };
      writeReport(report, values.json, (r) => [
        `${r.connections} connections, ${r.duration_s} s each after 1 s warm-up`,
        ...r.runs.map((row) => `  ${row.name.padEnd(42)} ${row.rps.toFixed(1).padStart(8)} req/s  p50 ${row.p50_ms} ms  p99 ${row.p99_ms} ms  ratio ${row.ratio}`),
      ]);
    } finally {
      await stopServer(child);
    }
  });
}

await main();
