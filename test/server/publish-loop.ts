// A process publishing in a loop, killed with SIGKILL a random moment after its first publish:
// the crash tests of both release stores (publish-store.test.ts for files, database-release-store.test.ts
// for the database) run it, then check what the kill left.
import { spawn } from "node:child_process";
import { expect } from "vitest";
import { baseEnv, ROOT } from "./cli-process.ts";

/** Runs `node args...` until it prints `published ...`, kills it within `maxDelayMs`, and returns the versions it said it published and promoted. */
export async function killPublishLoop(args: string[], { startTimeoutMs, maxDelayMs }: { startTimeoutMs: number; maxDelayMs: number }) {
  const child = spawn(process.execPath, args, { cwd: ROOT, env: baseEnv(), stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on("close", (_code, signal) => resolve(signal)));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the publish loop did not publish\nstderr: ${stderr}`)), startTimeoutMs);
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      stdout += chunk;
      if (stdout.includes("published ")) {
        clearTimeout(timer);
        resolve();
      }
    });
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`the publish loop exited\nstderr: ${stderr}`));
    });
  });
  await new Promise((resolve) => setTimeout(resolve, Math.random() * maxDelayMs));
  child.kill("SIGKILL");
  expect(await exited, stderr).toBe("SIGKILL");
  const said = (prefix: string) => stdout.split("\n").filter((line) => line.startsWith(prefix)).map((line) => line.slice(prefix.length));
  return { published: said("published "), promoted: said("promoted ") };
}
