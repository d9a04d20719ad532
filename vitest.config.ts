// `npm test` runs every suite on SQLite (project sqlite) and the suites that touch the store a
// second time on PostgreSQL (project postgres: BADGEBENCH_TEST_STORE=postgres, each harness on a
// database of its own, test/server/test-database.ts). The SQLite-only suites (the checkpoint
// worker, the simulator, the rig) run once, and so do the suites that test PostgreSQL themselves,
// in the postgres project (POSTGRES_ONLY).
import os from "node:os";
import { configDefaults, defineConfig } from "vitest/config";

// vitest runs one file at a time per worker and defaults to cores - 1 workers: one on a 2-core
// machine, where most files spend their time waiting on child processes, servers, ptys and the
// badges' clocks, so the second core idled. Three workers at least (issue 25): the CLI and hil run
// files took 130 s of wall instead of 211 s side by side on a loaded 2-core machine, all passing.
// Every file stands alone (port 0, a database and MQTT topics of its own), so they may overlap.
const MIN_WORKERS = 3;

const STORE_SUITES = [
  "auth",
  "bad-input",
  "badge-sync",
  "change-feed",
  "compiled-query",
  "devices-api",
  "devices-cli",
  "durability",
  "fleet",
  "idempotency",
  "mcp",
  "mcp-update-stage",
  "ota-check",
  "ota-download",
  "ota-download-range",
  "records",
  "releases-api",
  "rollouts-api",
  "release-modes",
  "sessions",
  "signed-releases",
  "webhook-busy",
  "webhook-delivery",
  "webhook-durability",
  "webhook-endpoints",
  "postgres-store",
  "store-tallies",
  "postgres-admin",
  "postgres-faults",
  "postgres-instances",
  "postgres-outbox",
  "database-release-store",
].map((name) => `test/server/${name}.test.ts`);
// Suites that test PostgreSQL themselves (against SQLite beside it, where they compare): they run
// in the postgres project only, whose setup names the run's databases and drops what a file that
// died left behind (test/server/postgres-setup.ts).
const POSTGRES_ONLY = ["test/server/postgres-*.test.ts", "test/server/database-release-store.test.ts"];

export default defineConfig({
  test: {
    maxWorkers: Math.max(os.availableParallelism() - 1, MIN_WORKERS),
    // With three workers on two cores a test that spawns a process (tsx, make, the CLI) may wait
    // its turn for seconds: vitest's default 5 s per test and 10 s per hook fail such a test for
    // the machine's load, not for what it checks. A timeout here catches a hang, never a slow
    // machine: at load 15 a test that spawns six processes took 30 s. A test that needs longer
    // still says so.
    testTimeout: 120_000,
    hookTimeout: 120_000,
    globalSetup: ["test/cli-bundle-setup.ts"],
    projects: [
      { extends: true, test: { name: "sqlite", include: configDefaults.include, exclude: [...configDefaults.exclude, ...POSTGRES_ONLY] } },
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
