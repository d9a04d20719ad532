// `npm test` runs every suite on SQLite (project sqlite) and the suites that touch the store a
// second time on PostgreSQL (project postgres: BADGEBENCH_TEST_STORE=postgres, each harness on a
// database of its own, test/server/test-database.ts). The SQLite-only suites (the checkpoint
// worker, the simulator, the rig) run once.
import { configDefaults, defineConfig } from "vitest/config";

const STORE_SUITES = [
  "auth",
  "bad-input",
  "badge-sync",
  "compiled-query",
  "devices-cli",
  "durability",
  "fleet",
  "idempotency",
  "mcp",
  "mcp-update-stage",
  "ota-check",
  "ota-download",
  "records",
  "releases-api",
  "sessions",
  "webhook-busy",
  "webhook-delivery",
  "webhook-durability",
  "webhook-endpoints",
  "postgres-store",
  "postgres-faults",
  "postgres-instances",
].map((name) => `test/server/${name}.test.ts`);

export default defineConfig({
  test: {
    projects: [
      { extends: true, test: { name: "sqlite", include: configDefaults.include, exclude: [...configDefaults.exclude, "test/server/postgres-*.test.ts"] } },
      {
        extends: true,
        test: {
          name: "postgres",
          include: STORE_SUITES,
          env: { BADGEBENCH_TEST_STORE: "postgres" },
          globalSetup: ["test/server/postgres-setup.ts"],
        },
      },
    ],
  },
});
