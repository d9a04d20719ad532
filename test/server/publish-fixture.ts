// What the publish suites (publish-*.test.ts) share: the developer Wi-Fi password they configure,
// a data directory with the small school, a snapshot of <data>/releases to prove a refusal wrote
// nothing, the manifest as stored, and the CLI's one-line JSON answers.
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { expect } from "vitest";
import { parseManifest, type Manifest } from "../../firmware/index.ts";
import { PublishRefusal, WIFI_PASSWORD_ENV } from "../../server/releases/publishing.ts";
import { FileReleaseStore, RELEASES_DIRS } from "../../server/releases/release-store.ts";
import { importSchool } from "../../server/services/school-import.ts";
import { openStore, type Store } from "../../server/store/database.ts";
import { baseEnv, run, type RunResult } from "./cli-process.ts";
import { smallSchool } from "./harness.ts";

export const DEV_WIFI_PASSWORD = "lab-wifi-s3cret!";
export const NOTE_40 = "x".repeat(40);
export const NOTE_41 = "y".repeat(41);

export const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

/** Writes bytes (or a built image) to `dir/name` and returns the path. */
export function writeFile(dir: string, name: string, bytes: Uint8Array): string {
  const file = path.join(dir, name);
  fs.writeFileSync(file, bytes);
  return file;
}

/** The test-mode releases: every badge in these tests is a test-mode badge. */
export const releasesDir = (dataDir: string) => path.join(dataDir, RELEASES_DIRS[0]);
const manifestPath = (dataDir: string) => path.join(dataDir, RELEASES_DIRS[0], "manifest.json");
export const imagesDir = (dataDir: string) => path.join(dataDir, RELEASES_DIRS[0], "images");

/** Every path under <data>/releases with its content hash ("dir" for directories), plus the manifest's bytes. */
interface Snapshot {
  manifest: Buffer | null;
  entries: Record<string, string>;
}
export function snapshot(dataDir: string): Snapshot {
  const entries: Record<string, string> = {};
  const walk = (dir: string, prefix: string) => {
    if (!fs.existsSync(dir)) return;
    for (const dirent of fs.readdirSync(dir, { withFileTypes: true })) {
      const rel = `${prefix}${dirent.name}`;
      const full = path.join(dir, dirent.name);
      if (dirent.isDirectory()) {
        entries[rel] = "dir";
        walk(full, `${rel}/`);
      } else {
        entries[rel] = sha256(fs.readFileSync(full));
      }
    }
  };
  walk(releasesDir(dataDir), "");
  const file = manifestPath(dataDir);
  return { manifest: fs.existsSync(file) ? fs.readFileSync(file) : null, entries };
}

export function readManifestFile(dataDir: string): Manifest {
  const parsed = parseManifest(JSON.parse(fs.readFileSync(manifestPath(dataDir), "utf8")));
  if (!parsed.ok) throw new Error(`manifest.json does not parse: ${parsed.message}`);
  return parsed.manifest;
}

/** Awaits a publish or promote that must be refused, and returns the refusal. */
export async function refusalOf(work: Promise<unknown>): Promise<PublishRefusal> {
  try {
    await work;
  } catch (error) {
    expect(error).toBeInstanceOf(PublishRefusal);
    return error as PublishRefusal;
  }
  throw new Error("expected a PublishRefusal, but the call succeeded");
}

export const codesOf = (refusal: { reasons: { code: string }[] }) => refusal.reasons.map((r) => r.code).sort();

/** The whole of stdout is one JSON object on one line. */
export function singleJson<T = any>(result: RunResult): T {
  const lines = result.stdout.split("\n").filter((line) => line.length > 0);
  expect(lines, `expected one JSON line on stdout, got:\n${result.stdout}\nstderr: ${result.stderr}`).toHaveLength(1);
  return JSON.parse(lines[0]!) as T;
}

export interface CliRefusal {
  error: { code: string; message: string; reasons?: { code: string; message: string }[] };
}

/** The environment without the developer Wi-Fi password, so only what a test sets counts. */
export function envWithout(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = baseEnv(extra);
  if (!(WIFI_PASSWORD_ENV in extra)) delete env[WIFI_PASSWORD_ENV];
  return env;
}

/** Runs scripts/cli/publish.ts itself (node with the tsx loader), as an operator would. */
export function runPublishScript(args: string[], env: NodeJS.ProcessEnv): Promise<RunResult> {
  return run(args, { env, program: ["--import", "tsx", "scripts/cli/publish.ts"] });
}

/** `dataDir` with the small school (room R1) in test mode and an open store over it. */
export async function openDataDir(dataDir: string): Promise<{ dataDir: string; store: Store; releases: FileReleaseStore }> {
  const store = await openStore({ dataDir, sync: "normal" });
  await importSchool(store.db, smallSchool(), { mode: "test" });
  return { dataDir, store, releases: new FileReleaseStore(dataDir, 0) };
}
