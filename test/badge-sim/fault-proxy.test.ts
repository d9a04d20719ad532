// The fault proxy between a badge and the REAL server: downloads go through it the way the
// badge sends them (HTTP/1.0 on a raw socket), so what the test sees is what a badge would see.
import { createHash } from "node:crypto";
import http from "node:http";
import net from "node:net";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { Fault } from "../../badge-sim/network/fault-proxy/faults.ts";
import { startFaultProxy, type FaultProxy, type FaultProxyOptions } from "../../badge-sim/network/fault-proxy/proxy.ts";
import type { ProxyEvent } from "../../badge-sim/network/fault-proxy/proxy-log.ts";
import { parseResponse } from "../../firmware/index.ts";
import { lines, startBadgeHarness, type BadgeHarness } from "../server/badge-harness.ts";

const IMAGE_BYTES = 256 * 1024;
const INJECTED_ANSWER = "V1\nS 300\nX server_error injected by the fault proxy\n.\n";

let h: BadgeHarness;
let image: Buffer;
let offer: { path: string; md5: string; size: number };
let token: string;
const proxies: FaultProxy[] = [];

beforeAll(async () => {
  h = await startBadgeHarness();
  image = Buffer.from(await h.publish("2.0.0", { size: IMAGE_BYTES }));
  token = h.devices.r1.token;
  const answer = await h.check(token, lines("v=1", "sv=1.9.0", "bat=4.1"));
  offer = { path: answer.get("P")!, md5: answer.get("M")!, size: Number(answer.get("Z")) };
});
afterEach(async () => {
  await Promise.all(proxies.splice(0).map((p) => p.close()));
});
afterAll(() => h.close());

async function proxy(faults: Fault[], options: Partial<FaultProxyOptions> = {}): Promise<FaultProxy> {
  const started = await startFaultProxy({ target: h.url, faults, ...options });
  proxies.push(started);
  return started;
}

interface RawDownload {
  statusLine: string;
  headers: Map<string, string>;
  body: Buffer;
  /** how it ended: the other side closed, or our own timeout gave up */
  ended: "closed" | "timeout";
  ms: number;
}

/** GET over HTTP/1.0 on a raw socket, as the badge does; reads until close or `timeoutMs` of silence. */
function http10(base: string, path: string, timeoutMs = 2000, extraHeaders = ""): Promise<RawDownload> {
  const { hostname, port } = new URL(base);
  const started = performance.now();
  return new Promise((resolve) => {
    const socket = net.connect(Number(port), hostname, () => {
      socket.write(`GET ${path} HTTP/1.0\r\nHost: badge\r\nAuthorization: Bearer ${token}\r\n${extraHeaders}\r\n`);
    });
    const chunks: Buffer[] = [];
    let ended: RawDownload["ended"] = "closed";
    socket.setTimeout(timeoutMs, () => {
      ended = "timeout";
      socket.destroy();
    });
    socket.on("data", (chunk) => chunks.push(chunk));
    socket.on("error", () => {});
    socket.on("close", () => {
      const raw = Buffer.concat(chunks);
      const split = raw.indexOf("\r\n\r\n");
      const head = raw.subarray(0, split).toString("latin1").split("\r\n");
      const headers = new Map(
        head.slice(1).map((line) => [line.slice(0, line.indexOf(":")).toLowerCase(), line.slice(line.indexOf(":") + 1).trim()] as [string, string]),
      );
      resolve({ statusLine: head[0]!, headers, body: raw.subarray(split + 4), ended, ms: performance.now() - started });
    });
  });
}

/** Requests on one kept-alive HTTP/1.1 connection (an agent with a single socket). */
function keptAlive(base: string) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const send = (method: "GET" | "POST", path: string, body?: string) =>
    new Promise<{ status: number; body: Buffer }>((resolve, reject) => {
      const request = http.request(`${base}${path}`, { method, agent, headers: { authorization: `Bearer ${token}` } }, (response) => {
        const chunks: Buffer[] = [];
        response.on("data", (chunk: Buffer) => chunks.push(chunk));
        response.on("end", () => resolve({ status: response.statusCode!, body: Buffer.concat(chunks) }));
        response.on("error", reject);
      });
      request.on("error", reject);
      request.end(body);
    });
  return { send, close: () => agent.destroy() };
}

/** Reads Content-Length-framed responses off one socket until `count` have arrived. */
function pipelined(base: string, requests: string[], count: number): Promise<Array<{ status: number; body: Buffer }>> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), hostname, () => socket.write(requests.join("")));
    let raw = Buffer.alloc(0);
    const responses: Array<{ status: number; body: Buffer }> = [];
    socket.on("error", reject);
    socket.on("data", (chunk: Buffer) => {
      raw = Buffer.concat([raw, chunk]);
      for (let end = raw.indexOf("\r\n\r\n"); end !== -1; end = raw.indexOf("\r\n\r\n")) {
        const head = raw.subarray(0, end).toString("latin1");
        const length = Number(/content-length: *([0-9]+)/i.exec(head)![1]);
        if (raw.length < end + 4 + length) break;
        responses.push({ status: Number(head.split(" ")[1]), body: raw.subarray(end + 4, end + 4 + length) });
        raw = raw.subarray(end + 4 + length);
      }
      if (responses.length === count) {
        socket.destroy();
        resolve(responses);
      }
    });
  });
}

const md5 = (bytes: Uint8Array) => createHash("md5").update(bytes).digest("hex");
const fetches = () => h.server.store.db.selectFrom("ota_fetches").selectAll().orderBy("started_at").orderBy("id").execute();
const faultEvents = (p: FaultProxy) => p.log.filter((e): e is Extract<ProxyEvent, { type: "fault" }> => e.type === "fault");
const closeEvents = (p: FaultProxy) => p.log.filter((e): e is Extract<ProxyEvent, { type: "close" }> => e.type === "close");

function differingOffsets(a: Buffer, b: Buffer): number[] {
  const offsets: number[] = [];
  for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) offsets.push(i);
  return offsets;
}

describe("without faults", () => {
  it("passes the HTTP/1.0 download through byte for byte, framing included", async () => {
    const p = await proxy([]);
    const direct = await http10(h.url, offer.path);
    const proxied = await http10(p.url, offer.path);
    expect(proxied.ended).toBe("closed");
    expect(proxied.statusLine).toBe(direct.statusLine);
    expect(proxied.headers.get("content-length")).toBe(String(IMAGE_BYTES));
    expect(proxied.headers.has("transfer-encoding")).toBe(false);
    expect(Buffer.compare(proxied.body, image)).toBe(0);
    expect(md5(proxied.body)).toBe(offer.md5);
    expect(p.log.map((e) => e.type)).toEqual(["request", "response", "body", "close"]);
    expect(p.log).toMatchObject([
      { type: "request", method: "GET", path: offer.path, version: "1.0", faults: [] },
      { type: "response", status: 200, contentLength: IMAGE_BYTES, from: "server" },
      { type: "body", bytes: IMAGE_BYTES, complete: true },
      { type: "close", by: "server" },
    ]);
  });
});

describe("drop", () => {
  it("closes the connection after exactly N body bytes, and the log says who closed it", async () => {
    const p = await proxy([{ kind: "drop", atByte: 100_000 }]);
    const before = (await fetches()).length;
    const download = await http10(p.url, offer.path);
    expect(download.ended).toBe("closed");
    expect(download.statusLine).toMatch(/ 200 /);
    expect(download.body.length).toBe(100_000);
    expect(Buffer.compare(download.body, image.subarray(0, 100_000))).toBe(0);
    expect(faultEvents(p)).toMatchObject([{ kind: "drop", atByte: 100_000, action: "dropped" }]);
    expect(p.log.filter((e) => e.type === "body")).toMatchObject([{ bytes: 100_000, complete: false }]);
    expect(closeEvents(p)).toMatchObject([{ by: "proxy" }]);
    // The server records bytes handed to its kernel: on loopback the socket buffers take all of
    // a 256 KiB image before the proxy cuts, so its outcome is usually "completed", not "cut".
    // Only what holds either way is asserted: the fetch ends, with at least what the badge got.
    await expect.poll(async () => (await fetches())[before]?.outcome, { timeout: 3000 }).not.toBe("sending");
    expect((await fetches())[before]!.bytes_sent).toBeGreaterThanOrEqual(100_000);
  });

  it("at byte 0 forwards the head and no body", async () => {
    const p = await proxy([{ kind: "drop", atByte: 0 }]);
    const download = await http10(p.url, offer.path);
    expect(download.statusLine).toMatch(/ 200 /);
    expect(download.headers.get("content-length")).toBe(String(IMAGE_BYTES));
    expect(download.body.length).toBe(0);
  });
});

describe("faults counted in the image's bytes (of: image)", () => {
  const resumeAt = 65_536;
  const resumed = (p: FaultProxy) => http10(p.url, offer.path, 2000, `Range: bytes=${resumeAt}-\r\n`);

  it("drops a resumed download at that byte of the image, where a body-counted drop lands later", async () => {
    const byImage = await resumed(await proxy([{ kind: "drop", atByte: 150_000, of: "image" }]));
    expect(byImage.statusLine).toMatch(/ 206 /);
    expect(byImage.headers.get("content-range")).toBe(`bytes ${resumeAt}-${IMAGE_BYTES - 1}/${IMAGE_BYTES}`);
    expect(Buffer.compare(byImage.body, image.subarray(resumeAt, 150_000))).toBe(0);
    const byBody = await resumed(await proxy([{ kind: "drop", atByte: 150_000 }]));
    expect(Buffer.compare(byBody.body, image.subarray(resumeAt, resumeAt + 150_000))).toBe(0);
  });

  it("passes over a fault at a byte before the body starts, saying so, and counts a whole image from 0", async () => {
    const p = await proxy([{ kind: "corrupt", atByte: 10, of: "image" }]);
    const download = await resumed(p);
    expect(Buffer.compare(download.body, image.subarray(resumeAt))).toBe(0);
    expect(faultEvents(p)).toMatchObject([{ kind: "corrupt", atByte: 10, action: "not reached", detail: `the body starts at image byte ${resumeAt}` }]);
    const whole = await http10((await proxy([{ kind: "corrupt", atByte: 10, of: "image" }])).url, offer.path);
    expect(differingOffsets(whole.body, image)).toEqual([10]);
  });
});

describe("corrupt", () => {
  it("flips one byte at offset N: same length, one differing byte, MD5 no longer the M line", async () => {
    const p = await proxy([{ kind: "corrupt", atByte: 12_345 }]);
    const download = await http10(p.url, offer.path);
    expect(download.body.length).toBe(IMAGE_BYTES);
    expect(download.headers.get("content-length")).toBe(String(IMAGE_BYTES));
    expect(differingOffsets(download.body, image)).toEqual([12_345]);
    expect(download.body[12_345]).toBe(image[12_345]! ^ 0x01);
    expect(md5(download.body)).not.toBe(offer.md5);
    expect(faultEvents(p)).toMatchObject([{ kind: "corrupt", atByte: 12_345, action: "corrupted" }]);
  });

  it("uses the given xor mask, and says when the body ends before the offset", async () => {
    const p = await proxy([
      { kind: "corrupt", atByte: 0, xor: 0xff },
      { kind: "corrupt", atByte: IMAGE_BYTES },
    ]);
    const download = await http10(p.url, offer.path);
    expect(differingOffsets(download.body, image)).toEqual([0]);
    expect(download.body[0]).toBe(image[0]! ^ 0xff);
    expect(faultEvents(p).map((e) => [e.atByte, e.action])).toEqual([
      [0, "corrupted"],
      [IMAGE_BYTES, "not reached"],
    ]);
  });
});

describe("stall", () => {
  it("holds the connection after N bytes until the client's own timeout gives up", async () => {
    const p = await proxy([{ kind: "stall", atByte: 50_000 }]);
    const download = await http10(p.url, offer.path, 300);
    expect(download.ended).toBe("timeout");
    expect(download.body.length).toBe(50_000);
    expect(Buffer.compare(download.body, image.subarray(0, 50_000))).toBe(0);
    await expect.poll(() => closeEvents(p)).toMatchObject([{ by: "client" }]);
    expect(faultEvents(p)).toMatchObject([{ kind: "stall", atByte: 50_000, action: "stalled" }]);
  });

  it("with forMs resumes and delivers the whole image", async () => {
    const p = await proxy([{ kind: "stall", atByte: 1000, forMs: 150 }]);
    const download = await http10(p.url, offer.path);
    expect(download.ended).toBe("closed");
    expect(md5(download.body)).toBe(offer.md5);
    expect(download.ms).toBeGreaterThanOrEqual(140);
    expect(faultEvents(p).map((e) => e.action)).toEqual(["stalled", "resumed"]);
  });
});

describe("status", () => {
  it("answers 503 in the badge's text format without contacting the server", async () => {
    const p = await proxy([{ kind: "status", code: 503 }]);
    const before = await fetches();
    const download = await http10(p.url, offer.path);
    expect(download.statusLine).toBe("HTTP/1.1 503 Service Unavailable");
    expect(download.headers.get("content-length")).toBe(String(INJECTED_ANSWER.length));
    expect(download.body.toString()).toBe(INJECTED_ANSWER);
    const parsed = parseResponse(download.body.toString());
    expect(parsed.ok && parsed.lines.find((l) => l.letter === "X")?.value).toMatch(/^server_error /);
    expect(await fetches()).toEqual(before);
    expect(closeEvents(p)).toMatchObject([{ by: "proxy", bytesToServer: 0 }]);
  });

  it("needs no server at all, and answers a check through fetch as well", async () => {
    const unused = net.createServer();
    await new Promise<void>((resolve) => unused.listen(0, "127.0.0.1", resolve));
    const deadPort = (unused.address() as net.AddressInfo).port;
    await new Promise((resolve) => unused.close(resolve));
    const p = await proxy([{ kind: "status", code: 503, path: "/api/badge/ota/check" }], { target: `http://127.0.0.1:${deadPort}` });
    const response = await fetch(`${p.url}/api/badge/ota/check`, { method: "POST", headers: { authorization: `Bearer ${token}` }, body: "v=1\n" });
    expect(response.status).toBe(503);
    expect(await response.text()).toBe(INJECTED_ANSWER);
  });
});

describe("throttle", () => {
  it("forwards the body at the given rate: 256 KiB at 2 MiB/s takes at least ~100 ms", async () => {
    const p = await proxy([{ kind: "throttle", bytesPerSecond: 2 * 1024 * 1024 }]);
    const download = await http10(p.url, offer.path);
    expect(md5(download.body)).toBe(offer.md5);
    expect(download.ms).toBeGreaterThanOrEqual(100);
    expect(faultEvents(p)).toMatchObject([{ kind: "throttle", action: "throttled" }]);
  });
});

describe("which requests a fault applies to", () => {
  it("nth: 1 cuts the first download only; the retry succeeds", async () => {
    const p = await proxy([{ kind: "drop", atByte: 100_000, nth: 1 }]);
    const first = await http10(p.url, offer.path);
    const retry = await http10(p.url, offer.path);
    expect(first.body.length).toBe(100_000);
    expect(md5(retry.body)).toBe(offer.md5);
    expect(p.log.filter((e) => e.type === "request").map((e) => e.faults.length)).toEqual([1, 0]);
  });

  it("nth with times applies to that window of matching requests", async () => {
    const p = await proxy([{ kind: "corrupt", atByte: 7, nth: 2, times: 2 }]);
    const corrupted = [];
    for (let i = 0; i < 4; i++) corrupted.push(differingOffsets((await http10(p.url, offer.path)).body, image));
    expect(corrupted).toEqual([[], [7], [7], []]);
  });

  it("setFaults replaces the faults and restarts their counts", async () => {
    const p = await proxy([{ kind: "drop", atByte: 10, nth: 1 }]);
    expect((await http10(p.url, offer.path)).body.length).toBe(10);
    p.setFaults([{ kind: "drop", atByte: 20, nth: 1 }]);
    expect((await http10(p.url, offer.path)).body.length).toBe(20);
    expect((await http10(p.url, offer.path)).body.length).toBe(IMAGE_BYTES);
  });

  it("passes check and sync through untouched while a download fault is set, on one kept-alive connection", async () => {
    const p = await proxy([{ kind: "drop", atByte: 0 }, { kind: "status", code: 503 }]);
    const client = keptAlive(p.url);
    try {
      const body = lines("v=1", "sv=1.9.0", "bat=4.1");
      const direct = await h.check(token, body);
      const check = await client.send("POST", "/api/badge/ota/check", body);
      expect(check.status).toBe(200);
      expect(check.body.toString()).toBe(direct.text);
      const sync = await client.send("POST", "/api/badge/sync", lines("v=1", "sv=1.9.0", "bat=4.1", `tap=1|${h.cards[0]}|${Math.floor(Date.now() / 1000)}`));
      expect(sync.status).toBe(200);
      const answer = parseResponse(sync.body.toString());
      expect(answer.ok && answer.lines.map((l) => l.letter)).toEqual(["S", "T", "A"]);
    } finally {
      client.close();
    }
    expect(faultEvents(p)).toEqual([]);
    const requests = p.log.filter((e) => e.type === "request");
    expect(requests.map((e) => [e.path, e.version, e.faults])).toEqual([
      ["/api/badge/ota/check", "1.1", []],
      ["/api/badge/sync", "1.1", []],
    ]);
    expect(new Set(requests.map((e) => e.connection)).size).toBe(1);
  });

  it("finds the body of an HTTP/1.1 download after earlier answers on the same connection", async () => {
    const p = await proxy([{ kind: "corrupt", atByte: 12_345 }]);
    const client = keptAlive(p.url);
    try {
      for (let i = 0; i < 2; i++) expect((await client.send("POST", "/api/badge/ota/check", lines("v=1", "sv=1.9.0", "bat=4.1"))).status).toBe(200);
      const download = await client.send("GET", offer.path);
      expect(differingOffsets(download.body, image)).toEqual([12_345]);
      expect(download.body.length).toBe(IMAGE_BYTES);
    } finally {
      client.close();
    }
    expect(new Set(p.log.filter((e) => e.type === "request").map((e) => e.connection)).size).toBe(1);
  });

  it("keeps pipelined requests and their answers in order, a status answer last", async () => {
    const p = await proxy([{ kind: "corrupt", atByte: 3 }, { kind: "status", code: 502, path: "/api/badge/sync" }]);
    const body = lines("v=1", "sv=1.9.0", "bat=4.1");
    const post = (path: string) => `POST ${path} HTTP/1.1\r\nHost: badge\r\nAuthorization: Bearer ${token}\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
    const get = `GET ${offer.path} HTTP/1.1\r\nHost: badge\r\nAuthorization: Bearer ${token}\r\n\r\n`;
    const responses = await pipelined(p.url, [post("/api/badge/ota/check"), get, post("/api/badge/ota/check"), post("/api/badge/sync")], 4);
    expect(responses.map((r) => r.status)).toEqual([200, 200, 200, 502]);
    expect(responses[0]!.body.toString()).toMatch(/^V1\nS \d+\nU 2\.0\.0\n/);
    expect(differingOffsets(responses[1]!.body, image)).toEqual([3]);
    expect(responses[2]!.body.toString()).toBe(responses[0]!.body.toString());
    expect(responses[3]!.body.toString()).toBe(INJECTED_ANSWER);
  });

  it("counts offsets in the payload of a chunked body, not in its framing", async () => {
    const chunked = http.createServer((_req, res) => {
      res.setHeader("content-type", "text/plain");
      for (const part of ["hel", "lo", " world"]) res.write(part);
      res.end();
    });
    await new Promise<void>((resolve) => chunked.listen(0, "127.0.0.1", resolve));
    try {
      const { port } = chunked.address() as net.AddressInfo;
      const p = await proxy([{ kind: "corrupt", atByte: 4, path: "/text" }], { target: `http://127.0.0.1:${port}` });
      const response = await fetch(`${p.url}/text`);
      expect(response.headers.get("transfer-encoding")).toBe("chunked");
      expect(await response.text()).toBe("helln world");
      expect(p.log.filter((e) => e.type === "body")).toMatchObject([{ bytes: 11, complete: true }]);
    } finally {
      chunked.closeAllConnections();
      await new Promise((resolve) => chunked.close(resolve));
    }
  });

  it("pipes both directions as they are after 101 Switching Protocols", async () => {
    const echo = http.createServer();
    echo.on("upgrade", (_req, socket: net.Socket) => {
      socket.write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n");
      socket.pipe(socket);
    });
    await new Promise<void>((resolve) => echo.listen(0, "127.0.0.1", resolve));
    try {
      const { port } = echo.address() as net.AddressInfo;
      const p = await proxy([{ kind: "corrupt", atByte: 0, path: /./ }], { target: `http://127.0.0.1:${port}` });
      const socket = net.connect(p.port, "127.0.0.1");
      socket.write("GET /echo HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n");
      let received = "";
      socket.on("data", (chunk: Buffer) => {
        received += chunk.toString("latin1");
        if (received.endsWith("\r\n\r\n")) socket.write("HTTP/1.1 200 not a head\r\n\r\nping");
      });
      await expect.poll(() => received).toMatch(/ping$/);
      socket.destroy();
      expect(received).toBe("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\nHTTP/1.1 200 not a head\r\n\r\nping");
      expect(faultEvents(p)).toEqual([]);
    } finally {
      echo.closeAllConnections();
      await new Promise((resolve) => echo.close(resolve));
    }
  });

  it("a RegExp path is tested against path and query", async () => {
    const p = await proxy([{ kind: "drop", atByte: 5, path: /v=9\.9\.9/ }]);
    expect((await http10(p.url, offer.path)).body.length).toBe(IMAGE_BYTES);
    expect(p.log.filter((e) => e.type === "request").map((e) => e.faults)).toEqual([[]]);
  });
});

describe("closing", () => {
  it("close() destroys open connections", async () => {
    const p = await startFaultProxy({ target: h.url, faults: [{ kind: "stall", atByte: 10 }] });
    const pending = http10(p.url, offer.path, 5000);
    await expect.poll(() => faultEvents(p).length).toBe(1);
    await p.close();
    const download = await pending;
    expect(download.ended).toBe("closed");
    expect(download.body.length).toBe(10);
    expect(closeEvents(p)).toMatchObject([{ by: "proxy", reason: "the proxy was closed" }]);
  });
});

describe("validation", () => {
  it.each<[string, unknown, RegExp]>([
    ["a drop without atByte", { kind: "drop" }, /faults\[0\]\.atByte: .*expected number/],
    ["an unknown kind", { kind: "explode" }, /faults\[0\]\.kind: .*'drop' \| 'stall' \| 'corrupt' \| 'status' \| 'throttle'/],
    ["a negative offset", { kind: "stall", atByte: -1 }, /faults\[0\]\.atByte: .*>=0 \(got -1\)/],
    ["a fractional offset", { kind: "corrupt", atByte: 1.5 }, /faults\[0\]\.atByte: .*int/],
    ["an xor that changes nothing", { kind: "corrupt", atByte: 1, xor: 0 }, /faults\[0\]\.xor: .*\(got 0\)/],
    ["a misspelt field", { kind: "drop", atByte: 1, atbyte: 2 }, /faults\[0\]\.atbyte: unknown field/],
    ["a status that is no status", { kind: "status", code: 99 }, /faults\[0\]\.code: .*\(got 99\)/],
    ["a zero rate", { kind: "throttle", bytesPerSecond: 0 }, /faults\[0\]\.bytesPerSecond: .*\(got 0\)/],
    ["a relative path", { kind: "drop", atByte: 1, path: "api/badge" }, /faults\[0\]\.path: .*"\/"/],
    ["nth zero", { kind: "drop", atByte: 1, nth: 0 }, /faults\[0\]\.nth: /],
  ])("rejects %s, naming the field", async (_name, fault, message) => {
    await expect(startFaultProxy({ target: h.url, faults: [fault as Fault] })).rejects.toThrow(message);
  });

  it("rejects a target that is not an http origin", async () => {
    await expect(startFaultProxy({ target: "https://example.org", faults: [] })).rejects.toThrow(/^invalid fault proxy options: target: expected http:\/\/HOST:PORT/);
    await expect(startFaultProxy({ target: `${h.url}/api`, faults: [] })).rejects.toThrow(/target: /);
  });

  it("setFaults rejects a bad fault and keeps the old ones", async () => {
    const p = await proxy([{ kind: "drop", atByte: 10 }]);
    expect(() => p.setFaults([{ kind: "drop", atByte: 1 }, { kind: "stall", atByte: -5 } as Fault])).toThrow(/faults\[1\]\.atByte: .*\(got -5\)/);
    expect((await http10(p.url, offer.path)).body.length).toBe(10);
  });
});
