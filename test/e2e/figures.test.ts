// The fleet's and the sweep's pictures (`sim fleet --html`, `bench-sim-sweep.ts --html`) opened
// in a real browser: the figures the command printed as JSON are the ones the page shows, and
// the charts are drawn.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { run } from "../server/cli-process.ts";
import { launchBrowser, screenshot, type Browser } from "./browser.ts";

let dir: string;
let browser: Browser;
beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "badgebench-figures-"));
  browser = await launchBrowser();
});
afterAll(async () => {
  await browser?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

async function open(file: string) {
  const page = await browser.newPage({ width: 1000, height: 900 });
  const errors: string[] = [];
  page.on("pageerror", (error) => errors.push(String(error)));
  await page.goto(pathToFileURL(file).href);
  return { page, errors };
}

describe("the fleet's picture", () => {
  it("shows the run's outcomes, latencies and the badges over time", async () => {
    const html = path.join(dir, "fleet.html");
    const result = await run(["sim", "fleet", "--badges", "40", "--downloading", "8", "--spread-ms", "1000", "--seed", "7", "--json", "--html", html], { timeoutMs: 80_000 });
    expect(result.code, result.stderr).toBe(0);
    const summary = JSON.parse(result.stdout);
    const { page, errors } = await open(html);
    expect(errors).toEqual([]);
    expect(await page.title()).toBe("PASS: badgebench fleet");
    expect(await page.locator("#overall").textContent()).toContain(`40 badges (8 asked for the update): 0 crashed, ${summary.maxConcurrentDownloads} download${summary.maxConcurrentDownloads === 1 ? "" : "s"} at once`);
    const outcomes = await page.locator("table.outcomes tbody tr").evaluateAll((rows) => rows.map((row) => [...row.querySelectorAll("td")].slice(0, 3).map((td) => td.textContent)));
    expect(outcomes).toEqual(summary.outcomes.map((o: { outcome: string; reason: string | null; count: number }) => [o.outcome, o.reason ?? "", String(o.count)]));
    expect(await page.locator("#fleet-chart").getAttribute("data-drawn")).toBe("true");
    expect(await page.locator("#fleet-chart canvas").count()).toBe(1);
    // The samples start when the badges' clocks do and move forward.
    const times = JSON.parse((await page.locator("#chart-data").textContent())!).map((s: { t: number }) => s.t);
    expect(times.length).toBeGreaterThan(2);
    expect(times).toEqual([...times].sort((a: number, b: number) => a - b));
    await screenshot(page, "fleet-figures", { fullPage: true });
  });
});

describe("the sweep's picture", () => {
  it("shows each case's time by fault, the outcomes per fault and the violations", async () => {
    const html = path.join(dir, "sweep.html");
    const result = await run(["--import", "tsx", "scripts/bench/bench-sim-sweep.ts", "--cases", "16", "--json", "--html", html], { program: [], timeoutMs: 80_000 });
    const report = JSON.parse(result.stdout);
    const { page, errors } = await open(html);
    expect(errors).toEqual([]);
    expect(await page.locator("#overall").textContent()).toContain(`16 cases in ${report.wall_s.toFixed(2)} s: ${report.violations} invariant violations`);
    const kinds = Object.entries(report.per_kind as Record<string, number>).filter(([, n]) => n > 0);
    const rows = await page.locator("section", { hasText: "Per fault" }).locator("tbody tr").evaluateAll((trs) => trs.map((tr) => [tr.children[0]!.textContent, tr.children[1]!.textContent]));
    expect(rows.sort()).toEqual(kinds.map(([kind, n]) => [kind, String(n)]).sort());
    expect(await page.locator("#sweep-chart").getAttribute("data-drawn")).toBe("true");
    await screenshot(page, "sweep-figures", { fullPage: true });
  });
});
