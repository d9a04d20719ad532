// Drives the real badgebench CLI as a user would: every test spawns
// `node scripts/cli/badgebench.js ...` in its own temporary data directory.
import fs from "node:fs";
import path from "node:path";
import Database from "better-sqlite3";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { baseEnv, DB_FILE, DEMO, killLeftoverServers, run, serve, stop, storeIn, tempDirs, type RunOptions } from "./cli-process.ts";

/** Runs a command with --json, expects success and exactly one JSON object (one line) on stdout. */
async function runJson<T = Record<string, unknown>>(args: string[], options?: RunOptions): Promise<T> {
  const result = await run([...args, "--json"], options);
  expect(result.code, `badgebench ${args.join(" ")} failed: ${result.stderr}${result.stdout}`).toBe(0);
  return parseSingleJson<T>(result.stdout);
}

/** The whole of stdout must be one line holding one JSON object. */
function parseSingleJson<T>(stdout: string): T {
  const lines = stdout.split("\n").filter((line) => line.length > 0);
  expect(lines, `expected one JSON line on stdout, got:\n${stdout}`).toHaveLength(1);
  const value = JSON.parse(stdout) as unknown;
  expect(typeof value).toBe("object");
  expect(value).not.toBeNull();
  expect(Array.isArray(value)).toBe(false);
  return value as T;
}

const tempDir = tempDirs("cli");

/** Reads the SQLite file directly (as an independent check of what the CLI wrote). */
function query<T>(dir: string, sql: string, ...params: unknown[]): T[] {
  const db = new Database(path.join(dir, DB_FILE), { fileMustExist: true });
  try {
    return db.prepare(sql).all(...params) as T[];
  } finally {
    db.close();
  }
}

const countStudents = (dir: string) => query<{ n: number }>(dir, "select count(*) as n from students")[0]!.n;

interface KeyJson {
  id: string;
  object: string;
  mode: string;
  livemode: boolean;
  scopes: string[];
  name: string;
  secret?: string;
  secret_hint: string;
  revoked_at: string | null;
}

interface SessionJson {
  id: string;
  object: string;
  status: string;
}

async function createKey(dir: string, mode: "test" | "live", scopes: string[], name = "ci"): Promise<KeyJson> {
  const args = ["keys", "create", "--mode", mode, ...scopes.flatMap((s) => ["--scope", s]), "--name", name, "--data", dir];
  return runJson<KeyJson>(args);
}

afterEach(killLeftoverServers);


async function get(url: string, token?: string) {
  const response = await fetch(url, { headers: token ? { authorization: `Bearer ${token}` } : {} });
  const text = await response.text();
  return { status: response.status, body: JSON.parse(text) as Record<string, any> };
}

// ---------------------------------------------------------------------------------------------

describe("badgebench --help", () => {
  it("exits 0 and lists serve, keys, import and sessions", async () => {
    const result = await run(["--help"]);
    expect(result.code).toBe(0);
    for (const command of ["serve", "keys", "import", "sessions"]) {
      expect(result.stdout).toMatch(new RegExp(`badgebench ${command}\\b`));
    }
  });
});

describe("badgebench keys", () => {
  let dir: string;
  let testKey: KeyJson;

  beforeAll(async () => {
    dir = await storeIn(tempDir("keys"));
  });

  it("create --json prints exactly one JSON object with the id and a sk_test_ secret", async () => {
    const result = await run([
      "keys", "create", "--mode", "test", "--scope", "attendance:read", "--scope", "attendance:write",
      "--name", "ci", "--data", dir, "--json",
    ]);
    expect(result.code, result.stderr).toBe(0);
    testKey = parseSingleJson<KeyJson>(result.stdout);
    expect(testKey.id).toMatch(/^key_/);
    expect(testKey.secret).toMatch(/^sk_test_[A-Za-z0-9_-]{16,}$/);
    expect(testKey).toMatchObject({ object: "api_key", name: "ci", mode: "test", livemode: false });
    expect(testKey.scopes.sort()).toEqual(["attendance:read", "attendance:write"]);
    expect(fs.existsSync(path.join(dir, DB_FILE))).toBe(true);
  });

  it("create --mode live gives a sk_live_ secret", async () => {
    const live = await createKey(dir, "live", ["attendance:read"], "live-ci");
    expect(live.id).toMatch(/^key_/);
    expect(live.secret).toMatch(/^sk_live_/);
    expect(live).toMatchObject({ mode: "live", livemode: true });
  });

  it("stores no secret in clear in the database", () => {
    const rows = query<Record<string, unknown>>(dir, "select * from api_keys");
    expect(rows.length).toBe(2);
    const secret = testKey.secret!;
    const body = secret.slice("sk_test_".length);
    const row = rows.find((r) => r.id === testKey.id);
    expect(row).toBeDefined();
    for (const r of rows) {
      for (const [column, value] of Object.entries(r)) {
        const text = Buffer.isBuffer(value) ? value.toString("utf8") : String(value);
        expect(text.includes(secret), `api_keys.${column} holds the secret`).toBe(false);
        expect(text.includes(body), `api_keys.${column} holds the secret's body`).toBe(false);
      }
    }
  });

  it("list --json prints one list object with the key and no secret", async () => {
    const result = await run(["keys", "list", "--data", dir, "--json"]);
    expect(result.code, result.stderr).toBe(0);
    const list = parseSingleJson<{ object: string; data: KeyJson[] }>(result.stdout);
    expect(list.object).toBe("list");
    expect(list.data).toHaveLength(2);
    const listed = list.data.find((k) => k.id === testKey.id);
    expect(listed).toMatchObject({ id: testKey.id, name: "ci", mode: "test", revoked_at: null });
    for (const key of list.data) expect(key).not.toHaveProperty("secret");
    expect(result.stdout).not.toContain(testKey.secret);
  });

  it("revoke --json marks the key revoked", async () => {
    const revoked = await runJson<KeyJson>(["keys", "revoke", testKey.id, "--data", dir]);
    expect(revoked.id).toBe(testKey.id);
    expect(revoked.revoked_at).not.toBeNull();
    expect(Number.isNaN(Date.parse(revoked.revoked_at!))).toBe(false);
    expect(revoked).not.toHaveProperty("secret");
    const [row] = query<{ revoked_at: string | null }>(dir, "select revoked_at from api_keys where id = ?", testKey.id);
    expect(row!.revoked_at).not.toBeNull();
    // The other key is untouched.
    const others = query<{ revoked_at: string | null }>(dir, "select revoked_at from api_keys where id != ?", testKey.id);
    expect(others.map((r) => r.revoked_at)).toEqual([null]);
  });

  it("revoke of an unknown id fails", async () => {
    const result = await run(["keys", "revoke", "key_doesnotexist", "--data", dir, "--json"]);
    expect(result.code).not.toBe(0);
    const body = parseSingleJson<{ error: { message: string } }>(result.stdout);
    expect(body.error.message).toContain("key_doesnotexist");
  });

  it("create with an unknown scope exits non-zero, names the scope, and creates nothing", async () => {
    const [text, json] = await Promise.all([
      run(["keys", "create", "--mode", "test", "--scope", "attendance:read", "--scope", "attendance:teleport", "--data", dir]),
      run(["keys", "create", "--mode", "test", "--scope", "attendance:teleport", "--data", dir, "--json"]),
    ]);

    expect(text.code).not.toBe(0);
    expect(text.stderr).toContain("attendance:teleport");
    expect(text.stderr).toMatch(/unknown scope/);
    expect(text.stderr).not.toMatch(/\n\s+at /); // a message, not a stack trace
    expect(text.stdout).not.toMatch(/sk_test_/);

    expect(json.code).not.toBe(0);
    const body = parseSingleJson<{ error: { code: string; message: string } }>(json.stdout);
    expect(body.error).toBeDefined();
    expect(body.error.message).toContain("attendance:teleport");
    expect(body).not.toHaveProperty("secret");

    expect(query<{ n: number }>(dir, "select count(*) as n from api_keys")[0]!.n).toBe(2);
  });
});

describe("BADGEBENCH_DATA", () => {
  it("is the data directory when --data is absent", async () => {
    const dataDir = await storeIn(tempDir("env"));
    // Run from an empty working directory, so the ./var fallback cannot hide a missed env var.
    const cwd = tempDir("cwd");
    const result = await run(["keys", "create", "--mode", "test", "--scope", "attendance:read", "--json"], {
      cwd,
      env: baseEnv({ BADGEBENCH_DATA: dataDir }),
    });
    expect(result.code, result.stderr).toBe(0);
    const key = parseSingleJson<KeyJson>(result.stdout);
    expect(fs.existsSync(path.join(dataDir, DB_FILE))).toBe(true);
    expect(fs.existsSync(path.join(cwd, "var"))).toBe(false);
    expect(query<{ id: string }>(dataDir, "select id from api_keys").map((r) => r.id)).toEqual([key.id]);
  });
});

describe("badgebench import", () => {
  let dir: string;

  beforeAll(async () => {
    dir = await storeIn(tempDir("import"));
  });

  it("imports the demo school and prints a summary", async () => {
    const summary = await runJson<Record<string, number | string>>(["import", DEMO, "--data", dir]);
    expect(summary.mode).toBe("test");
    expect(summary.students).toBeGreaterThanOrEqual(600);
    expect(summary.courses).toBeGreaterThanOrEqual(30);
    expect(summary.sessions_added).toBeGreaterThan(0);
    expect(countStudents(dir)).toBe(summary.students);
    const [sessions] = query<{ n: number }>(dir, "select count(*) as n from sessions");
    expect(sessions!.n).toBe(summary.sessions_added);
  });

  it("is idempotent: importing again adds no session and no student", async () => {
    const before = query<{ n: number }>(dir, "select count(*) as n from sessions")[0]!.n;
    const studentsBefore = countStudents(dir);
    const summary = await runJson<Record<string, number>>(["import", DEMO, "--data", dir]);
    expect(summary.sessions_added).toBe(0);
    expect(query<{ n: number }>(dir, "select count(*) as n from sessions")[0]!.n).toBe(before);
    expect(countStudents(dir)).toBe(studentsBefore);
  });

  it("rejects a file with an error, naming the path, and imports nothing", async () => {
    const fresh = await storeIn(tempDir("bad-import"));
    const file = path.join(tempDir("bad-file"), "bad-school.json");
    fs.writeFileSync(
      file,
      JSON.stringify({
        rooms: [{ code: "R1", name: "Room 1" }],
        students: [{ external_id: "S1", name: "Ada" }],
        courses: [{ code: "C1", name: "Course 1" }],
        enrollments: [{ course_code: "C1", external_ids: ["S1", "S404"] }],
        sessions: [{ course_code: "C1", room: "R1", starts_at: "2026-11-23T09:00:00Z", ends_at: "2026-11-23T10:00:00Z" }],
      }),
    );
    const [text, json] = await Promise.all([
      run(["import", file, "--data", fresh]),
      run(["import", file, "--data", await storeIn(tempDir("bad-import-json")), "--json"]),
    ]);

    expect(text.code).not.toBe(0);
    expect(text.stderr).toContain("enrollments.0.external_ids");
    expect(text.stderr).toContain("S404");
    expect(text.stderr).toContain(file);
    expect(text.stderr).not.toMatch(/\n\s+at /);
    expect(text.stdout).toBe("");

    expect(json.code).not.toBe(0);
    const body = parseSingleJson<{ error: { message: string } }>(json.stdout);
    expect(body.error.message).toContain("enrollments.0.external_ids");

    expect(countStudents(fresh)).toBe(0);
    expect(query<{ n: number }>(fresh, "select count(*) as n from sessions")[0]!.n).toBe(0);
  });
});

describe("badgebench sessions", () => {
  let dir: string;
  let scheduled: string[];

  beforeAll(async () => {
    dir = await storeIn(tempDir("sessions"));
    await runJson(["import", DEMO, "--data", dir]);
    scheduled = query<{ id: string }>(dir, "select id from sessions where status = 'scheduled' and livemode = 0 order by starts_at, id").map(
      (r) => r.id,
    );
    expect(scheduled.length).toBeGreaterThanOrEqual(2);
  });

  it("close on a scheduled session fails and names both states", async () => {
    const id = scheduled[1]!;
    const [text, json] = await Promise.all([
      run(["sessions", "close", id, "--data", dir]),
      run(["sessions", "close", id, "--data", dir, "--json"]),
    ]);
    expect(text.code).not.toBe(0);
    expect(text.stderr).toContain(id);
    expect(text.stderr).toContain("scheduled");
    expect(text.stderr).toContain("closed");
    expect(text.stderr).not.toMatch(/\n\s+at /);

    expect(json.code).not.toBe(0);
    const body = parseSingleJson<{ error: { code: string; message: string } }>(json.stdout);
    expect(body.error.code).toBe("session_transition_invalid");
    expect(body.error.message).toMatch(/scheduled/);
    expect(body.error.message).toMatch(/closed/);

    const [row] = query<{ status: string }>(dir, "select status from sessions where id = ?", id);
    expect(row!.status).toBe("scheduled");
  });

  it("open on an unknown id fails", async () => {
    const [text, json] = await Promise.all([
      run(["sessions", "open", "ses_doesnotexist", "--data", dir]),
      run(["sessions", "open", "ses_doesnotexist", "--data", dir, "--json"]),
    ]);
    expect(text.code).not.toBe(0);
    expect(text.stderr).toContain("ses_doesnotexist");
    expect(json.code).not.toBe(0);
    expect(parseSingleJson<{ error: { code: string } }>(json.stdout).error.code).toBe("resource_missing");
  });

  it("serve answers, and admin commands from another process take effect while it runs", async () => {
    const key = await createKey(dir, "test", ["attendance:read"], "reader");
    const server = await serve(["--data", dir]);

    // No token: 401 with the JSON error shape.
    const anonymous = await get(`${server.url}/v1/sessions`);
    expect(anonymous.status).toBe(401);
    expect(anonymous.body.error.type).toBe("authentication_error");

    // With the key: 200 and the imported sessions.
    const listed = await get(`${server.url}/v1/sessions?limit=1`, key.secret);
    expect(listed.status).toBe(200);
    expect(listed.body.object).toBe("list");
    expect(listed.body.data).toHaveLength(1);

    // `sessions open` in another process while the server holds the database.
    const id = scheduled[0]!;
    const before = await get(`${server.url}/v1/sessions/${id}`, key.secret);
    expect(before.status).toBe(200);
    expect(before.body.status).toBe("scheduled");
    const opened = await runJson<SessionJson>(["sessions", "open", id, "--data", dir]);
    expect(opened).toMatchObject({ id, object: "session", status: "open" });
    const after = await get(`${server.url}/v1/sessions/${id}`, key.secret);
    expect(after.status).toBe(200);
    expect(after.body.status).toBe("open");

    // `keys revoke` in another process: the very next request with the key is refused.
    const revoked = await runJson<KeyJson>(["keys", "revoke", key.id, "--data", dir]);
    expect(revoked.revoked_at).not.toBeNull();
    const refused = await get(`${server.url}/v1/sessions`, key.secret);
    expect(refused.status).toBe(401);
    expect(refused.body.error.type).toBe("authentication_error");

    expect(await stop(server)).toEqual({ code: 0, signal: null });
    expect(server.stdout().trim().split("\n")).toHaveLength(1);
  });
});

describe("badgebench serve --demo", () => {
  it("loads the demo school into an empty directory once", async () => {
    const dir = tempDir("demo");

    const first = await serve(["--demo", "--data", dir]);
    const match = /sk_test_[A-Za-z0-9_-]+/.exec(first.stderr());
    expect(match, `no demo key on stderr:\n${first.stderr()}`).not.toBeNull();
    const demoKey = match![0];
    const listed = await get(`${first.url}/v1/sessions?limit=5`, demoKey);
    expect(listed.status).toBe(200);
    expect(listed.body.data.length).toBeGreaterThan(0);
    expect(await stop(first)).toEqual({ code: 0, signal: null });
    const students = countStudents(dir);
    const sessions = query<{ n: number }>(dir, "select count(*) as n from sessions")[0]!.n;
    expect(students).toBeGreaterThanOrEqual(600);
    expect(query<{ n: number }>(dir, "select count(*) as n from api_keys")[0]!.n).toBe(1);

    const second = await serve(["--demo", "--data", dir]);
    const stillWorks = await get(`${second.url}/v1/sessions?limit=1`, demoKey);
    expect(stillWorks.status).toBe(200);
    expect(await stop(second)).toEqual({ code: 0, signal: null });
    expect(second.stderr()).not.toMatch(/sk_test_/);
    expect(second.stderr()).not.toMatch(/demo school/);
    expect(countStudents(dir)).toBe(students);
    expect(query<{ n: number }>(dir, "select count(*) as n from sessions")[0]!.n).toBe(sessions);
    expect(query<{ n: number }>(dir, "select count(*) as n from api_keys")[0]!.n).toBe(1);
  });
});

describe("usage mistakes", () => {
  it("print one line (or one JSON object under --json) and exit 2", async () => {
    const json = await run(["keys", "create", "--scope", "attendance:read", "--json", "--data", tempDir("usage")]);
    expect(json.code).toBe(2);
    expect(parseSingleJson<{ error: { code: string; message: string } }>(json.stdout).error).toEqual({ code: "usage", message: expect.stringContaining("mode") });
    const text = await run(["sessions", "reopen", "ses_x"]);
    expect(text.code).toBe(2);
    expect(text.stderr).toMatch(/^badgebench: /);
    expect(text.stderr).toContain('Given: "reopen"');
    expect(text.stderr).not.toMatch(/\n\s+at /);
  });

  it("a busy port is one line naming the address, exit 1", async () => {
    const dir = tempDir("busy-port");
    const first = await serve(["--data", dir]);
    const port = new URL(first.url).port;
    const second = await run(["serve", "--port", port, "--data", dir]);
    expect(second.code).toBe(1);
    expect(second.stderr).toContain(`badgebench: cannot listen on 127.0.0.1:${port}: listen EADDRINUSE: address already in use`);
    expect(second.stderr).not.toMatch(/\n\s+at /);
    await stop(first);
  });
});
