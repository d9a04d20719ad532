// Staged rollouts over /v1 and the badge endpoints (issue 24): who is offered what in each stage,
// what halts a rollout (an ota=err, a badge silent past the report timeout) and what an operator
// can do then, the completion that makes the release the fleet's, the webhook events, the modes
// kept apart, and every bad input refused with a 4xx that names it and changes nothing.
import { setTimeout } from "node:timers/promises";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { CHANGE_CHECK_INTERVAL_MS } from "../../server/store/change-feed.ts";
import { run } from "./cli-process.ts";
import { startRolloutFixture, type RolloutFixture } from "./rollout-fixture.ts";

const FIRST_STAGE = 10;
let f: RolloutFixture;
let minor = 4;

beforeAll(async () => {
  f = await startRolloutFixture({ firstStage: FIRST_STAGE, inside: 3, outside: 6 });
  await f.h.publish("1.4.0");
});
afterAll(() => f?.close());
// A test that failed half-way leaves no open rollout behind for the next one (one is open at a time).
afterEach(async () => {
  for (const rollout of (await f.call("GET", "/v1/rollouts")).body.data) {
    if (["active", "paused", "halted"].includes(rollout.status)) await f.call("POST", `/v1/rollouts/${rollout.id}/abort`);
  }
});

/** A new canary release whose canary (r1) reported ok: ready for a rollout. */
async function confirmedRelease(): Promise<string> {
  const version = `1.${++minor}.0`;
  await f.h.publish(version, { canary: f.h.devices.r1.id });
  await f.report(f.h.devices.r1.token, version, `ok|${version}`);
  return version;
}

const inside = () => f.badges.filter((b) => b.place < FIRST_STAGE);
const outside = () => f.badges.filter((b) => b.place >= FIRST_STAGE);

async function create(version: string, settings: Record<string, unknown> = {}) {
  const created = await f.call("POST", "/v1/rollouts", { body: { version, stages: [FIRST_STAGE, 50, 100], min_stage_seconds: 600, min_ok_share: 0.5, halt_failures: 2, halt_failure_share: 1, report_timeout_seconds: 300, ...settings } });
  expect(created.status).toBe(201);
  return created.body;
}

const read = async (id: string) => (await f.call("GET", `/v1/rollouts/${id}`)).body;

async function events(type: string) {
  const answer = await f.call("GET", `/v1/events?type=${type}&limit=200`);
  return answer.body.data as any[];
}

describe("a staged rollout", () => {
  it("offers the release only to badges inside the current stage; the others are told they are current", async () => {
    const version = await confirmedRelease();
    const rollout = await create(version);
    expect(rollout).toMatchObject({ status: "active", version, previous_version: "1.4.0", stage: { index: 0, percent: FIRST_STAGE } });
    for (const badge of inside()) expect(await f.checkAs(badge.token, "1.4.0")).toEqual({ U: version, N: undefined });
    for (const badge of outside()) {
      expect(await f.checkAs(badge.token, "1.4.0")).toEqual({ U: undefined, N: "1.4.0" });
      expect(await f.download(badge.token, version)).toBe(403);
    }
    expect(await f.download(inside()[0]!.token, version)).toBe(200);
    const view = await read(rollout.id);
    expect(view.counts.stages[0]).toMatchObject({ percent: FIRST_STAGE, open: true, downloaded: 1 });
    expect(view.counts.stages.slice(1).every((s: any) => s.downloaded === 0 && !s.open)).toBe(true);
    expect((await f.call("POST", `/v1/rollouts/${rollout.id}/abort`)).status).toBe(200);
  });

  it("halts on an ota=err report for its version, names the badge and why, and offers to no one new", async () => {
    const version = await confirmedRelease();
    const rollout = await create(version, { halt_failures: 1 });
    const [failing, waiting] = inside();
    expect(await f.download(failing!.token, version)).toBe(200);
    await f.report(failing!.token, "1.4.0", `err|${version}|MD5 mismatch`);
    const halted = await read(rollout.id);
    expect(halted.status).toBe("halted");
    expect(halted.halt.failures).toEqual([expect.objectContaining({ device_id: failing!.id, reason: "ota=err: MD5 mismatch" })]);
    expect(halted.halt.why).toBe("1 badge failed, the limit is 1");
    expect(await f.checkAs(waiting!.token, "1.4.0")).toEqual({ U: undefined, N: "1.4.0" });
    const [event] = (await events("release.rollout_halted")).filter((e) => e.data.object.id === rollout.id);
    expect(event.data.object).toMatchObject({ status: "halted", halt: { failures: [{ device_id: failing!.id }] } });

    const refused = await f.call("POST", `/v1/rollouts/${rollout.id}/advance`);
    expect(refused).toMatchObject({ status: 409, body: { error: { code: "rollout_halted", param: "id" } } });
    expect(await read(rollout.id)).toMatchObject({ status: "halted", stage: { index: 0 }, history: halted.history });

    // Resuming accepts the failure it stopped for: offers again, and the same failure halts no more.
    const resumed = await f.call("POST", `/v1/rollouts/${rollout.id}/resume`);
    expect(resumed.body).toMatchObject({ status: "active", failures: [] });
    expect(await f.checkAs(waiting!.token, "1.4.0")).toEqual({ U: version, N: undefined });
    await f.h.server.evaluateRollouts();
    expect((await read(rollout.id)).status).toBe("active");
    await f.call("POST", `/v1/rollouts/${rollout.id}/abort`);
  });

  it("counts a badge that downloaded and stays silent past the report timeout as failed (a bricked badge reports nothing)", async () => {
    const version = await confirmedRelease();
    const rollout = await create(version, { halt_failures: 1, report_timeout_seconds: 300 });
    const silent = inside()[0]!;
    expect(await f.download(silent.token, version)).toBe(200);
    f.advanceClock(299_000);
    await f.h.server.evaluateRollouts();
    expect((await read(rollout.id)).status).toBe("active");
    f.advanceClock(2_000);
    await f.h.server.evaluateRollouts();
    const halted = await read(rollout.id);
    expect(halted).toMatchObject({ status: "halted", halt: { failures: [{ device_id: silent.id, reason: "no report 300 s after its download began" }] } });

    // Aborted: the fleet stays on the previous release, the badges already on the new one are shown as such.
    const ran = inside()[1]!;
    await f.report(ran.token, version, `ok|${version}`);
    const aborted = await f.call("POST", `/v1/rollouts/${rollout.id}/abort`);
    // The canary (r1) and `ran` run it.
    expect(aborted.body).toMatchObject({ status: "aborted", counts: { ok: 2 } });
    expect((await f.h.releases.read()).fleet).toBe("1.4.0");
    for (const badge of f.badges) expect(await f.checkAs(badge.token, "1.4.0")).toEqual({ U: undefined, N: "1.4.0" });
    for (const action of ["advance", "resume", "pause", "abort"]) {
      expect(await f.call("POST", `/v1/rollouts/${rollout.id}/${action}`)).toMatchObject({ status: 409, body: { error: { code: "rollout_ended" } } });
    }
  });

  it("advances stage by stage once a stage is old enough and enough of it reported ok, then completes and promotes", async () => {
    const version = await confirmedRelease();
    const rollout = await create(version, { min_stage_seconds: 600, min_ok_share: 1 });
    const stageBadges = async () => {
      const view = await read(rollout.id);
      return f.badges.filter((b) => b.place < view.stage.percent);
    };
    for (const [index, percent] of [[1, 50], [2, 100]] as const) {
      for (const badge of await stageBadges()) await f.report(badge.token, version, `ok|${version}`);
      await f.h.server.evaluateRollouts();
      expect((await read(rollout.id)).stage.index).toBe(index - 1);
      f.advanceClock(600_000);
      // The harness's own badges are in the fleet too: they report ok where their place is.
      for (const device of Object.values(f.h.devices)) await f.report(device.token, version, `ok|${version}`);
      await f.h.server.evaluateRollouts();
      expect(await read(rollout.id)).toMatchObject({ status: "active", stage: { index, percent } });
    }
    for (const badge of f.badges) expect(await f.checkAs(badge.token, "1.4.0")).toMatchObject({ U: version });
    for (const badge of f.badges) await f.report(badge.token, version, `ok|${version}`);
    f.advanceClock(600_000);
    await f.h.server.evaluateRollouts();
    const done = await read(rollout.id);
    expect(done).toMatchObject({ status: "completed", counts: { failed: 0 } });
    expect(done.history.map((h: any) => `${h.action} ${h.stage} ${h.by}`)).toEqual(["created 10 operator", "advance 50 rules", "advance 100 rules", "completed 100 rules"]);
    expect((await f.h.releases.read()).fleet).toBe(version);
    const mine = async (type: string) => (await events(type)).filter((e) => e.data.object.id === rollout.id).length;
    expect(await mine("release.rollout_advanced")).toBe(2);
    expect(await mine("release.rollout_completed")).toBe(1);
  });

  it("lets an operator pause, resume and advance by hand", async () => {
    const version = await confirmedRelease();
    const rollout = await create(version);
    // Promoting it by hand would go around the rollout: refused while it is open.
    const promote = await f.call("POST", `/v1/releases/${version}/promote`);
    expect(promote).toMatchObject({ status: 409, body: { error: { code: "release_in_rollout" } } });
    const paused = await f.call("POST", `/v1/rollouts/${rollout.id}/pause`);
    expect(paused.body.status).toBe("paused");
    expect((await f.checkAs(inside()[0]!.token, "1.4.0")).U).not.toBe(version);
    expect(await f.call("POST", `/v1/rollouts/${rollout.id}/advance`)).toMatchObject({ status: 409, body: { error: { code: "rollout_paused" } } });
    await f.call("POST", `/v1/rollouts/${rollout.id}/resume`);
    const advanced = await f.call("POST", `/v1/rollouts/${rollout.id}/advance`);
    expect(advanced.body).toMatchObject({ status: "active", stage: { index: 1, percent: 50 } });
    expect(advanced.body.history.at(-1)).toMatchObject({ action: "advance", by: "operator" });
    const list = await f.call("GET", "/v1/rollouts", { key: f.keys.read });
    expect(list.body).toMatchObject({ object: "list", has_more: false, livemode: false });
    expect(list.body.data[0].id).toBe(rollout.id);
    await f.call("POST", `/v1/rollouts/${rollout.id}/abort`);
  });
});

describe("a rollout moved by another process", () => {
  // The server keeps the mode's open rollout in memory for the checks and downloads; a move by
  // `badgebench release rollout` in a process of its own must reach it: on SQLite from the next
  // check (the database's data_version), on PostgreSQL by the command's notification, and at the
  // latest CHANGE_CHECK_INTERVAL_MS after the server last read the change version row.
  const moveElsewhere = async (action: "pause" | "resume" | "abort", version: string) => {
    const database = f.h.databaseUrl === undefined ? [] : ["--database", f.h.databaseUrl];
    const moved = await run(["release", "rollout", action, version, "--data", f.h.dataDir, ...database]);
    expect(moved.code, moved.stderr).toBe(0);
    if (f.h.databaseUrl !== undefined) await setTimeout(CHANGE_CHECK_INTERVAL_MS);
  };

  it("is offered from the next check once created here, and followed by the checks and downloads once paused, resumed and aborted there", async () => {
    const version = await confirmedRelease();
    const badge = inside()[0]!;
    // The server has read that the mode has no open rollout, and keeps that until a change.
    for (let i = 0; i < 2; i++) expect((await f.checkAs(badge.token, "1.4.0")).U).not.toBe(version);
    await create(version);
    // Created through this server: offered from the next check. Read twice: the second from its cache.
    for (let i = 0; i < 2; i++) expect(await f.checkAs(badge.token, "1.4.0")).toEqual({ U: version, N: undefined });
    // Paused or aborted, the badge is answered as without the rollout (the fleet's release, which
    // an earlier test's completed rollout may have made newer than 1.4.0).
    await moveElsewhere("pause", version);
    expect((await f.checkAs(badge.token, "1.4.0")).U).not.toBe(version);
    expect(await f.download(badge.token, version)).toBe(403);
    await moveElsewhere("resume", version);
    expect(await f.checkAs(badge.token, "1.4.0")).toEqual({ U: version, N: undefined });
    expect(await f.download(badge.token, version)).toBe(200);
    await moveElsewhere("abort", version);
    expect((await f.checkAs(badge.token, "1.4.0")).U).not.toBe(version);
    expect(await f.download(badge.token, version)).toBe(403);
  });
});

describe("webhook events", () => {
  it("lets an endpoint subscribe to the three rollout events and sends a test delivery of each, shaped as documented", async () => {
    const types = ["release.rollout_advanced", "release.rollout_halted", "release.rollout_completed"];
    const endpoint = await f.call("POST", "/v1/webhook_endpoints", { key: f.keys.webhooks, body: { url: "http://127.0.0.1:9/hooks", enabled_events: types } });
    expect(endpoint).toMatchObject({ status: 201, body: { enabled_events: types } });
    for (const type of types) {
      // The answer's event is held to the OpenAPI document's schema of that event by `call`.
      const delivery = await f.call("POST", `/v1/webhook_endpoints/${endpoint.body.id}/test`, { key: f.keys.webhooks, body: { type } });
      expect(delivery).toMatchObject({ status: 200, body: { event: { type, data: { object: { object: "release_rollout" } } } } });
    }
  });
});

describe("modes and scopes", () => {
  it("keeps a test key away from live rollouts and needs releases:write to change one", async () => {
    const version = await confirmedRelease();
    expect((await f.call("POST", "/v1/rollouts", { key: f.keys.read, body: { version } })).status).toBe(403);
    expect((await f.call("GET", "/v1/rollouts", { key: f.keys.devicesOnly })).status).toBe(403);
    // The live key's mode has no such release: nothing is created there, and the test fleet is untouched.
    expect(await f.call("POST", "/v1/rollouts", { key: f.keys.liveWrite, body: { version } })).toMatchObject({ status: 404, body: { error: { code: "release_unknown", param: "version" } } });
    const rollout = await create(version);
    expect((await f.call("GET", `/v1/rollouts/${rollout.id}`, { key: f.keys.liveWrite })).status).toBe(404);
    expect((await f.call("POST", `/v1/rollouts/${rollout.id}/abort`, { key: f.keys.liveWrite })).status).toBe(404);
    expect((await f.call("GET", "/v1/rollouts", { key: f.keys.liveWrite })).body.data).toEqual([]);
    expect((await read(rollout.id)).status).toBe("active");
    await f.call("POST", `/v1/rollouts/${rollout.id}/abort`);
  });
});

describe("bad input", () => {
  const refusals: Array<[string, Record<string, unknown>, string]> = [
    ["stages not increasing", { stages: [5, 50, 25, 100] }, "stages"],
    ["a stage over 100", { stages: [5, 150] }, "stages.1"],
    ["no stages", { stages: [] }, "stages"],
    ["stages not ending at 100", { stages: [5, 50] }, "stages"],
    ["a failure share over 1", { halt_failure_share: 1.5 }, "halt_failure_share"],
    ["a failure share of 0", { halt_failure_share: 0 }, "halt_failure_share"],
    ["no failures allowed at all", { halt_failures: 0 }, "halt_failures"],
    ["an ok share below 0", { min_ok_share: -0.1 }, "min_ok_share"],
    ["a report timeout under a minute", { report_timeout_seconds: 5 }, "report_timeout_seconds"],
    ["an unknown field", { stage: [5] }, "stage"],
  ];

  it.each(refusals)("refuses %s with a 400 naming it, and creates nothing", async (_, settings, param) => {
    const version = `1.${minor}.0`;
    const before = (await f.call("GET", "/v1/rollouts")).body.data.length;
    const answer = await f.call("POST", "/v1/rollouts", { body: { version, ...settings } });
    expect(answer).toMatchObject({ status: 400, body: { error: { param } } });
    expect((await f.call("GET", "/v1/rollouts")).body.data.length).toBe(before);
  });

  it("refuses a second rollout of one version, a second open rollout, and a release whose canary has not confirmed", async () => {
    const version = await confirmedRelease();
    const rollout = await create(version);
    expect(await f.call("POST", "/v1/rollouts", { body: { version } })).toMatchObject({ status: 409, body: { error: { code: "rollout_exists", param: "version" } } });
    const next = await confirmedRelease();
    expect(await f.call("POST", "/v1/rollouts", { body: { version: next } })).toMatchObject({ status: 409, body: { error: { code: "rollout_open" } } });
    await f.call("POST", `/v1/rollouts/${rollout.id}/abort`);
    expect(await f.call("POST", "/v1/rollouts", { body: { version } })).toMatchObject({ status: 409, body: { error: { code: "rollout_exists" } } });
    const unconfirmed = `1.${++minor}.0`;
    await f.h.publish(unconfirmed, { canary: f.h.devices.r1.id });
    expect(await f.call("POST", "/v1/rollouts", { body: { version: unconfirmed } })).toMatchObject({ status: 409, body: { error: { code: "canary_not_confirmed" } } });
    expect(await f.call("GET", "/v1/rollouts/rol_nope")).toMatchObject({ status: 404, body: { error: { code: "resource_missing" } } });
    expect(await f.call("POST", "/v1/rollouts/nope/advance")).toMatchObject({ status: 404 });
  });
});
