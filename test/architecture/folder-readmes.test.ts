// Each folder's README names what the folder holds: every source file (in the nearest README above
// it) and every sub-folder with source in it. A file added without a word on what it owns fails here.
import fs from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { owningReadme, ROOT, sourceFiles } from "./source-tree.ts";

const readmes = new Map<string, string>();
const readmeText = (readme: string) => readmes.get(readme) ?? readmes.set(readme, fs.readFileSync(path.join(ROOT, readme), "utf8")).get(readme)!;

/** `file` is named when its README mentions it by its path below the README's folder or by its name. */
function isNamed(file: string, readme: string): boolean {
  const text = readmeText(readme);
  const below = path.posix.relative(path.posix.dirname(readme), file);
  return text.includes(below) || new RegExp(`(^|[\\s\`/(])${path.posix.basename(file).replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}($|[\\s\`),:;])`, "m").test(text);
}

describe("folder READMEs", () => {
  const files = sourceFiles();

  it("name every source file of their folder", () => {
    const unnamed = files.filter((file) => !isNamed(file, owningReadme(file))).map((file) => `${file} (not in ${owningReadme(file)})`);
    expect(unnamed).toEqual([]);
  });

  it("name every sub-folder that holds source", () => {
    const folders = new Set(files.map((file) => path.posix.dirname(file)));
    const unnamed: string[] = [];
    for (const folder of folders) {
      const parent = path.posix.dirname(folder);
      if (parent === "." || fs.existsSync(path.join(ROOT, folder, "README.md"))) continue;
      const readme = owningReadme(`${parent}/x`);
      const below = path.posix.relative(path.posix.dirname(readme), folder);
      if (!readmeText(readme).includes(`${below}/`)) unnamed.push(`${folder}/ (not in ${readme})`);
    }
    expect(unnamed).toEqual([]);
  });
});
