// The repository's own source files, as the architecture tests see them: tracked or new files
// under the layer folders (git-ignored ones, such as the C badge's build, left out).
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

export const ROOT = path.resolve(import.meta.dirname, "../..");
const LAYERS = ["firmware", "server", "badge-sim", "hil", "scripts", "test", "fixtures"];
const SOURCE = /\.(ts|js|mjs|cjs|c|h|css|html)$/;

/** Every source file under the layer folders, relative to the root, with / separators. */
export function sourceFiles(): string[] {
  const listed = execFileSync("git", ["ls-files", "--cached", "--others", "--exclude-standard", "--", ...LAYERS], { cwd: ROOT, encoding: "utf8" });
  return listed
    .split("\n")
    .filter((file) => SOURCE.test(file) && fs.existsSync(path.join(ROOT, file)))
    .sort();
}

/** The README that owns `file`: the nearest README.md in its folder or a folder above it. */
export function owningReadme(file: string): string {
  for (let dir = path.posix.dirname(file); dir !== "."; dir = path.posix.dirname(dir)) {
    if (fs.existsSync(path.join(ROOT, dir, "README.md"))) return `${dir}/README.md`;
  }
  return "README.md";
}

export function lineCount(file: string): number {
  return fs.readFileSync(path.join(ROOT, file), "utf8").split("\n").length;
}
