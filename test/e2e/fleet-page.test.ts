// The fleet page in a real browser against a live server whose fleet has a badge in every state:
// the key asked for and kept in memory, every state told by icon and word, filters, sorting,
// promote refused then allowed, refresh, the keyboard alone, a phone, a wrong or revoked key, the
// server going away and coming back, and a badge name made of HTML.
import net from "node:net";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiKey, revokeApiKey } from "../../server/services/api-keys.ts";
import { createDevice, revokeDevice } from "../../server/services/devices.ts";
import { startBadgeHarness, type BadgeHarness } from "../server/badge-harness.ts";
import { canaryReportsOk, HTML_NAME, seedFleet, type SeededFleet } from "../server/seeded-fleet.ts";
import { launchBrowser, README_SCREENSHOT_MAX_BYTES, screenshot, type Browser } from "./browser.ts";

const STATE_WORDS = ["Current", "Outdated", "Unreleased", "Updating", "Failed", "No report", "Unknown"];

let h: BadgeHarness;
let fleet: SeededFleet;
let browser: Browser;
beforeAll(async () => {
  h = await startBadgeHarness();
  fleet = await seedFleet(h);
  browser = await launchBrowser();
});
afterAll(async () => {
  await browser?.close();
  await h?.close();
});

async function openFleet(key: string, options: { url?: string; viewport?: { width: number; height: number } } = {}): Promise<Page> {
  const page = await browser.newPage(options.viewport);
  await page.goto(`${options.url ?? h.url}/fleet`);
  await page.getByLabel("API key", { exact: true }).fill(key);
  await page.getByRole("button", { name: "Open the fleet" }).click();
  await page.locator("#devices-table tbody tr").first().waitFor();
  return page;
}

const rowNames = (page: Page) => page.locator("#devices-table tbody tr .name").allTextContents();
const pageInfo = (page: Page) => page.locator("#page-info").textContent();

describe("loading the page", () => {
  it("serves static files that hold no data and need no key, with a policy that runs only the page's own script", async () => {
    const html = await fetch(`${h.url}/fleet`);
    expect(html.status).toBe(200);
    expect(html.headers.get("content-type")).toMatch(/^text\/html/);
    expect(html.headers.get("content-security-policy")).toContain("script-src 'self'");
    expect(html.headers.get("set-cookie")).toBeNull();
    const text = await html.text();
    expect(text).not.toContain("dev_");
    for (const asset of ["fleet.js", "fleet.css"]) expect((await fetch(`${h.url}/fleet/${asset}`)).status).toBe(200);
    expect((await fetch(`${h.url}/fleet/fleet-page-routes.ts`)).status).toBe(404);
  });

  it("asks for a key, says a wrong one was refused and asks again", async () => {
    const page = await browser.newPage();
    await page.goto(`${h.url}/fleet`);
    await expect.poll(() => page.evaluate(() => document.activeElement?.id)).toBe("key-input");
    await page.getByLabel("API key", { exact: true }).fill("sk_test_not-a-real-key");
    await page.getByRole("button", { name: "Open the fleet" }).click();
    await expect.poll(() => page.locator("#key-error").textContent()).toContain("The server refused this key: Invalid or revoked API key.");
    expect(await page.locator("#key-panel").isVisible()).toBe(true);
    expect(await page.locator("#fleet").isVisible()).toBe(false);
    expect(await page.evaluate(() => document.activeElement?.id)).toBe("key-input");
    // Nothing of the key is kept anywhere but the page's memory.
    expect(await page.evaluate(() => [document.cookie, localStorage.length, sessionStorage.length])).toEqual(["", 0, 0]);
    await page.close();
  });
});

describe("the fleet", () => {
  let page: Page;
  beforeAll(async () => {
    page = await openFleet(fleet.adminKey);
  });
  afterAll(() => page.close());

  it("shows every badge with its state by icon and word, counts per state, and the releases with the canary", async () => {
    expect(await rowNames(page)).toHaveLength(11);
    // Sorted by state, what needs a person first.
    const states = await page.locator("#devices-table tbody tr .state").allTextContents();
    expect(states.slice(0, 3)).toEqual(["Failed", "No report", "Updating"]);
    expect(new Set(states)).toEqual(new Set(STATE_WORDS));
    for (const state of await page.locator("#devices-table tbody .state").all()) {
      expect(await state.locator("svg.icon use").getAttribute("href")).toMatch(/^#icon-/);
    }
    const counts = await page.locator("#state-counts button").allTextContents();
    expect(counts).toEqual(["Failed1", "No report1", "Updating1", "Outdated2", "Unreleased1", "Unknown4", "Current1", "Revoked0"]);

    const failedRow = page.locator("#devices-table tbody tr", { hasText: "Music room" });
    expect(await failedRow.textContent()).toContain("download cut at 51% (33 of 64 KiB)");
    expect(await failedRow.textContent()).toContain("3.71 V");

    const canaryRow = page.locator("#releases-table tbody tr[data-release='1.5.0']");
    expect(await canaryRow.textContent()).toContain("Canary, desk 3");
    expect(await canaryRow.textContent()).toContain("none yet");
    expect(await page.locator("#releases-table tbody tr[data-release='1.4.0']").textContent()).toContain("The whole fleet");
    expect(await page.locator("#connection").textContent()).toContain("Connected");
    await screenshot(page, "fleet-page-full", { fullPage: true });
    const shot = await screenshot(page, "fleet-page", { readmeName: "fleet-page.png" });
    expect(shot.length).toBeLessThan(README_SCREENSHOT_MAX_BYTES);
  });

  it("shows a badge name made of HTML as text and never runs it", async () => {
    const names = await rowNames(page);
    expect(names).toContain(HTML_NAME);
    expect(await page.locator("#devices-table img").count()).toBe(0);
    expect(await page.evaluate(() => (window as unknown as { pwned?: number }).pwned)).toBeUndefined();
  });

  it("filters by state, room and model, and sorts", async () => {
    await page.locator("#state-counts button[data-state='failed']").click();
    await expect.poll(() => rowNames(page)).toEqual(["Music room"]);
    expect(await page.locator("#state-counts button[data-state='failed']").getAttribute("aria-pressed")).toBe("true");
    expect(await pageInfo(page)).toContain("Badges 1–1 of 1 matching the filters");
    await page.locator("#state-counts button[data-state='failed']").click();
    await expect.poll(async () => (await rowNames(page)).length).toBe(11);

    await page.locator("#filter-room").fill("R2");
    await page.locator("#filter-model").fill("badge-v1");
    await page.getByRole("button", { name: "Apply" }).click();
    await expect.poll(async () => (await rowNames(page)).sort()).toEqual(["Gym door", "Staff room", HTML_NAME].sort());

    await page.locator("#sort").selectOption("name");
    await page.locator("#order").selectOption("desc");
    await expect.poll(() => rowNames(page)).toEqual(["Staff room", "Gym door", HTML_NAME]);

    await page.getByRole("button", { name: "Clear filters" }).click();
    await expect.poll(async () => (await rowNames(page)).length).toBe(11);
    await page.locator("#sort").selectOption("state");
    await page.locator("#order").selectOption("asc");
  });

  it("refuses the promotion with the reason until the canary reported ok; refresh shows the report and promote then works", async () => {
    await page.getByRole("button", { name: "Promote 1.5.0" }).click();
    const dialog = page.locator("#promote-dialog");
    await dialog.waitFor();
    expect(await dialog.textContent()).toContain(`canary ${fleet.ids.canary} has not reported ota=ok|1.5.0`);
    await page.getByRole("button", { name: "Cancel" }).click();
    expect(await dialog.isVisible()).toBe(false);
    expect(await page.locator("#releases-message").textContent()).toContain("Promotion of 1.5.0 refused");
    expect((await h.releases.read()).fleet).toBe("1.4.0");

    await canaryReportsOk(h, fleet);
    await page.getByRole("button", { name: "Refresh" }).click();
    const canaryRow = page.locator("#releases-table tbody tr[data-release='1.5.0']");
    await expect.poll(() => canaryRow.textContent()).toContain("ok 1.5.0");
    expect(await canaryRow.textContent()).toContain("The canary reported ok.");
    expect(await page.locator("#devices-table tbody tr", { hasText: "Canary, desk 3" }).textContent()).toContain("1.5.0");

    await page.getByRole("button", { name: "Promote 1.5.0" }).click();
    await expect.poll(() => page.locator("#releases-message").textContent()).toContain("1.5.0 is now the fleet's release (the canary reported ok)");
    await expect.poll(() => page.locator("#releases-table tbody tr[data-release='1.5.0']").textContent()).toContain("The whole fleet");
    expect((await h.releases.read()).fleet).toBe("1.5.0");
    // The fleet moved on: the badge on 1.4.0 is outdated now, the canary on 1.5.0 current.
    await expect.poll(() => page.locator("#devices-table tbody tr", { hasText: "Front desk" }).locator(".state").textContent()).toBe("Outdated");
    expect(await page.locator("#devices-table tbody tr", { hasText: "Canary, desk 3" }).locator(".state").textContent()).toBe("Current");
  });

  it("forces a promotion only with a reason, given in the dialog", async () => {
    await h.publish("1.6.0", { canary: fleet.ids.canary });
    await page.getByRole("button", { name: "Refresh" }).click();
    await page.getByRole("button", { name: "Promote 1.6.0" }).click();
    await page.locator("#promote-dialog").waitFor();
    await page.getByLabel("Reason for promoting without the canary's report").fill("the canary is in a drawer; tested on the bench");
    await page.getByRole("button", { name: "Promote anyway" }).click();
    await expect.poll(() => page.locator("#releases-message").textContent()).toContain("1.6.0 is now the fleet's release (forced without the canary's report)");
    expect((await h.releases.read()).releases.at(-1)?.promoted).toMatchObject({ forced: true, reason: "the canary is in a drawer; tested on the bench" });
  });
});

/** Presses Tab until the focused element matches, and fails after `max` presses. */
async function tabTo(page: Page, matches: (el: { id: string; text: string; state: string | null }) => boolean, max = 80) {
  for (let i = 0; i < max; i++) {
    await page.keyboard.press("Tab");
    const focused = await page.evaluate(() => {
      const el = document.activeElement as HTMLElement | null;
      return { id: el?.id ?? "", text: el?.textContent?.trim() ?? "", state: el?.getAttribute("data-state") ?? null };
    });
    if (matches(focused)) return;
  }
  throw new Error("the element was not reached with Tab");
}

describe("with the keyboard alone", () => {
  it("opens the fleet, filters by a state, pages through the filters and opens and closes the promote dialog", async () => {
    await h.publish("1.7.0", { canary: fleet.ids.canary });
    const page = await browser.newPage();
    await page.goto(`${h.url}/fleet`);
    await expect.poll(() => page.evaluate(() => document.activeElement?.id)).toBe("key-input");
    await page.keyboard.type(fleet.adminKey);
    await page.keyboard.press("Enter");
    await page.locator("#devices-table tbody tr").first().waitFor();

    await tabTo(page, (el) => el.state === "failed");
    const outline = await page.evaluate(() => getComputedStyle(document.activeElement!).outlineStyle);
    expect(outline).not.toBe("none");
    await page.keyboard.press("Enter");
    await expect.poll(() => rowNames(page)).toEqual(["Music room"]);
    await page.keyboard.press("Space");
    await expect.poll(async () => (await rowNames(page)).length).toBe(11);

    await tabTo(page, (el) => el.text === "Promote 1.7.0");
    await page.keyboard.press("Enter");
    await page.locator("#promote-dialog").waitFor();
    expect(await page.evaluate(() => document.activeElement?.id)).toBe("promote-reason");
    await page.keyboard.press("Escape");
    await expect.poll(() => page.locator("#promote-dialog").isVisible()).toBe(false);

    await tabTo(page, (el) => el.id === "filter-room");
    await page.keyboard.type("R1");
    await page.keyboard.press("Enter");
    await expect.poll(async () => (await rowNames(page)).length).toBe(6);
    await screenshot(page, "fleet-page-keyboard");
    await page.close();
  });
});

describe("bad input", () => {
  it("a key revoked while the page is open: a clear message, and the key is asked for again", async () => {
    const key = await createApiKey(h.server.store.db, { mode: "test", scopes: ["devices:read", "releases:read"], name: "to revoke" });
    const page = await openFleet(key.secret);
    await revokeApiKey(h.server.store.db, key.id);
    await page.getByRole("button", { name: "Refresh" }).click();
    await expect.poll(() => page.locator("#key-error").textContent()).toContain("Invalid or revoked API key");
    expect(await page.locator("#fleet").isVisible()).toBe(false);
    expect(await page.evaluate(() => document.activeElement?.id)).toBe("key-input");
    await page.close();
  });

  it("a key without devices:read is refused with the scope it needs", async () => {
    const key = (await createApiKey(h.server.store.db, { mode: "test", scopes: ["releases:read"] })).secret;
    const page = await browser.newPage();
    await page.goto(`${h.url}/fleet`);
    await page.getByLabel("API key", { exact: true }).fill(key);
    await page.keyboard.press("Enter");
    await expect.poll(() => page.locator("#key-error").textContent()).toContain("devices:read");
    await page.close();
  });

  it("a key without releases:read still shows the badges, and says why the releases are missing", async () => {
    const key = (await createApiKey(h.server.store.db, { mode: "test", scopes: ["devices:read"] })).secret;
    const page = await openFleet(key);
    expect(await page.locator("#releases-message").textContent()).toContain("needs releases:read");
    expect(await rowNames(page)).toHaveLength(11);
    await page.close();
  });

  it("the server going away shows Disconnected, and the page recovers when it returns", async () => {
    const proxy = await startTcpProxy(new URL(h.url).port);
    const page = await openFleet(fleet.viewerKey, { url: proxy.url });
    await proxy.stop();
    await page.getByRole("button", { name: "Refresh" }).click();
    const connection = page.locator("#connection");
    await expect.poll(() => connection.textContent()).toContain("Disconnected: the server does not answer");
    expect(await connection.isVisible()).toBe(true);
    expect(await connection.locator("svg.icon").count()).toBe(1);
    expect(await rowNames(page)).toHaveLength(11);
    await screenshot(page, "fleet-page-disconnected");
    await proxy.start();
    await expect.poll(() => connection.textContent(), { timeout: 120_000 }).toContain("Connected");
    await page.close();
    await proxy.stop();
  });
});

describe("on a phone", () => {
  it("shows each badge as a card with labelled fields and no sideways scrolling", async () => {
    const page = await openFleet(fleet.viewerKey, { viewport: { width: 390, height: 844 } });
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    expect(overflow).toBeLessThanOrEqual(0);
    const label = await page.locator("#devices-table tbody td").first().evaluate((td) => getComputedStyle(td, "::before").content);
    expect(label).toBe('"Badge"');
    await screenshot(page, "fleet-page-phone", { fullPage: true });
    await page.close();
  });
});

describe("a revoked badge", () => {
  it("shows as Revoked, counted as revoked and last, whatever it ran before", async () => {
    const own = await startBadgeHarness();
    try {
      const db = own.server.store.db;
      // Two badges that never checked in (Unknown), one of them then revoked; and one that
      // reported a version (Unreleased), revoked: "Revoked" wins over what the badge last ran.
      await createDevice(db, { mode: "test", room: "R1", model: "badge-v1", name: "Spare" });
      const lost = await createDevice(db, { mode: "test", room: "R1", model: "badge-v1", name: "Lost in the bus" });
      await revokeDevice(db, lost.id);
      const stolen = await createDevice(db, { mode: "test", room: "R2", model: "badge-v1", name: "Stolen" });
      expect((await own.sync(stolen.token, "v=1\nsv=1.0.0\nbat=3.9\n")).status).toBe(200);
      await revokeDevice(db, stolen.id);
      const key = (await createApiKey(db, { mode: "test", scopes: ["devices:read"] })).secret;
      const page = await openFleet(key, { url: own.url });
      const stateOf = (name: string) => page.locator("#devices-table tbody tr", { hasText: name }).locator(".state").textContent();
      expect(await stateOf("Lost in the bus")).toBe("Revoked");
      expect(await stateOf("Stolen")).toBe("Revoked");
      expect(await stateOf("Spare")).toBe("Unknown");
      const counts = await page.locator("#state-counts button").allTextContents();
      expect(counts).toContain("Revoked2");
      expect((await page.locator("#devices-table tbody tr .state").allTextContents()).slice(-2)).toEqual(["Revoked", "Revoked"]);
      expect(await page.locator("#devices-table tbody tr .state-revoked svg.icon use").first().getAttribute("href")).toBe("#icon-revoked");
      await page.locator("#state-counts button[data-state='revoked']").click();
      await expect.poll(async () => (await rowNames(page)).sort()).toEqual(["Lost in the bus", "Stolen"]);
      await page.close();
    } finally {
      await own.close();
    }
  });
});

describe("10,000 badges", () => {
  it("pages through them 50 at a time, forwards and back", async () => {
    const big = await startBadgeHarness();
    try {
      const now = new Date().toISOString();
      await big.server.store.db.transaction().execute(async (trx) => {
        for (let i = 0; i < 10_000; i += 500) {
          const rows = Array.from({ length: 500 }, (_, j) => ({
            id: `dev_bulk${String(i + j).padStart(5, "0")}`,
            livemode: 0 as const,
            room: (i + j) % 2 === 0 ? "R1" : "R2",
            model: "badge-v2",
            name: `Badge ${String(i + j).padStart(5, "0")}`,
            created_at: now,
            token_lookup: null,
            token_hash: null,
            token_hint: null,
            revoked_at: null,
            installed_version: null,
            installed_display: null,
            battery_volts: 3.5 + ((i + j) % 70) / 100,
            charging: 0 as const,
            last_check_at: null,
            last_sync_at: null,
            offered_version: null,
            offered_at: null,
          }));
          await trx.insertInto("devices").values(rows).execute();
        }
      });
      const key = (await createApiKey(big.server.store.db, { mode: "test", scopes: ["devices:read"] })).secret;
      const page = await openFleet(key, { url: big.url });
      expect(await pageInfo(page)).toBe("Badges 1–50 of 10003 (page 1 of 201)");
      await page.locator("#sort").selectOption("name");
      await expect.poll(async () => (await rowNames(page))[0]).toBe("Badge 00000");
      await page.getByRole("button", { name: "Next page" }).click();
      await expect.poll(() => pageInfo(page)).toBe("Badges 51–100 of 10003 (page 2 of 201)");
      expect((await rowNames(page))[0]).toBe("Badge 00050");
      await page.getByRole("button", { name: "Previous page" }).click();
      await expect.poll(() => pageInfo(page)).toBe("Badges 1–50 of 10003 (page 1 of 201)");
      expect(await page.getByRole("button", { name: "Previous page" }).isDisabled()).toBe(true);
      await page.close();
    } finally {
      await big.close();
    }
  });
});

/** A TCP forwarder that can be stopped and started again on the same port: a server that goes away and comes back. */
async function startTcpProxy(targetPort: string) {
  const sockets = new Set<net.Socket>();
  let server: net.Server | undefined;
  let port = 0;
  const start = async () => {
    server = net.createServer((client) => {
      const upstream = net.connect(Number(targetPort), "127.0.0.1");
      for (const socket of [client, upstream]) {
        sockets.add(socket);
        socket.on("close", () => sockets.delete(socket));
        socket.on("error", () => socket.destroy());
      }
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((resolve) => server!.listen(port, "127.0.0.1", resolve));
    port = (server.address() as net.AddressInfo).port;
  };
  await start();
  return {
    url: `http://127.0.0.1:${port}`,
    start,
    async stop() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server!.close(() => resolve()));
    },
  };
}

