// What the quickstarts write into the working tree (issue 21 row 15) stays out of `git status`:
// images, downloads, reports, bundles, and the rig file, which holds a device token.
import { execFileSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { ROOT } from "./server/cli-process.ts";

const OUTPUTS = ["build/badge-1.5.0.bin", "fw.bin", "reports/scenarios.xml", "reports/hil.html", "my-rig.json", "var/my-rig.json", "dist/serve.js", "dist/cli/cli.js"];

describe("the quickstarts' outputs", () => {
  it("are git-ignored", () => {
    // check-ignore prints each path that is ignored (and exits 1 when none is)
    const ignored = execFileSync("git", ["check-ignore", "--no-index", ...OUTPUTS], { cwd: ROOT, encoding: "utf8" }).trim().split("\n");
    expect(ignored).toEqual(OUTPUTS);
  });
});
