// The store's tallies the benchmarks read back after a run (what the server recorded) and the list
// query's plan they print, on both databases: each counts exactly the rows it names, whatever
// else the tables hold.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createDevice } from "../../server/services/devices.ts";
import { importSchool } from "../../server/services/school-import.ts";
import { countRecordsByMethod, explainRecordsPage, gatherRecordStatistics, insertRecords } from "../../server/store/attendance-store.ts";
import { openStore, type Store } from "../../server/store/database.ts";
import { checkRecords, countDevicesOffered, recordCheck, recordSync } from "../../server/store/devices-store.ts";
import { countFetchesByOutcome, finishFetch, insertFetch } from "../../server/store/ota-store.ts";
import type { RecordsTable, TapResult } from "../../server/store/schema.ts";
import { countTapsByResult, insertTaps } from "../../server/store/taps-store.ts";
import { createTestStore, TEST_STORE, type TestStore } from "./test-database.ts";

const NOW = "2026-03-02T09:00:00.000Z";
const report = { installed_version: "1.0.0", installed_display: "1.0.0", battery_volts: 4.1, charging: 0 as const };

let dir: string;
let testStore: TestStore;
let store: Store;
let deviceIds: string[];
beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "badgebench-tallies-"));
  testStore = await createTestStore(dir);
  store = await openStore(testStore.options);
  await importSchool(store.db, JSON.parse(fs.readFileSync("fixtures/demo-school.json", "utf8")), { mode: "test", week: "2026-03-02" });
  deviceIds = [];
  for (const name of ["a", "b", "c", "d"]) deviceIds.push((await createDevice(store.db, { mode: "test", room: "R101", model: "m1", name })).id);
});
afterAll(async () => {
  await store.close();
  await testStore.drop();
  fs.rmSync(dir, { recursive: true, force: true });
});

describe("the tallies a benchmark reads back", () => {
  it("countDevicesOffered counts the badges that checked in and were offered that version", async () => {
    await recordCheck(store.db, deviceIds[0]!, report, NOW, "2.0.0");
    await recordCheck(store.db, deviceIds[1]!, report, NOW, "2.0.0");
    await recordCheck(store.db, deviceIds[2]!, report, NOW, "1.9.0");
    await recordCheck(store.db, deviceIds[3]!, report, NOW, null);
    expect(await countDevicesOffered(store.db, "2.0.0")).toBe(2);
    expect(await countDevicesOffered(store.db, "1.9.0")).toBe(1);
    expect(await countDevicesOffered(store.db, "3.0.0")).toBe(0);
  });

  it("countFetchesByOutcome gives every outcome, with the bytes its fetches sent", async () => {
    const fetch = (id: string) => ({ id, device_id: deviceIds[0]!, version: "2.0.0", size: 1000, first_byte: 0, last_byte: 999, bytes_sent: 0, outcome: "sending" as const, started_at: NOW, ended_at: null });
    for (const id of ["f1", "f2", "f3", "f4"]) await insertFetch(store.db, fetch(id));
    await finishFetch(store.db, "f1", "completed", 1000, NOW);
    await finishFetch(store.db, "f2", "completed", 1000, NOW);
    await finishFetch(store.db, "f3", "cut", 300, NOW);
    expect(await countFetchesByOutcome(store.db)).toEqual({
      completed: { fetches: 2, bytes_sent: 2000 },
      cut: { fetches: 1, bytes_sent: 300 },
      sending: { fetches: 1, bytes_sent: 0 },
    });
  });

  it("countTapsByResult counts the stored taps of one result", async () => {
    const tap = (i: number, result: TapResult) => ({
      id: `tap${i}`,
      livemode: 0 as const,
      device_id: deviceIds[i % 2]!,
      card_uid: `CARD${i}`,
      tapped_at: NOW,
      received_at: NOW,
      result,
      reason: result === "rejected" ? "unknown_card" : null,
      session_id: null,
      student_id: null,
      record_id: null,
    });
    await insertTaps(store.db, [tap(1, "accepted"), tap(2, "accepted"), tap(3, "accepted"), tap(4, "rejected")]);
    expect(await countTapsByResult(store.db, "accepted")).toBe(3);
    expect(await countTapsByResult(store.db, "rejected")).toBe(1);
  });
});

describe("records: the benchmark's counts and the list query's plan", () => {
  let courseCode: string;
  beforeAll(async () => {
    const session = await store.db.selectFrom("sessions").select(["id", "course_code"]).orderBy("starts_at").executeTakeFirstOrThrow();
    courseCode = session.course_code;
    const students = await store.db.selectFrom("students").select("id").orderBy("id").limit(3).execute();
    const record = (i: number, method: string): RecordsTable => ({
      id: `rec${i}`,
      livemode: 0,
      session_id: session.id,
      student_id: students[i]!.id,
      course_code: session.course_code,
      status: "present",
      recorded_at: `2026-03-02T09:0${i}:00.000Z`,
      method,
      device_id: method === "device" ? deviceIds[0]! : null,
      reason: null,
      created_at: NOW,
      updated_at: NOW,
    });
    await insertRecords(store.db, [record(0, "device"), record(1, "device"), record(2, "api")]);
  });

  it("countRecordsByMethod counts the records one capture method made", async () => {
    expect(await countRecordsByMethod(store.db, "device")).toBe(2);
    expect(await countRecordsByMethod(store.db, "api")).toBe(1);
  });

  it("explainRecordsPage gives the list query's plan, statistics gathered or not", async () => {
    const filter = { livemode: 0 as const, course_code: courseCode, since: "2026-03-01T00:00:00.000Z", until: "2026-03-09T00:00:00.000Z", limit: 201 };
    await gatherRecordStatistics(store.db);
    const firstPage = await explainRecordsPage(store.db, filter);
    const lastPage = await explainRecordsPage(store.db, { ...filter, after: ["2026-03-02T09:00:00.000Z", "rec0"] });
    for (const plan of [firstPage, lastPage]) {
      // SQLite names the index it walks; PostgreSQL's EXPLAIN ANALYZE ran the query and says how long it took.
      if (TEST_STORE === "sqlite") expect(plan.join("\n")).toContain("records_by_time");
      else expect(plan.at(-1)).toMatch(/^Execution Time: /);
    }
  });
});

// A check is answered before its record commits, so its record can reach the row after a newer
// check or sync of the badge (a retry after a lost deadlock, a sync served by another instance).
describe("a check's record that arrives late", () => {
  const older = { installed_version: "1.4.0", installed_display: "1.4.0", battery_volts: 3.9, charging: 0 as const };
  const newer = { installed_version: "1.5.0", installed_display: "1.5.0", battery_volts: 4.0, charging: 1 as const };
  const EARLIER = "2026-03-02T09:00:00.000Z";
  const LATER = "2026-03-02T09:00:05.000Z";
  const statusOf = (id: string) =>
    store.db.selectFrom("devices").select(["installed_version", "battery_volts", "charging", "last_check_at", "last_sync_at"]).where("id", "=", id).executeTakeFirstOrThrow();
  const newDevice = async () => (await createDevice(store.db, { mode: "test", room: "R101", model: "m1" })).id;

  // `many` is PostgreSQL's one statement for a group's checks; SQLite runs each as `one`.
  const writes: ReadonlyArray<"one" | "many"> = TEST_STORE === "postgres" ? ["one", "many"] : ["one"];

  it("is dropped after a newer sync of the badge, alone or in a group's one statement", async () => {
    for (const write of writes) {
      const id = await newDevice();
      await recordSync(store.db, id, newer, LATER);
      const check = { id, report: older, now: EARLIER, offeredVersion: "1.5.0" };
      await (write === "one" ? checkRecords.one(store.db, check) : checkRecords.many(store.db, [check]));
      expect(await statusOf(id), write).toEqual({ installed_version: "1.5.0", battery_volts: 4.0, charging: 1, last_check_at: null, last_sync_at: LATER });
    }
  });

  it("is dropped after a newer check of the badge, and of two checks in one group the newer is kept whatever their order", async () => {
    const id = await newDevice();
    await checkRecords.one(store.db, { id, report: newer, now: LATER, offeredVersion: null });
    await checkRecords.one(store.db, { id, report: older, now: EARLIER, offeredVersion: null });
    expect(await statusOf(id)).toMatchObject({ installed_version: "1.5.0", last_check_at: LATER });
    if (!writes.includes("many")) return;

    const grouped = await newDevice();
    await checkRecords.many(store.db, [
      { id: grouped, report: newer, now: LATER, offeredVersion: null },
      { id: grouped, report: older, now: EARLIER, offeredVersion: null },
    ]);
    expect(await statusOf(grouped)).toMatchObject({ installed_version: "1.5.0", last_check_at: LATER });
  });

  it("is written over an older sync", async () => {
    const id = await newDevice();
    await recordSync(store.db, id, older, EARLIER);
    await checkRecords.one(store.db, { id, report: newer, now: LATER, offeredVersion: null });
    expect(await statusOf(id)).toEqual({ installed_version: "1.5.0", battery_volts: 4.0, charging: 1, last_check_at: LATER, last_sync_at: EARLIER });
  });
});
