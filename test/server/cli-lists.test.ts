// What the command line prints for people (issue 21 row 12): `keys list`, `devices list` and
// `release list` as columns under a header, and counts with the noun in the right number.
import fs from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { buildAppImage } from "../../firmware/index.ts";
import { WIFI_PASSWORD_ENV } from "../../server/releases/publishing.ts";
import { baseEnv, DEMO, run, storeIn, tempDirs } from "./cli-process.ts";

const tempDir = tempDirs("lists");

async function ok(args: string[], env?: NodeJS.ProcessEnv): Promise<string> {
  const result = await run(args, { env });
  expect(result.code, `badgebench ${args.join(" ")}\n${result.stderr}`).toBe(0);
  return result.stdout;
}

/** The header's titles, the rows, and whether every row starts a cell where each title starts (or ends before an empty last cell). */
function columns(text: string) {
  const [header = "", rule = "", ...rows] = text.trimEnd().split("\n");
  const starts = [...header.matchAll(/\S+(?: \S+)*/g)].map((match) => match.index);
  const aligned = rows.every((row) => starts.every((at) => at === 0 || at >= row.length || (row[at - 1] === " " && row[at] !== " ")));
  return { titles: header.split(/ {2,}/), rule, rows, aligned };
}

describe("lists print a header over aligned columns", () => {
  it("keys list", async () => {
    const data = await storeIn(tempDir("keys"));
    await ok(["keys", "create", "--mode", "test", "--scope", "attendance:read", "--name", "grades sync", "--data", data]);
    await ok(["keys", "create", "--mode", "live", "--scope", "devices:read", "--scope", "events:read", "--data", data]);
    const list = columns(await ok(["keys", "list", "--data", data]));
    expect(list.titles).toEqual(["id", "mode", "secret", "status", "scopes", "name"]);
    expect(list.rule).toMatch(/^-+( {2}-+){5}$/);
    expect(list.rows).toHaveLength(2);
    expect(list.rows.some((row) => row.endsWith("grades sync"))).toBe(true);
    expect(list.aligned).toBe(true);
  });

  it("devices list", async () => {
    const data = await storeIn(tempDir("devices"));
    await ok(["import", DEMO, "--data", data]);
    await ok(["devices", "add", "--room", "R101", "--model", "badge-v2", "--name", "front desk", "--data", data]);
    await ok(["devices", "add", "--room", "R102", "--model", "badge-v10", "--data", data]);
    const list = columns(await ok(["devices", "list", "--data", data]));
    expect(list.titles).toEqual(["id", "room", "model", "version", "firmware", "name"]);
    expect(list.rows).toHaveLength(2);
    expect(list.aligned).toBe(true);
  });

  it("release list", async () => {
    const data = await storeIn(tempDir("releases"));
    const env = baseEnv({ [WIFI_PASSWORD_ENV]: "lists-test-wifi" });
    for (const version of ["1.4.0", "1.10.0"]) {
      const image = path.join(data, `${version}.bin`);
      fs.writeFileSync(image, buildAppImage({ version }));
      await ok(["publish", image, version, "--data", data], env);
    }
    const list = columns(await ok(["release", "list", "--data", data]));
    expect(list.titles).toEqual(["mode", "version", "bytes", "md5", "published", "role", "canary's report"]);
    expect(list.rows.map((row) => row.split(/ +/).slice(0, 2).join(" "))).toEqual(["test 1.10.0", "test 1.4.0"]);
    expect(list.rows[0]).toMatch(/ fleet$/);
    expect(list.aligned).toBe(true);
  });

  it("an empty list says so instead of printing a bare header", async () => {
    const data = await storeIn(tempDir("empty"));
    await ok(["import", DEMO, "--data", data]);
    expect(await ok(["keys", "list", "--data", data])).toBe("no API keys\n");
    expect(await ok(["devices", "list", "--data", data])).toBe("no devices\n");
  });
});

describe("counts name one thing in the singular", () => {
  it("import of a school with one of each", async () => {
    const data = await storeIn(tempDir("one"));
    const school = path.join(data, "one.json");
    fs.writeFileSync(
      school,
      JSON.stringify({
        rooms: [{ code: "R1", name: "Room 1" }],
        students: [{ external_id: "S1", name: "Ada" }],
        courses: [{ code: "C1", name: "Course 1" }],
        enrollments: [{ course_code: "C1", external_ids: ["S1"] }],
        timetable: [{ course_code: "C1", room: "R1", weekday: 2, start: "08:30", end: "09:20" }],
      }),
    );
    expect(await ok(["import", school, "--week", "2026-11-23", "--data", data])).toBe(
      "imported into test mode: 1 room, 1 student, 1 course, 1 enrollment, 1 new session\n",
    );
  });

  it("sim run of one scenario", async () => {
    const result = await run(["sim", "run", "fixtures/scenarios/happy-path.json"], { timeoutMs: 110_000 });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toMatch(/^1 scenario: 1 passed, 0 failed, 0 errors, 0 skipped in /m);
  });
});
