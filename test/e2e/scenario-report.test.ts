// `badgebench sim run --html FILE` in a real browser: the file opens from disk with no network,
// the summary says pass or fail with expected against observed for each failed check, each
// scenario has its timeline (states, the download's bytes and the battery over badge time, the
// faults marked where they struck, the screens, the report sent), a file that cannot be played
// shows as an error, and a scenario name made of HTML shows as text.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ROOT, run } from "../server/cli-process.ts";
import { launchBrowser, README_SCREENSHOT_MAX_BYTES, screenshot, type Browser } from "./browser.ts";

const SHIPPED = path.join(ROOT, "fixtures/scenarios");
const HTML_NAME = "happy path <img src=x onerror=window.pwned=1>";

let dir: string;
let report: string;
let exitCode: number | null;
let browser: Browser;
let page: Page;
const networkRequests: string[] = [];

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "badgebench-report-"));
  const scenarios = path.join(dir, "scenarios");
  fs.mkdirSync(scenarios);
  for (const file of ["brownout-50-percent.json", "connection-dropped-at-131072.json"]) fs.copyFileSync(path.join(SHIPPED, file), path.join(scenarios, file));
  const happy = JSON.parse(fs.readFileSync(path.join(SHIPPED, "happy-path.json"), "utf8"));
  fs.writeFileSync(path.join(scenarios, "failing.json"), JSON.stringify({ ...happy, name: HTML_NAME, expect: { ...happy.expect, runningVersion: "9.9.9" } }));
  fs.writeFileSync(path.join(scenarios, "unplayable.json"), `{"name": "half a scenario", "badge": {}}`);
  report = path.join(dir, "out", "report.html");
  exitCode = (await run(["sim", "run", scenarios, "--html", report, "--json"])).code;
  browser = await launchBrowser();
  // The README's size from the start: the charts are drawn for the width they open at.
  page = await browser.newPage({ width: 1000, height: 760 });
  page.setDefaultTimeout(5_000);
  page.on("request", (request) => {
    if (!request.url().startsWith("file:")) networkRequests.push(request.url());
  });
  await page.goto(pathToFileURL(report).href);
});
afterAll(async () => {
  await browser?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

const section = (name: string) => page.locator("section.scenario", { has: page.locator("h2", { hasText: name }) });

describe("the scenario report", () => {
  it("is one file that opens with no network and says at the top that the run failed", async () => {
    expect(exitCode).toBe(1);
    expect(fs.readdirSync(path.dirname(report))).toEqual(["report.html"]);
    expect(networkRequests).toEqual([]);
    expect(await page.title()).toBe("FAIL: badgebench scenarios");
    expect(await page.locator("#overall").textContent()).toContain("FAIL 4 scenarios: 2 passed, 1 failed, 1 error, 0 skipped");
  });

  it("lists expected against observed for each failed check in the summary", async () => {
    const failure = page.locator(".failure", { hasText: "happy path" });
    const row = failure.locator("tr.bad");
    expect(await row.count()).toBe(1);
    expect(await row.locator("td").allTextContents()).toEqual(["expect.runningVersion", "9.9.9", "1.5.0", "✘ FAIL"]);
  });

  it("shows a file that cannot be played as an error, with the reason", async () => {
    const failure = page.locator(".failure", { hasText: "unplayable.json" });
    expect(await failure.textContent()).toContain("ERROR");
    expect(await failure.locator(".message").textContent()).toMatch(/^Could not be played: .*unplayable\.json/);
  });

  it("shows a scenario name made of HTML as text and never runs it", async () => {
    expect(await page.locator("h2", { hasText: "happy path" }).textContent()).toContain(HTML_NAME);
    expect(await page.locator("main img").count()).toBe(0);
    expect(await page.evaluate(() => (window as unknown as { pwned?: number }).pwned)).toBeUndefined();
  });

  it("draws each scenario's timeline: states, download bytes and battery, faults where they struck, screens, the report sent", async () => {
    const brownout = section("brownout at 50 %");
    const states = await brownout.locator(".band .segment").allTextContents();
    expect(states).toEqual(expect.arrayContaining(["online.downloading", "off", "booting", "awake.idle"]));
    expect(states.indexOf("off")).toBeGreaterThan(states.indexOf("online.downloading"));
    // uPlot drew the chart (its canvas and legend) with the power cut marked.
    expect(await brownout.locator(".chart canvas").count()).toBe(1);
    expect(await brownout.locator(".chart .u-legend").textContent()).toContain("downloaded (KiB)");
    expect(await brownout.locator(".chart .uplot").getAttribute("data-faults-drawn")).toBe("1");
    expect(await brownout.locator(".faults").textContent()).toMatch(/power lost: writing ota_1 at offset 131072 at 4\.\d\d s/);
    expect(await brownout.locator(".reports").textContent()).toContain("ota=err|1.5.0|power lost during download after 50% (128 of 256 KiB)");
    const screens = await brownout.locator(".screens pre").allTextContents();
    expect(screens).toContain("Updating to 1.5.0\nDownloading 0% (0 of 256 KiB)");
    expect(screens.at(-1)).toContain("Update to 1.5.0 failed: power lost during download");
    await brownout.scrollIntoViewIfNeeded();
    await screenshot(page, "scenario-report-brownout");

    const dropped = section("connection dropped at byte 131072");
    expect(await dropped.locator(".faults").textContent()).toContain("connection dropped at byte 131072");
    expect(await dropped.locator(".chart .uplot").getAttribute("data-faults-drawn")).toBe("1");
  });

  it("the summary and the first failure, as the README shows it", async () => {
    await page.evaluate(() => window.scrollTo(0, 0));
    const shot = await screenshot(page, "scenario-report", { readmeName: "scenario-report.png" });
    expect(shot.length).toBeLessThan(README_SCREENSHOT_MAX_BYTES);
    await page.locator("#scenario-0 .band").evaluate((band) => band.scrollIntoView());
    await screenshot(page, "scenario-report-timeline", { readmeName: "scenario-report-timeline.png" });
  });
});
