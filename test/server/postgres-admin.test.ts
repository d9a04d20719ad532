// Whole PostgreSQL databases made and removed (server/store/postgres-admin.ts), as the tests and
// benchmarks that want a fresh one do (postgres project only, vitest.config.ts).
import crypto from "node:crypto";
import os from "node:os";
import { describe, expect, inject, it } from "vitest";
import { testDatabasePrefix, TEST_POSTGRES_URL } from "../../scripts/harness/postgres-admin.ts";
import { openStore } from "../../server/store/database.ts";
import { createDatabase, databaseUrl, databasesNamed, dropDatabase, withAdminDatabase } from "../../server/store/postgres-admin.ts";

describe("PostgreSQL databases for tests and benchmarks", () => {
  it("creates one a store can open, lists it by its prefix, and drops it though a connection is still open", async () => {
    const prefix = `${testDatabasePrefix(inject("postgresTestRun"))}admin_`;
    const name = `${prefix}${crypto.randomBytes(4).toString("hex")}`;
    await withAdminDatabase(TEST_POSTGRES_URL, (db) => createDatabase(db, name));
    const store = await openStore({ dataDir: os.tmpdir(), databaseUrl: databaseUrl(TEST_POSTGRES_URL, name) });
    try {
      expect(await store.db.selectFrom("settings").selectAll().execute()).toEqual([]);
      await withAdminDatabase(TEST_POSTGRES_URL, async (db) => {
        expect(await databasesNamed(db, prefix)).toEqual([name]);
        await dropDatabase(db, name);
        expect(await databasesNamed(db, prefix)).toEqual([]);
        await dropDatabase(db, name); // already gone: nothing to do, no error
      });
    } finally {
      await store.close().catch(() => {}); // its connections were ended by the drop
    }
  });
});
