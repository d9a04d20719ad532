// The data directory from the command line: only `serve` creates a store; every other command
// that opens one refuses a directory without a database (naming the path it looked at, exit 2,
// creating nothing), so a wrong --data cannot hand out keys the running server does not know.
// A data directory that cannot be used as it is gets one line and exit 2 from every command,
// serve included, and nothing in it changes.
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { sql } from "kysely";
import { afterAll, describe, expect, it } from "vitest";
import { DATABASE_FILE, openStore } from "../../server/store/database.ts";
import { DEMO, killLeftoverServers, run, tempDirs } from "./cli-process.ts";

const tempDir = tempDirs("data-dir");
afterAll(killLeftoverServers);

/** Every command that opens the store from --data, with the arguments it needs to get that far. */
const STORE_COMMANDS: string[][] = [
  ["keys", "create", "--mode", "test", "--scope", "attendance:read"],
  ["keys", "list"],
  ["devices", "add", "--room", "R1", "--model", "badge-v1"],
  ["devices", "list"],
  ["devices", "revoke", "dev_nope"],
  ["release", "list"],
  ["release", "promote", "1.0.0"],
  ["publish", "fw.bin", "1.0.0"],
  ["import", DEMO],
  ["sessions", "close", "ses_nope"],
];

/** Every file under `dir` with a hash of its bytes: what a refused command must leave as it was. */
function contents(dir: string): Record<string, string> {
  if (!fs.existsSync(dir)) return {};
  if (!fs.statSync(dir).isDirectory()) return { [dir]: createHash("sha256").update(fs.readFileSync(dir)).digest("hex") };
  return Object.fromEntries(
    fs.readdirSync(dir, { recursive: true, encoding: "utf8" }).map((name) => {
      const file = path.join(dir, name);
      return [name, fs.statSync(file).isDirectory() ? "dir" : createHash("sha256").update(fs.readFileSync(file)).digest("hex")];
    }),
  );
}

async function refused(args: string[], dataDir: string, says: RegExp) {
  const before = contents(dataDir);
  const result = await run([...args, "--data", dataDir]);
  expect(result.code, `${args.join(" ")}: ${result.stderr}`).toBe(2);
  expect(result.stdout).toBe("");
  expect(result.stderr).toMatch(says);
  expect(result.stderr.trim().split("\n")).toHaveLength(1);
  expect(contents(dataDir)).toEqual(before);
}

describe("a data directory without a database", () => {
  it.each(STORE_COMMANDS.map((args) => [args.slice(0, 2).join(" "), args] as const))("%s refuses it, naming the path it looked at, and creates nothing", async (_, args) => {
    const empty = tempDir("empty");
    await refused(args, empty, new RegExp(`^badgebench: no badgebench database in ${empty} \\(looked for ${path.join(empty, DATABASE_FILE)}\\); .*badgebench serve --data`));
    expect(fs.readdirSync(empty)).toEqual([]);
  });

  it("a directory that does not exist is not created either", async () => {
    const missing = path.join(tempDir("parent"), "typo");
    await refused(["keys", "list"], missing, /^badgebench: no badgebench database in .*typo/);
    expect(fs.existsSync(missing)).toBe(false);
  });

  it("--json gives the refusal as one JSON object", async () => {
    const result = await run(["keys", "list", "--json", "--data", tempDir("json")]);
    expect(result.code).toBe(2);
    expect(JSON.parse(result.stdout).error).toMatchObject({ code: "data_unusable", message: expect.stringContaining("no badgebench database") });
  });
});

describe("a data directory that cannot be used as it is (serve included)", () => {
  const cases: Array<{ name: string; make: () => string | Promise<string>; says: RegExp }> = [
    {
      name: "a file instead of a directory",
      make: () => {
        const file = path.join(tempDir("file"), "not-a-dir");
        fs.writeFileSync(file, "notes\n");
        return file;
      },
      says: /^badgebench: the data directory \S+not-a-dir is a file, not a directory; give --data a directory$/m,
    },
    {
      name: "a database file that is not a database",
      make: () => {
        const dir = tempDir("garbage");
        fs.writeFileSync(path.join(dir, DATABASE_FILE), "this is not SQLite ".repeat(300));
        return dir;
      },
      says: /^badgebench: \S+badgebench\.sqlite is not a badgebench database \(file is not a database\); move it away or give --data another directory$/m,
    },
    {
      // Root reads any file whatever its mode (the tests may run as root); a database path that
      // is a directory cannot be opened by anyone.
      name: "a database that cannot be opened",
      make: () => {
        const dir = tempDir("unreadable");
        fs.mkdirSync(path.join(dir, DATABASE_FILE));
        return dir;
      },
      says: /^badgebench: \S+badgebench\.sqlite is a directory, not a database; move it away or give --data another directory$/m,
    },
    {
      name: "a database of a newer schema than this code knows",
      make: () => writeNewerDatabase(tempDir("newer")),
      says: /^badgebench: \S+badgebench\.sqlite holds a database of a newer badgebench \(its schema has 9999_from_the_future, which this version does not know\); run the newer badgebench, nothing was changed$/m,
    },
  ];

  it.each(cases.map((c) => [c.name, c] as const))("%s: one line naming it, exit 2, nothing changed", async (_, c) => {
    const dataDir = await c.make();
    for (const args of [["keys", "list"], ["serve", "--port", "0"]]) await refused(args, dataDir, c.says);
  });
});

/** A database as a later badgebench would leave it: every migration of this one, and one more. */
async function writeNewerDatabase(dataDir: string): Promise<string> {
  const store = await openStore({ dataDir });
  await sql`insert into kysely_migration (name, timestamp) values ('9999_from_the_future', '2099-01-01T00:00:00.000Z')`.execute(store.db);
  await store.close();
  return dataDir;
}
