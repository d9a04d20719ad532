// Another process publishing through the database release store, for
// database-release-store.test.ts: `node --import tsx database-release-child.ts DATABASE COMMAND ...`
// where DATABASE is a data directory (SQLite) or a postgres:// URL.
//   publish INPUT_JSON      one publish; prints {"entry"} or {"codes"} of its refusal
//   loop SRC_DIR CANARY     publishes (force-promoting every other release) until killed,
//                           printing "published V" and "promoted V" after each commit
import fs from "node:fs";
import path from "node:path";
import { Kysely, PostgresDialect } from "kysely";
import pg from "pg";
import { buildAppImage } from "../../firmware/index.ts";
import { DatabaseReleaseStore } from "../../server/releases/database-release-store.ts";
import { promoteRelease, PublishRefusal, publishRelease } from "../../server/releases/publishing.ts";
import { openStore } from "../../server/store/database.ts";
import type { Database } from "../../server/store/schema.ts";

const [database, command, ...args] = process.argv.slice(2);
const LOOP_PASSWORD = "loop-wifi-password";

async function open(): Promise<{ db: Kysely<Database>; close(): Promise<void> }> {
  if (database!.startsWith("postgres://")) {
    const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: database, max: 1 }) }) });
    return { db, close: () => db.destroy() };
  }
  return openStore({ dataDir: database!, sync: "normal" });
}

const store = await open();
const releases = new DatabaseReleaseStore(store.db, 0);
try {
  if (command === "publish") {
    try {
      const entry = await publishRelease(store.db, releases, JSON.parse(args[0]!));
      process.stdout.write(JSON.stringify({ entry }));
    } catch (error) {
      if (!(error instanceof PublishRefusal)) throw error;
      process.stdout.write(JSON.stringify({ codes: error.reasons.map((r) => r.code).sort() }));
    }
  } else if (command === "loop") {
    const [srcDir, canary] = args;
    for (;;) {
      const last = (await releases.read()).releases.at(-1);
      const patch = last ? Number(last.version.split(".")[2]) + 1 : 0;
      const version = `5.0.${patch}`;
      const file = path.join(srcDir!, `${version}.bin`);
      fs.writeFileSync(file, buildAppImage({ version, size: 64 * 1024 }));
      const asCanary = patch % 2 === 1;
      await publishRelease(store.db, releases, { imagePath: file, version, notes: [`build ${patch}`], canary: asCanary ? canary : undefined, devWifiPassword: LOOP_PASSWORD });
      process.stdout.write(`published ${version}\n`);
      if (asCanary) {
        await promoteRelease(store.db, releases, version, { force: true, reason: "crash test" });
        process.stdout.write(`promoted ${version}\n`);
      }
    }
  } else {
    throw new Error(`unknown command ${command}`);
  }
} finally {
  await store.close();
}
