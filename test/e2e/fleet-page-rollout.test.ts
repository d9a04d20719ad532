// The fleet page's staged rollout panel in a real browser (issue 24): a rollout halted by a badge's
// ota=err shows its stage, its counts per stage, the halt with the badge and the reason; the
// operator's buttons resume, pause and abort it, and the page shows each new status.
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiKey } from "../../server/services/api-keys.ts";
import { startRolloutFixture, type RolloutFixture } from "../server/rollout-fixture.ts";
import { launchBrowser, screenshot, type Browser } from "./browser.ts";

// A click's POST, the reload and the render take longer than expect.poll's default 1 s on a busy machine.
const UNTIL_SHOWN = { timeout: 120_000 };

const FIRST_STAGE = 10;
let f: RolloutFixture;
let browser: Browser;
let operatorKey: string;
let rolloutId: string;
let failing: { id: string; token: string };

beforeAll(async () => {
  f = await startRolloutFixture({ firstStage: FIRST_STAGE, inside: 2, outside: 2 });
  await f.h.publish("1.4.0");
  await f.h.publish("1.5.0", { canary: f.h.devices.r1.id });
  await f.report(f.h.devices.r1.token, "1.5.0", "ok|1.5.0");
  const created = await f.call("POST", "/v1/rollouts", { body: { version: "1.5.0", stages: [FIRST_STAGE, 50, 100], halt_failures: 1 } });
  rolloutId = created.body.id;
  failing = f.badges[0]!;
  expect(await f.download(failing.token, "1.5.0")).toBe(200);
  await f.report(failing.token, "1.4.0", "err|1.5.0|MD5 mismatch");
  operatorKey = (await createApiKey(f.h.server.store.db, { mode: "test", scopes: ["devices:read", "releases:write"], name: "operator" })).secret;
  browser = await launchBrowser();
});
afterAll(async () => {
  await browser?.close();
  await f?.close();
});

async function openFleet(key: string): Promise<Page> {
  const page = await browser.newPage();
  await page.goto(`${f.h.url}/fleet`);
  await page.getByLabel("API key", { exact: true }).fill(key);
  await page.getByRole("button", { name: "Open the fleet" }).click();
  await page.locator("#devices-table tbody tr").first().waitFor();
  return page;
}

const status = (page: Page) => page.locator(".rollout-summary").getAttribute("data-rollout-status");
const buttons = (page: Page) => page.locator("[data-rollout-action]").allTextContents();

describe("the staged rollout panel", () => {
  it("shows a halted rollout: its stage, the counts per stage, the halt with the badge and why", async () => {
    const page = await openFleet(operatorKey);
    await expect.poll(() => status(page), UNTIL_SHOWN).toBe("halted");
    const summary = await page.locator(".rollout-summary").textContent();
    expect(summary).toContain("Halted 1.5.0 (from 1.4.0), stage 1 of 3 (10 % of the fleet)");
    const view = (await f.call("GET", `/v1/rollouts/${rolloutId}`)).body;
    const firstStage = page.locator(`#rollout-stages tr[data-stage="${FIRST_STAGE}"] td`);
    expect(await firstStage.allTextContents()).toEqual([`${FIRST_STAGE} %current`, String(view.counts.stages[0].badges), "1", String(view.counts.stages[0].ok), "1"]);
    expect(await page.locator("#rollout-stages tbody tr").count()).toBe(3);
    const halt = page.locator(".halt");
    expect(await halt.getAttribute("role")).toBe("alert");
    expect(await halt.textContent()).toContain(view.halt.why);
    expect(await halt.locator(`[data-failed-badge="${failing.id}"]`).textContent()).toContain(`(${failing.id}): ota=err: MD5 mismatch`);
    expect(await buttons(page)).toEqual(["Resume", "Abort"]);
    await screenshot(page, "fleet-rollout-halted", { fullPage: true });
    await page.close();
  });

  it("resumes, pauses and aborts with its buttons, showing each new status and the buttons it allows", async () => {
    const page = await openFleet(operatorKey);
    await expect.poll(() => status(page), UNTIL_SHOWN).toBe("halted");
    await page.getByRole("button", { name: "Resume" }).click();
    await expect.poll(() => status(page), UNTIL_SHOWN).toBe("active");
    expect(await page.locator("#rollout-message").textContent()).toBe("Resume: the rollout of 1.5.0 is now active.");
    expect(await page.locator(".halt").count()).toBe(0);
    expect(await buttons(page)).toEqual(["Advance to the next stage", "Pause", "Abort"]);
    await page.getByRole("button", { name: "Pause" }).click();
    await expect.poll(() => status(page), UNTIL_SHOWN).toBe("paused");
    expect((await f.call("GET", `/v1/rollouts/${rolloutId}`)).body.status).toBe("paused");
    await page.getByRole("button", { name: "Abort" }).click();
    await expect.poll(() => status(page), UNTIL_SHOWN).toBe("aborted");
    expect(await buttons(page)).toEqual([]);
    expect((await f.call("GET", `/v1/rollouts/${rolloutId}`)).body.status).toBe("aborted");
    expect((await f.h.releases.read()).fleet).toBe("1.4.0");
    await page.close();
  });

  it("says a key without releases:read cannot see rollouts", async () => {
    const page = await openFleet(f.keys.devicesOnly);
    await expect.poll(() => page.locator("#rollout-message").textContent(), UNTIL_SHOWN).toBe("This key cannot see rollouts (it needs releases:read).");
    await page.close();
  });
});
