// Ranges on GET /api/badge/ota/download (issue 23, RFC 9110 14): a badge whose download was cut
// resumes with `Range: bytes=<checkpoint>-` and `If-Range: "<md5>"`. Fetched over HTTP/1.0 on a
// raw socket as the badge fetches; a third-party client's resume (curl -C -) must give the exact
// image; the cap of downloads in flight answers 503 with Retry-After.
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DownloadLimitsError, downloadLimitsFromEnv, RECHECK_SPREAD } from "../../server/services/load-shaping.ts";
import { lines, startBadgeHarness, type BadgeHarness } from "./badge-harness.ts";
import { http10 as rawHttp10, type RawResponse } from "./http10.ts";

const IMAGE_BYTES = 300_000;
const PATH = "/api/badge/ota/download?v=2.0.0";

let h: BadgeHarness;
let image: Buffer;
let etag: string;
beforeAll(async () => {
  h = await startBadgeHarness();
  image = Buffer.from(await h.publish("2.0.0", { size: IMAGE_BYTES }));
  etag = `"${createHash("md5").update(image).digest("hex")}"`;
});
afterAll(() => h.close());

const get = (headers: string[] = [], urlPath = PATH) => rawHttp10(h.url, urlPath, h.devices.r1.token, headers);

/** The answer is a 200 with the whole image. */
function expectWhole(response: RawResponse): void {
  expect(response.status).toBe(200);
  expect(response.headers.has("content-range")).toBe(false);
  expect(response.headers.get("content-length")).toBe(String(image.length));
  expect(Buffer.compare(response.body, image)).toBe(0);
}

/** The answer is a 206 with exactly bytes first..last of the image. */
function expectPart(response: RawResponse, first: number, last: number): void {
  expect(response.status).toBe(206);
  expect(response.headers.get("content-range")).toBe(`bytes ${first}-${last}/${image.length}`);
  expect(response.headers.get("content-length")).toBe(String(last - first + 1));
  expect(Buffer.compare(response.body, image.subarray(first, last + 1))).toBe(0);
}

function expectUnsatisfiable(response: RawResponse): void {
  expect(response.status).toBe(416);
  expect(response.headers.get("content-range")).toBe(`bytes */${image.length}`);
  expect(response.body.toString("latin1")).toMatch(/^V1\n(.*\n)*X range_unsatisfiable /);
}

describe("a single range", () => {
  it("bytes=N- is a 206 with the rest of the image, Accept-Ranges and the image's MD5 as strong ETag", async () => {
    const response = await get(["Range: bytes=65536-", `If-Range: ${etag}`]);
    expectPart(response, 65536, image.length - 1);
    expect(response.statusLine).toMatch(/^HTTP\/1\.[01] 206 Partial Content$/);
    expect(response.headers.get("accept-ranges")).toBe("bytes");
    expect(response.headers.get("etag")).toBe(etag);
    expect(response.headers.has("transfer-encoding")).toBe(false);
  });

  it.each([
    ["the first byte", "bytes=0-0", 0, 0],
    ["a closed range", "bytes=100-199", 100, 199],
    ["a last byte past the end, clipped", `bytes=1000-${IMAGE_BYTES * 10}`, 1000, IMAGE_BYTES - 1],
    ["a suffix", "bytes=-500", IMAGE_BYTES - 500, IMAGE_BYTES - 1],
    ["a suffix longer than the image", `bytes=-${IMAGE_BYTES * 2}`, 0, IMAGE_BYTES - 1],
    ["the unit in capitals", "BYTES=7-9", 7, 9],
  ] as const)("%s is a 206 with exactly those bytes", async (_name, range, first, last) => {
    expectPart(await get([`Range: ${range}`]), first, last);
  });

  it("a 200 carries Accept-Ranges and the ETag too", async () => {
    const response = await get();
    expectWhole(response);
    expect(response.headers.get("accept-ranges")).toBe("bytes");
    expect(response.headers.get("etag")).toBe(etag);
  });

  it("the fetch audit records the bytes a fetch served", async () => {
    const before = await h.count("ota_fetches");
    await get(["Range: bytes=250000-"]);
    await expect.poll(async () => (await fetchesFrom(before))[0]?.outcome, { timeout: 5000 }).toBe("completed");
    expect((await fetchesFrom(before))[0]).toMatchObject({ first_byte: 250000, last_byte: IMAGE_BYTES - 1, bytes_sent: IMAGE_BYTES - 250000, size: IMAGE_BYTES });
    await get();
    await expect.poll(async () => (await fetchesFrom(before))[1]?.outcome, { timeout: 5000 }).toBe("completed");
    expect((await fetchesFrom(before))[1]).toMatchObject({ first_byte: 0, last_byte: IMAGE_BYTES - 1, bytes_sent: IMAGE_BYTES });
  });
});

const fetchesFrom = async (index: number) =>
  (await h.server.store.db.selectFrom("ota_fetches").selectAll().orderBy("started_at").orderBy("id").execute()).slice(index);

describe("the bad-input list of issue 23 gets the answer RFC 9110 gives it", () => {
  const thousandRanges = `bytes=${Array.from({ length: 1000 }, (_, i) => `${i}-${i}`).join(",")}`;
  it.each([
    ["garbage, ignored", "bytes=abc"],
    ["last before first (invalid, ignored)", "bytes=5-2"],
    ["1,000 ranges (several ranges get the whole image)", thousandRanges],
    ["two ranges", "bytes=0-99,200-299"],
    ["another unit", "items=0-5"],
    ["an empty range", "bytes="],
    ["a negative first byte", "bytes=-5-10"],
  ])("%s: 200 with the whole image", async (_name, range) => {
    expectWhole(await get([`Range: ${range}`]));
  });

  it.each([
    ["a range past the end", `bytes=${IMAGE_BYTES + 10}-`],
    ["a range starting at the end", `bytes=${IMAGE_BYTES}-${IMAGE_BYTES + 5}`],
    ["a suffix of length 0", "bytes=-0"],
    ["a first byte of 30 digits", `bytes=${"9".repeat(30)}-`],
  ])("%s: 416 with Content-Range bytes */size and no image byte", async (_name, range) => {
    const response = await get([`Range: ${range}`]);
    expectUnsatisfiable(response);
    expect(response.body.length).toBeLessThan(200);
  });

  it.each([
    ["a date", "If-Range: Wed, 21 Oct 2015 07:28:00 GMT"],
    ["garbage", "If-Range: <<<>>>"],
    ["another image's MD5", `If-Range: "${"0".repeat(32)}"`],
    ["the ETag unquoted", (tag: string) => `If-Range: ${tag.slice(1, -1)}`],
    ["the ETag as a weak tag (If-Range compares strongly)", (tag: string) => `If-Range: W/${tag}`],
  ])("If-Range with %s: 200 with the whole image", async (_name, ifRange) => {
    expectWhole(await get(["Range: bytes=1000-", typeof ifRange === "string" ? ifRange : ifRange(etag)]));
  });

  it("If-Range with the image's ETag and a range past the end: 416", async () => {
    expectUnsatisfiable(await get([`Range: bytes=${IMAGE_BYTES}-`, `If-Range: ${etag}`]));
  });

  it("If-Range without Range: 200 with the whole image", async () => {
    expectWhole(await get([`If-Range: ${etag}`]));
  });

  it("a v= of a version this badge is not offered, with a valid range: refused, no image byte", async () => {
    const unknown = await get(["Range: bytes=0-99"], "/api/badge/ota/download?v=9.9.9");
    expect(unknown.status).toBe(404);
    expect(unknown.body.toString("latin1")).toMatch(/^V1\n(.*\n)*X release_unknown /);
    expect(unknown.headers.has("content-range")).toBe(false);
  });
});

describe("ranges fuzzed from outside (fast-check, over HTTP/1.0)", () => {
  it("for random valid ranges the body is exactly that slice of the image", async () => {
    const validRange = fc
      .tuple(fc.nat({ max: IMAGE_BYTES - 1 }), fc.nat({ max: IMAGE_BYTES - 1 }), fc.boolean())
      .map(([a, b, open]) => ({ first: Math.min(a, b), last: open ? IMAGE_BYTES - 1 : Math.max(a, b), open }));
    await fc.assert(
      fc.asyncProperty(validRange, async ({ first, last, open }) => {
        expectPart(await get([`Range: bytes=${first}-${open ? "" : last}`, `If-Range: ${etag}`]), first, last);
      }),
      { seed: 20261126, numRuns: 120 },
    );
  });

  it("random Range and If-Range values never get a 5xx, and the body is the image's exact bytes or none of them", async () => {
    const headerValue = fc.oneof(
      fc.string({ unit: fc.constantFrom(..."bytes=-,0123456789 \tBYTES;\"W/x"), maxLength: 40 }),
      fc.string({ maxLength: 30 }).map((s) => s.replace(/[\r\n]/g, "")),
      fc.tuple(fc.integer({ min: -10, max: IMAGE_BYTES + 10 }), fc.integer({ min: -10, max: IMAGE_BYTES + 10 })).map(([a, b]) => `bytes=${a}-${b}`),
      fc.constant(etag),
    );
    await fc.assert(
      fc.asyncProperty(fc.option(headerValue, { nil: undefined }), fc.option(headerValue, { nil: undefined }), async (range, ifRange) => {
        const response = await get([...(range === undefined ? [] : [`Range: ${range}`]), ...(ifRange === undefined ? [] : [`If-Range: ${ifRange}`])]);
        expect([200, 206, 416]).toContain(response.status);
        if (response.status === 200) expectWhole(response);
        if (response.status === 416) expectUnsatisfiable(response);
        if (response.status === 206) {
          const [, first, last] = /^bytes (\d+)-(\d+)\/\d+$/.exec(response.headers.get("content-range")!)!.map(Number);
          expectPart(response, first!, last!);
        }
      }),
      { seed: 20261127, numRuns: 200 },
    );
  });
});

describe("a third-party client's resume", () => {
  it("curl -C - continues a file cut at 90 % and ends with the exact image", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "badgebench-curl-"));
    const file = path.join(dir, "image.bin");
    fs.writeFileSync(file, image.subarray(0, Math.floor(IMAGE_BYTES * 0.9)));
    const before = await h.count("ota_fetches");
    await promisify(execFile)("curl", ["--silent", "--show-error", "--fail", "-C", "-", "-o", file, "-H", `Authorization: Bearer ${h.devices.r1.token}`, `${h.url}${PATH}`]);
    expect(Buffer.compare(fs.readFileSync(file), image)).toBe(0);
    await expect.poll(async () => (await fetchesFrom(before))[0]?.outcome, { timeout: 5000 }).toBe("completed");
    expect((await fetchesFrom(before))[0]).toMatchObject({ first_byte: Math.floor(IMAGE_BYTES * 0.9), bytes_sent: IMAGE_BYTES - Math.floor(IMAGE_BYTES * 0.9) });
    fs.rmSync(dir, { recursive: true });
  });
});

describe("the recheck interval S, spread per badge", () => {
  it("is within [S, S x (1 + RECHECK_SPREAD)) and the same on every answer to one badge", async () => {
    const status = lines("v=1", "sv=2.0.0", "bat=4.1");
    const answers = await Promise.all([h.check(h.devices.r1.token, status), h.check(h.devices.r1.token, status), h.check(h.devices.r2.token, status)]);
    const [first, again, other] = answers.map((answer) => Number(answer.get("S")));
    expect(first).toBe(again);
    for (const s of [first!, other!]) {
      expect(s).toBeGreaterThanOrEqual(6 * 3600);
      expect(s).toBeLessThan(6 * 3600 * (1 + RECHECK_SPREAD));
    }
  });
});

describe("the cap of downloads in flight", () => {
  // A download cannot be held in flight from a test on purpose: loopback's socket buffers take the
  // whole slot from a client that stopped reading. So a cap of 0 shows the answer over the cap,
  // and a cap of 1 that every download, finished or cut, gives its place back.
  let full: BadgeHarness;
  let one: BadgeHarness;
  beforeAll(async () => {
    [full, one] = await Promise.all([startBadgeHarness({ downloads: { maxConcurrent: 0, retryAfterS: 60 } }), startBadgeHarness({ downloads: { maxConcurrent: 1 } })]);
    await Promise.all([full.publish("2.0.0", { size: IMAGE_BYTES }), one.publish("2.0.0", { size: IMAGE_BYTES })]);
  });
  afterAll(() => Promise.all([full.close(), one.close()]));

  it("over the cap a download gets 503, Retry-After spread per badge, the same in S, and nothing is recorded", async () => {
    const answers = await Promise.all([full.devices.r1, full.devices.r1, full.devices.r2].map((device) => rawHttp10(full.url, PATH, device.token, ["Range: bytes=1000-"])));
    const retryAfters = answers.map((answer) => Number(answer.headers.get("retry-after")));
    for (const [i, answer] of answers.entries()) {
      expect(answer.status).toBe(503);
      expect(retryAfters[i]).toBeGreaterThanOrEqual(60);
      expect(retryAfters[i]).toBeLessThan(60 * (1 + RECHECK_SPREAD));
      expect(answer.body.toString("latin1")).toMatch(new RegExp(`^V1\nS ${retryAfters[i]}\nX busy `));
    }
    expect(retryAfters[0]).toBe(retryAfters[1]);
    expect(await full.count("ota_fetches")).toBe(0);
  });

  it("a finished or cut download gives its place back", async () => {
    const { port } = new URL(one.url);
    await new Promise<void>((resolve) => {
      const socket = net.connect(Number(port), "127.0.0.1", () => {
        socket.write(`GET ${PATH} HTTP/1.0\r\nAuthorization: Bearer ${one.devices.r1.token}\r\n\r\n`, () => {
          socket.resetAndDestroy();
          resolve();
        });
      });
    });
    await expect.poll(async () => (await one.server.store.db.selectFrom("ota_fetches").select("outcome").execute())[0]?.outcome, { timeout: 5000 }).toBe("cut");
    // The place is given back once the server saw the connection close, which may come after
    // the client read the last byte: each download waits for the one before.
    for (let i = 0; i < 3; i++) {
      await expect.poll(async () => (await rawHttp10(one.url, PATH, one.devices.r2.token)).status, { timeout: 5000 }).toBe(200);
    }
  });
});

describe("$BADGEBENCH_MAX_DOWNLOADS", () => {
  it("sets the cap; anything but a whole number of at least 1 is refused with a clear message", () => {
    expect(downloadLimitsFromEnv({ BADGEBENCH_MAX_DOWNLOADS: "250" })).toEqual({ maxConcurrent: 250 });
    expect(downloadLimitsFromEnv({})).toEqual({});
    for (const text of ["0", "-3", "1.5", "many"]) {
      expect(() => downloadLimitsFromEnv({ BADGEBENCH_MAX_DOWNLOADS: text })).toThrow(new DownloadLimitsError(`BADGEBENCH_MAX_DOWNLOADS must be a whole number of at least 1, got '${text}'`));
    }
  });
});
