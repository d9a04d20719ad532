// GET /api/badge/ota/download as SPEC 4.9 defines it, fetched the way the badge fetches it: an
// HTTP/1.0 request on a raw socket, so nothing between test and server adds or hides framing.
// Ranges, If-Range and the cap of downloads in flight: ota-download-range.test.ts.
import { createHash } from "node:crypto";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OTA_SLOT_BYTES } from "../../firmware/index.ts";
import { openReleaseStores } from "../../server/releases/open-release-store.ts";
import { findRelease, RELEASE_STORE_KINDS, RELEASES_DIRS } from "../../server/releases/release-store.ts";
import { lines, startBadgeHarness, type BadgeHarness } from "./badge-harness.ts";
import { http10 as rawHttp10 } from "./http10.ts";

describe.each(RELEASE_STORE_KINDS)("with the %s release store", (kind) => {
  let h: BadgeHarness;
  let image: Uint8Array;
  beforeAll(async () => {
    h = await startBadgeHarness({ releases: kind });
    image = await h.publish("2.0.0", { size: OTA_SLOT_BYTES });
  });
  afterAll(() => h.close());

  const http10 = (urlPath: string, token: string, extraHeaders: string[] = []) => rawHttp10(h.url, urlPath, token, extraHeaders);

  const fetches = () => h.server.store.db.selectFrom("ota_fetches").selectAll().orderBy("started_at").orderBy("id").execute();

  describe("an HTTP/1.0 download", () => {
    it("receives the exact image, whose MD5 equals the M line, with Content-Length and no chunked framing", async () => {
      const offer = await h.check(h.devices.r1.token, lines("v=1", "sv=1.9.0", "bat=4.1"));
      const response = await http10(offer.get("P")!, h.devices.r1.token);
      expect(response.statusLine).toMatch(/^HTTP\/1\.[01] 200 /);
      expect(response.headers.get("content-type")).toBe("application/octet-stream");
      expect(response.headers.get("content-length")).toBe(String(image.length));
      expect(response.headers.has("transfer-encoding")).toBe(false);
      expect(response.body.length).toBe(Number(offer.get("Z")));
      expect(createHash("md5").update(response.body).digest("hex")).toBe(offer.get("M"));
      expect(Buffer.compare(response.body, Buffer.from(image))).toBe(0);
    });

    it("is recorded with the device, the version and the bytes sent", async () => {
      // The end is recorded once the server saw the connection close, which may come after the
      // client read the last byte.
      await expect.poll(async () => (await fetches()).slice(-1)[0]?.outcome, { timeout: 5000 }).not.toBe("sending");
      const [last] = (await fetches()).slice(-1);
      expect(last).toMatchObject({ device_id: h.devices.r1.id, version: "2.0.0", size: image.length, bytes_sent: image.length, outcome: "completed" });
      expect(last!.ended_at).not.toBeNull();
    });

    it("records a download whose badge went away as cut, with the bytes handed over before", async () => {
      const { port } = new URL(h.url);
      const before = (await fetches()).length;
      await new Promise<void>((resolve) => {
        const socket = net.connect(Number(port), "127.0.0.1", () => {
          const request = `GET /api/badge/ota/download?v=2.0.0 HTTP/1.0\r\nAuthorization: Bearer ${h.devices.r1.token}\r\n\r\n`;
          socket.write(request, () => {
            socket.resetAndDestroy();
            resolve();
          });
        });
      });
      await expect.poll(async () => (await fetches())[before]?.outcome, { timeout: 5000 }).toBe("cut");
      const cut = (await fetches())[before]!;
      expect(cut.bytes_sent).toBeLessThan(image.length);
      expect(cut.ended_at).not.toBeNull();
    });
  });

  describe("what may be downloaded", () => {
    it.each([
      ["../../etc/passwd", "../../etc/passwd"],
      ["its percent-encoded form", "..%2F..%2Fetc%2Fpasswd"],
      ["its double-encoded form", "%252e%252e%252fetc%252fpasswd"],
      ["an encoded dot-dot", "%2e%2e%2f%2e%2e%2fetc%2fpasswd"],
      ["a path after a real version", "2.0.0%2F..%2F..%2Fmanifest.json"],
      ["the stored image's file name", "2.0.0.bin"],
      ["the manifest", "manifest.json"],
      ["an unknown version", "9.9.9"],
    ])("v=%s is 404 release_unknown and serves no file", async (_name, v) => {
      const answer = await h.badge("GET", `/api/badge/ota/download?v=${v}`, h.devices.r1.token);
      expect(answer.status).toBe(404);
      expect(answer.get("X")).toMatch(/^release_unknown /);
      expect(answer.text).not.toMatch(/root:|"releases"/);
    });

    it.each([
      ["no v", ""],
      ["an empty v", "?v="],
      ["v twice", "?v=2.0.0&v=2.0.0"],
    ])("%s is 400", async (_name, query) => {
      const answer = await h.badge("GET", `/api/badge/ota/download${query}`, h.devices.r1.token);
      expect(answer.status).toBe(400);
      expect(answer.get("X")).toMatch(/^malformed_request /);
    });

    it("a canary release is fetchable by its canary only", async () => {
      await h.publish("2.1.0", { canary: h.devices.r1b.id });
      const other = await h.badge("GET", "/api/badge/ota/download?v=2.1.0", h.devices.r2.token);
      expect(other.status).toBe(403);
      expect(other.get("X")).toMatch(/^not_offered /);
      const canary = await http10("/api/badge/ota/download?v=2.1.0", h.devices.r1b.token);
      expect(canary.statusLine).toMatch(/ 200 /);
      expect((await h.check(h.devices.r2.token, lines("v=1", "sv=2.0.0", "bat=4"))).get("N")).toBe("2.0.0");
      expect((await h.check(h.devices.r1b.token, lines("v=1", "sv=2.0.0", "bat=4"))).get("U")).toBe("2.1.0");
    });

    it("an older release is not fetchable once a newer one is the badge's target", async () => {
      const answer = await h.badge("GET", "/api/badge/ota/download?v=2.0.0", h.devices.r1b.token);
      expect(answer.status).toBe(403);
    });

    it("a missing token or an API key gets 401", async () => {
      const missing = await h.badge("GET", "/api/badge/ota/download?v=2.0.0", null);
      expect(missing.status).toBe(401);
      const apiKey = await h.badge("GET", "/api/badge/ota/download?v=2.0.0", h.keys.write);
      expect(apiKey.status).toBe(401);
    });
  });

  describe("a damaged image", () => {
    it("is never served: 500 server_error with no byte of it, and served again once repaired", async () => {
      const built = await h.publish("2.2.0", { canary: h.devices.r2.id });
      const entry = findRelease(await h.releases.read(), "2.2.0")!;
      const damaged = Buffer.from(built);
      damaged[damaged.length - 100]! ^= 0xff;
      const store = async (bytes: Buffer) => {
        if (kind === "database") {
          await h.server.store.db.updateTable("release_images").set({ body: bytes }).where("file", "=", entry.file).execute();
          return;
        }
        const file = path.join(h.dataDir, RELEASES_DIRS[0], "images", entry.file);
        fs.chmodSync(file, 0o644);
        fs.writeFileSync(file, bytes);
      };
      await store(damaged);
      const refused = await http10("/api/badge/ota/download?v=2.2.0", h.devices.r2.token);
      expect(refused.statusLine).toMatch(/ 500 /);
      expect(refused.body.toString("latin1")).toMatch(/^V1\n(.*\n)*X server_error /);
      expect(refused.body.length).toBeLessThan(200);
      await store(Buffer.from(built));
      const served = await http10("/api/badge/ota/download?v=2.2.0", h.devices.r2.token);
      expect(served.statusLine).toMatch(/ 200 /);
      expect(Buffer.compare(served.body, Buffer.from(built))).toBe(0);
    });
  });

  describe("the release image in memory", () => {
    it("is read once for concurrent first downloads: every one gets the same copy", async () => {
      const releases = openReleaseStores(h.server.store.db, h.dataDir, kind)[0];
      const entry = findRelease(await releases.read(), "2.0.0")!;
      const copies = await Promise.all(Array.from({ length: 50 }, () => releases.imageBytes(entry)));
      expect(new Set(copies).size).toBe(1);
      expect(Buffer.compare(copies[0]!, Buffer.from(image))).toBe(0);
    });
  });
});
