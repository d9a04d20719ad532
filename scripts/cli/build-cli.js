// The command line's bundle: cli.ts built by esbuild to dist/cli/ (git-ignored), so a start loads
// plain JavaScript instead of compiling TypeScript (1.4 s for --help through tsx). `npm install`
// builds it (package.json "prepare"); badgebench.js rebuilds it when it is missing or older than
// one of its sources. Plain JavaScript itself, because it runs before there is a bundle.
//
// The bundle is split (esbuild --splitting): each command's handler imports its modules when it
// runs, so --help loads yargs and the option tables, not the server, the simulator or the rig.
// The fleet's worker thread is an entry of its own, beside the chunks (badge-sim/runners/fleet.ts).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
export const CLI_DIR = path.join(ROOT, "dist/cli");
export const CLI_BUNDLE = path.join(CLI_DIR, "cli.js");
/** What dist/cli/NAME.js is built from: the command line, and the fleet's worker thread (badge-sim/runners/fleet.ts starts it beside its own chunk). */
const ENTRY_POINTS = { cli: "scripts/cli/cli.ts", "fleet-worker": "badge-sim/runners/fleet-worker.ts" };
/**
 * The packages built into the bundle; every other dependency is imported from node_modules as it
 * is (native addons, worker-thread transports, modules loaded lazily). These two are plain
 * JavaScript of many small modules that every admin command loads: resolving and reading them
 * one by one was half the CPU time of `keys list` (0.28 s, 0.16 s bundled).
 */
const BUNDLED_PACKAGES = ["yargs", "kysely"];
/** The source files the last build read (relative to the root): a newer one makes the bundle stale. */
const INPUTS = path.join(CLI_DIR, "inputs.json");

/** True when the bundle is missing or a source it was built from changed (or is gone) since. */
export function cliBundleIsStale() {
  let builtAt;
  let inputs;
  try {
    builtAt = fs.statSync(INPUTS).mtimeMs;
    inputs = JSON.parse(fs.readFileSync(INPUTS, "utf8"));
  } catch {
    return true;
  }
  return inputs.some((input) => {
    try {
      return fs.statSync(path.join(ROOT, input)).mtimeMs > builtAt;
    } catch {
      return true;
    }
  });
}

/** Writes a file by renaming a complete copy over it, so a CLI starting meanwhile reads old or new, never half. */
function writeWhole(file, contents) {
  const temporary = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(temporary, contents);
  fs.renameSync(temporary, file);
}

/** Builds the bundle into dist/cli/ and removes what an earlier build left there. */
export async function buildCliBundle() {
  const esbuild = await import("esbuild");
  const result = await esbuild.build({
    absWorkingDir: ROOT,
    entryPoints: ENTRY_POINTS,
    bundle: true,
    splitting: true,
    platform: "node",
    format: "esm",
    target: "node20",
    external: Object.keys(JSON.parse(fs.readFileSync(path.join(ROOT, "package.json"), "utf8")).dependencies).filter((name) => !BUNDLED_PACKAGES.includes(name)),
    outdir: CLI_DIR,
    metafile: true,
    write: false,
    logLevel: "warning",
  });
  fs.mkdirSync(CLI_DIR, { recursive: true });
  // Chunks (named by their content) first, the entries after: an entry never names a chunk that
  // is not there yet.
  const isEntry = (output) => Object.hasOwn(ENTRY_POINTS, path.basename(output.path, ".js"));
  const entriesLast = [...result.outputFiles].sort((a, b) => Number(isEntry(a)) - Number(isEntry(b)));
  for (const output of entriesLast) writeWhole(output.path, output.contents);
  writeWhole(INPUTS, JSON.stringify(Object.keys(result.metafile.inputs)));
  const kept = new Set([...result.outputFiles.map((output) => path.basename(output.path)), path.basename(INPUTS)]);
  for (const name of fs.readdirSync(CLI_DIR)) if (!kept.has(name) && !name.endsWith(".tmp")) fs.rmSync(path.join(CLI_DIR, name), { force: true });
}

/** The bundle's path, rebuilt first when it is stale. */
export async function upToDateCliBundle() {
  if (cliBundleIsStale()) await buildCliBundle();
  return CLI_BUNDLE;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) await buildCliBundle();
