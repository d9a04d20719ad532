// What the staged-rollout tests share: a badge harness whose rollout clock the test moves (the
// server's own timer off, so nothing moves unless the test says), a fleet of test badges with
// enough of them on either side of the first stage, and /v1 calls held to the OpenAPI document.
import { rolloutPlace } from "../../server/services/rollout-rules.ts";
import { createApiKey } from "../../server/services/api-keys.ts";
import { createDevice } from "../../server/services/devices.ts";
import type { ReleaseStoreKind } from "../../server/releases/release-store.ts";
import { lines, startBadgeHarness, type BadgeHarness } from "./badge-harness.ts";
import { checkAgainstOpenApi } from "./openapi-check.ts";

export interface RolloutFixture {
  h: BadgeHarness;
  /** ms the rollout clock is ahead of the system's; only ever grows */
  advanceClock(ms: number): void;
  keys: { write: string; read: string; liveWrite: string; devicesOnly: string; webhooks: string };
  /** badges of the test fleet, sorted by place; `inFirst` are inside the first stage */
  badges: Array<{ id: string; token: string; place: number }>;
  call(method: "GET" | "POST", urlPath: string, options?: { key?: string; body?: unknown; idempotencyKey?: string }): Promise<{ status: number; body: any }>;
  checkAs(token: string, version: string): Promise<{ U?: string; N?: string }>;
  report(token: string, version: string, report: string): Promise<void>;
  download(token: string, version: string): Promise<number>;
  close(): Promise<void>;
}

/** Makes badges until at least `inside` have a place below `firstStage` and `outside` do not. */
export async function startRolloutFixture(options: { firstStage: number; inside: number; outside: number; releases?: ReleaseStoreKind }): Promise<RolloutFixture> {
  let offsetMs = 0;
  const h = await startBadgeHarness({ releases: options.releases, rollouts: { clock: () => new Date(Date.now() + offsetMs), evaluateEveryMs: 0 } });
  const db = h.server.store.db;
  const key = async (mode: "test" | "live", scopes: string[]) => (await createApiKey(db, { mode, scopes, name: "rollout test" })).secret;
  const badges: RolloutFixture["badges"] = [];
  const count = (inside: boolean) => badges.filter((b) => (b.place < options.firstStage) === inside).length;
  while (count(true) < options.inside || count(false) < options.outside) {
    const { id, token } = await createDevice(db, { mode: "test", room: "R1", model: "badge-v2" });
    badges.push({ id, token, place: rolloutPlace(id) });
  }
  badges.sort((a, b) => a.place - b.place);
  let requests = 0;
  const fixture: RolloutFixture = {
    h,
    advanceClock: (ms) => (offsetMs += ms),
    keys: {
      write: await key("test", ["releases:write", "events:read"]),
      read: await key("test", ["releases:read"]),
      liveWrite: await key("live", ["releases:write"]),
      devicesOnly: await key("test", ["devices:read"]),
      webhooks: await key("test", ["webhooks:write"]),
    },
    badges,
    async call(method, urlPath, { key = fixture.keys.write, body, idempotencyKey } = {}) {
      const headers: Record<string, string> = { authorization: `Bearer ${key}` };
      if (body !== undefined) headers["content-type"] = "application/json";
      if (method === "POST") headers["idempotency-key"] = idempotencyKey ?? `rollout-test-${++requests}`;
      const response = await fetch(`${h.url}${urlPath}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
      const text = await response.text();
      const parsed = text ? JSON.parse(text) : undefined;
      checkAgainstOpenApi(method, urlPath, response.status, parsed);
      return { status: response.status, body: parsed };
    },
    async checkAs(token, version) {
      const answer = await h.check(token, lines("v=1", `sv=${version}`, "bat=4.1", "chg=1"));
      return { U: answer.get("U"), N: answer.get("N") };
    },
    async report(token, version, report) {
      const answer = await h.sync(token, lines("v=1", `sv=${version}`, "bat=4.1", "chg=1", `ota=${report}`));
      if (answer.status !== 200) throw new Error(`sync answered ${answer.status}: ${answer.text}`);
    },
    async download(token, version) {
      return (await h.badge("GET", `/api/badge/ota/download?v=${version}`, token)).status;
    },
    close: () => h.close(),
  };
  return fixture;
}
