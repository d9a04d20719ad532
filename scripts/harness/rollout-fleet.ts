// A staged rollout played on a simulated fleet (issue 24), for the test (a small fleet) and the
// benchmark (2,000 badges): a server in this process whose rollout clock this module moves, a
// fleet at 1.4.0, a release confirmed by its canary, then rounds in which every badge that still
// boots is switched on and its wearer asks for the update (badge-sim's fleet runner). A chosen
// share of the badges crash as they boot the new release (a per-badge fault: every k-th badge in
// rollout order, so each stage holds its share); a crashed badge reports nothing and is out of
// later rounds. After each round the clock moves past the stage's minimum time and the report
// timeout, the server evaluates, and the simulation stops once the rollout halts or completes.
import { runFleet, type FleetBadge } from "../../badge-sim/runners/fleet.ts";
import { createApiKey } from "../../server/services/api-keys.ts";
import { rolloutPlace } from "../../server/services/rollout-rules.ts";
import { fetchesOfVersion } from "../../server/store/rollouts-store.ts";
import { startSimServer } from "./sim-server.ts";

const FLEET_VERSION = "1.4.0";
export const ROLLOUT_VERSION = "1.5.0";
const DEFAULT_IMAGE_BYTES = 64 * 1024;
const docked = { volts: 4.1, charging: true } as const;

export interface RolloutSimulationOptions {
  badges: number;
  /** the share of badges whose board crashes the new release as it boots (0: a good release) */
  faultyShare: number;
  stages: number[];
  /** POST /v1/rollouts fields besides version and stages */
  settings: { min_stage_seconds: number; min_ok_share: number; halt_failures: number; halt_failure_share: number; report_timeout_seconds: number };
  /** the images' size in bytes (default 64 KiB) */
  imageBytes?: number;
  /** wall ms over which a round's badges boot (default 1,000) */
  spreadMs?: number;
  threads?: number;
}

export interface RolloutRound {
  /** the stage open while the round ran */
  percent: number;
  /** badges that installed the release this round, and those that crashed on it */
  updated: number;
  crashed: number;
  /** badges told they are current (outside the stage, or already on the release) */
  current: number;
  /** the rollout's status after the round's evaluation */
  status: string;
  /** every outcome of the round with its reason, as the fleet runner counted them */
  outcomes: Array<{ outcome: string; reason: string | null; count: number }>;
}

export interface RolloutSimulation {
  /** the rollout as GET /v1/rollouts/{id} answers at the end */
  rollout: any;
  rounds: RolloutRound[];
  /** the badges, sorted by place, with whether the release crashes them */
  badges: Array<{ id: string; place: number; faulty: boolean }>;
  /** ids of the badges that started a download of the release */
  downloaded: Set<string>;
  /** badges that crashed on the release: harmed before the rollout halted */
  harmed: number;
  /** badges the simulation crashed on (a simulator bug, never a badge outcome) */
  simulatorCrashes: number;
  wallMs: number;
}

export async function simulateRollout(options: RolloutSimulationOptions): Promise<RolloutSimulation> {
  const began = performance.now();
  let offsetMs = 0;
  const server = await startSimServer({ rollouts: { clock: () => new Date(Date.now() + offsetMs), evaluateEveryMs: 0 } });
  try {
    const size = options.imageBytes ?? DEFAULT_IMAGE_BYTES;
    await server.publish({ version: FLEET_VERSION, size });
    const devices = await Promise.all(Array.from({ length: options.badges }, (_, i) => server.addDevice(`rollout badge ${i}`)));
    // Every k-th badge in rollout order, the first included; none for a good release.
    const every = options.faultyShare > 0 ? Math.round(1 / options.faultyShare) : 0;
    const badges = devices
      .map((device) => ({ ...device, place: rolloutPlace(device.id) }))
      .sort((a, b) => a.place - b.place)
      .map((badge, i) => ({ ...badge, faulty: every > 0 && i % every === 0, version: FLEET_VERSION, crashed: false }));
    // The canary: the last badge in rollout order that the release does not crash.
    const canary = badges.findLast((badge) => !badge.faulty)!;
    await server.publish({ version: ROLLOUT_VERSION, size, canary: canary.id });
    const canaryRun = await runFleet({ serverUrl: server.url, badges: [{ token: canary.token, version: FLEET_VERSION, battery: docked }], updateShare: 1, spreadMs: 0 });
    if (canaryRun.results[0]?.outcome !== "updated") throw new Error(`the canary did not update: ${JSON.stringify(canaryRun.results[0])}`);
    canary.version = ROLLOUT_VERSION;

    const key = (await createApiKey(server.store.db, { mode: "test", scopes: ["releases:write"], name: "rollout simulation" })).secret;
    const api = async (method: "GET" | "POST", urlPath: string, body?: unknown) => {
      const response = await fetch(`${server.url}${urlPath}`, {
        method,
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...(method === "POST" && { "idempotency-key": `${urlPath} ${Date.now()}` }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const answer = (await response.json()) as any;
      if (!response.ok) throw new Error(`${method} ${urlPath}: ${response.status} ${JSON.stringify(answer)}`);
      return answer;
    };
    let rollout = await api("POST", "/v1/rollouts", { version: ROLLOUT_VERSION, stages: options.stages, ...options.settings });

    const rounds: RolloutRound[] = [];
    let simulatorCrashes = 0;
    // One round per stage, and one more: a halted or completed rollout ends it.
    for (let round = 0; round <= options.stages.length && rollout.status === "active"; round++) {
      const playing = badges.filter((badge) => !badge.crashed);
      const specs: FleetBadge[] = playing.map((badge) => ({ token: badge.token, version: badge.version, battery: docked, crashOnBoot: badge.faulty ? [ROLLOUT_VERSION] : [] }));
      const summary = await runFleet({ serverUrl: server.url, badges: specs, updateShare: 1, spreadMs: options.spreadMs ?? 1_000, seed: round + 1, threads: options.threads });
      const count = (outcome: string) => summary.results.filter((result) => result.outcome === outcome).length;
      summary.results.forEach((result, i) => {
        const badge = playing[i]!;
        if (result.outcome === "bricked") badge.crashed = true;
        if (result.version) badge.version = result.version;
      });
      simulatorCrashes += summary.crashed;
      // Past the stage's minimum time and every download's report timeout: what the server's timer would see.
      offsetMs += (Math.max(options.settings.min_stage_seconds, options.settings.report_timeout_seconds) + 1) * 1000;
      await server.evaluateRollouts();
      const percent = rollout.stage.percent as number;
      rollout = await api("GET", `/v1/rollouts/${rollout.id}`);
      rounds.push({ percent, updated: count("updated"), crashed: count("bricked"), current: count("current"), status: rollout.status, outcomes: summary.outcomes });
    }
    const fetches = await fetchesOfVersion(server.store.db, 0, ROLLOUT_VERSION, "");
    return {
      rollout,
      rounds,
      badges: badges.map(({ id, place, faulty }) => ({ id, place, faulty })),
      downloaded: new Set(fetches.map((fetch) => fetch.device_id)),
      harmed: badges.filter((badge) => badge.crashed).length,
      simulatorCrashes,
      wallMs: performance.now() - began,
    };
  } finally {
    await server.close();
  }
}
