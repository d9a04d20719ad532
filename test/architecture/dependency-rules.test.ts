// The import rules of ../shared/DESIGN.md, written in .dependency-cruiser.cjs, checked over the
// whole repository; and once over a planted violation, so the check is known to be able to fail.
import path from "node:path";
import { createRequire } from "node:module";
import { cruise, type ICruiseResult, type IConfiguration } from "dependency-cruiser";
import { describe, expect, it } from "vitest";

const ROOT = path.resolve(import.meta.dirname, "../..");
const CONFIG = createRequire(import.meta.url)(path.join(ROOT, ".dependency-cruiser.cjs")) as IConfiguration;
const LAYERS = ["firmware", "server", "badge-sim", "hil", "scripts", "test"];

async function violationsIn(baseDir: string, folders: string[]) {
  const previous = process.cwd();
  process.chdir(baseDir); // the rules' paths are relative to the folder cruised
  try {
    const { output } = await cruise(folders, { ...CONFIG.options, ruleSet: { forbidden: CONFIG.forbidden }, validate: true, tsConfig: { fileName: path.join(ROOT, "tsconfig.json") } });
    return (output as ICruiseResult).summary.violations.map((v) => `${v.rule.name}: ${v.from} -> ${v.to}${v.cycle ? ` (${v.cycle.map((c) => c.name).join(" -> ")})` : ""}`);
  } finally {
    process.chdir(previous);
  }
}

describe("the architecture's import rules", () => {
  it("hold over every layer", async () => {
    expect(await violationsIn(ROOT, LAYERS)).toEqual([]);
  });

  it("fail on the planted violation in fixtures/layering-violation", async () => {
    const violations = await violationsIn(path.join(ROOT, "fixtures/layering-violation"), ["firmware", "server"]);
    expect(violations).toEqual(["firmware-imports-nothing-of-ours: firmware/leaks-upward.ts -> server/server-only.ts"]);
  });
});
