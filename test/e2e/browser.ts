// Debian's chromium driven by playwright-core (which downloads no browser of its own), headless,
// with a fresh profile and nothing that reaches the network on its own. Screenshots go to
// test/e2e/artifacts/ (git-ignored); with BADGEBENCH_UPDATE_SCREENSHOTS=1 a small copy also goes
// to fixtures/screenshots/, which the README shows.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium, type BrowserContext, type Page } from "playwright-core";

export const CHROMIUM = "/usr/bin/chromium";
const ARTIFACTS = fileURLToPath(new URL("./artifacts/", import.meta.url));
const README_SCREENSHOTS = fileURLToPath(new URL("../../fixtures/screenshots/", import.meta.url));
/** The README's copies stay small enough to keep in git. */
export const README_SCREENSHOT_MAX_BYTES = 200 * 1024;

export interface Browser {
  context: BrowserContext;
  newPage(viewport?: { width: number; height: number }): Promise<Page>;
  close(): Promise<void>;
}

export async function launchBrowser(): Promise<Browser> {
  if (!fs.existsSync(CHROMIUM)) {
    throw new Error(`${CHROMIUM} is missing: the browser tests need Debian's chromium (apt-get install --no-install-recommends chromium; .ci/run does it)`);
  }
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "badgebench-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    viewport: { width: 1100, height: 900 },
  });
  return {
    context,
    async newPage(viewport) {
      const page = await context.newPage();
      if (viewport) await page.setViewportSize(viewport);
      return page;
    },
    async close() {
      await context.close();
      fs.rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** Saves a screenshot as a test artefact; `readmeName` also refreshes the README's copy when asked to. */
export async function screenshot(page: Page, name: string, options: { fullPage?: boolean; readmeName?: string } = {}): Promise<Buffer> {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  const bytes = await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: options.fullPage ?? false });
  if (options.readmeName && process.env.BADGEBENCH_UPDATE_SCREENSHOTS === "1") {
    if (bytes.length > README_SCREENSHOT_MAX_BYTES) throw new Error(`${name}.png is ${bytes.length} bytes; the README's copy must stay under ${README_SCREENSHOT_MAX_BYTES}`);
    fs.mkdirSync(README_SCREENSHOTS, { recursive: true });
    fs.writeFileSync(path.join(README_SCREENSHOTS, options.readmeName), bytes);
  }
  return bytes;
}
