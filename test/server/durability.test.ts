// An acknowledged write survives the server process being killed outright.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, afterEach, expect, it } from "vitest";
import { createApiKey } from "../../server/services/api-keys.ts";
import { importSchool } from "../../server/services/school-import.ts";
import { openStore } from "../../server/store/database.ts";
import { killLeftoverServers, serve } from "./cli-process.ts";
import { smallSchool } from "./harness.ts";
import { createTestStore } from "./test-database.ts";

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "badgebench-durability-"));
const testStore = await createTestStore(dataDir);
afterEach(killLeftoverServers);
afterAll(async () => {
  await testStore.drop();
  fs.rmSync(dataDir, { recursive: true, force: true });
});

it("keeps every acknowledged create after kill -9", async () => {
  const setup = await openStore(testStore.options);
  await importSchool(setup.db, smallSchool(), { mode: "test" });
  const key = await createApiKey(setup.db, { mode: "test", scopes: ["attendance:write"] });
  const session = await setup.db.selectFrom("sessions").select("id").where("course_code", "=", "MATH").orderBy("starts_at").executeTakeFirstOrThrow();
  await setup.close();

  const { url, child, exited } = await serve(testStore.serveArgs);
  const acknowledged: string[] = [];
  for (const externalId of ["S1", "S2", "S3", "S4", "S5"]) {
    const res = await fetch(`${url}/v1/attendance`, {
      method: "POST",
      headers: { authorization: `Bearer ${key.secret}`, "content-type": "application/json", "idempotency-key": `k-${externalId}` },
      body: JSON.stringify({ session_id: session.id, external_id: externalId, status: "present" }),
    });
    expect(res.status).toBe(201);
    acknowledged.push(((await res.json()) as { id: string }).id);
  }
  child.kill("SIGKILL");
  expect((await exited).signal).toBe("SIGKILL");

  const reopened = await openStore(testStore.options);
  try {
    const ids = (await reopened.db.selectFrom("records").select("id").execute()).map((r) => r.id);
    expect(ids.sort()).toEqual([...acknowledged].sort());
    expect(await reopened.db.selectFrom("events").select("id").execute()).toHaveLength(5);
  } finally {
    await reopened.close();
  }
});
