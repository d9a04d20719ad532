// The root README's quickstarts, run as a reader pastes them: every `sh` block under
// "## Quickstarts", in order, in bash, against a fresh demo school (`serve --demo`), from a
// working directory laid out as the repository with its own `var/` (the server's data directory,
// as under `npm start`). Each block must exit 0 and answer with data: no API error, no empty
// list, no badge refusal. A quickstart that rots fails here.
import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { baseEnv, killLeftoverServers, ROOT, serve, stop, tempDirs, type Server } from "./server/cli-process.ts";

/** What the README's blocks say the server is; the test's server is on another port. */
const README_URL = "http://127.0.0.1:3000";
const BLOCK_TIMEOUT_MS = 120_000;

interface Quickstart {
  title: string;
  script: string;
}

/** The `sh` blocks between "## Quickstarts" and the next `## ` heading, each with its `### ` title. */
function quickstartBlocks(readme: string): Quickstart[] {
  const start = readme.indexOf("\n## Quickstarts");
  if (start < 0) throw new Error("README.md has no '## Quickstarts' section");
  const end = readme.indexOf("\n## ", start + 1);
  const section = readme.slice(start, end < 0 ? undefined : end);
  const blocks: Quickstart[] = [];
  let title = "";
  for (const part of section.split(/^```/m).entries()) {
    const [i, text] = part;
    if (i % 2 === 0) {
      const headings = [...text.matchAll(/^### (.+)$/gm)];
      if (headings.length > 0) title = headings.at(-1)![1]!;
    } else if (text.startsWith("sh\n")) {
      blocks.push({ title, script: text.slice(3) });
    }
  }
  return blocks;
}

/** What in a block's output says it did not answer with data. */
const NO_DATA: [RegExp, string][] = [
  [/"error"\s*:/, "an API or JSON-RPC error"],
  [/"data"\s*:\s*\[\s*\]/, "an empty list"],
  [/^\[\s*\]$/m, "an empty list"],
  [/^null$/m, "a missing value"],
  [/^X \S+/m, "a badge refusal"],
  [/^R \d+ \S+/m, "a rejected tap"],
];

interface BlockRun {
  code: number | null;
  output: string;
}

/** Runs one block in bash (-e, pipefail) in its own process group, killed with it at the end. */
function runBlock(script: string, cwd: string): Promise<BlockRun> {
  return new Promise((resolve, reject) => {
    const child = spawn("bash", ["-e", "-o", "pipefail", "-c", script], {
      cwd,
      env: baseEnv(),
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    let output = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (output += chunk));
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (output += chunk));
    const killGroup = () => {
      try {
        process.kill(-child.pid!, "SIGKILL");
      } catch {
        // the group has already ended
      }
    };
    const timer = setTimeout(() => {
      killGroup();
      reject(new Error(`timed out after ${BLOCK_TIMEOUT_MS} ms; output so far:\n${output}`));
    }, BLOCK_TIMEOUT_MS);
    child.on("error", reject);
    // What the block left in the background (a socat, a simulated badge) holds the output open
    // after bash ends; it goes with the group.
    child.on("exit", killGroup);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

const tempDir = tempDirs("readme");
let server: Server;
let workspace: string;

beforeAll(async () => {
  // The repository as a reader has it, except var/: the test's own, so nothing is written into the checkout.
  workspace = tempDir("workspace");
  for (const entry of fs.readdirSync(ROOT)) {
    if (entry === "var" || entry === ".git") continue;
    fs.symlinkSync(path.join(ROOT, entry), path.join(workspace, entry));
  }
  server = await serve(["--demo", "--data", path.join(workspace, "var")]);
});

afterAll(async () => {
  if (server) await stop(server);
  await killLeftoverServers();
});

const blocks = quickstartBlocks(fs.readFileSync(path.join(ROOT, "README.md"), "utf8"));

describe("the README's quickstarts on the demo school", () => {
  it("are there, one or more per user", () => {
    expect(new Set(blocks.map((b) => b.title.split(":")[0]))).toEqual(
      new Set(["Integrators", "Firmware engineers", "CI", "QA", "Administrators", "Tools and assistants"]),
    );
  });

  it.each(blocks.map((block, i) => [`${i + 1}. ${block.title}`, block] as const))(
    "%s answers with data",
    async (_name, block) => {
      const { code, output } = await runBlock(block.script.replaceAll(README_URL, server.url), workspace);
      expect(code, `exit ${code}; output:\n${output}`).toBe(0);
      expect(output.trim(), "the block printed nothing").not.toBe("");
      for (const [pattern, what] of NO_DATA) expect(pattern.test(output), `${what} (${pattern}) in:\n${output}`).toBe(false);
    },
    BLOCK_TIMEOUT_MS + 10_000,
  );
});
