// The fault proxy's man in the middle (`mitm` faults, issue 24) between the badge client and the
// REAL server: it answers the check from the server's own answer with the lines it chooses, and
// with `atByte` it tampers with the image and hands out the tampered image's MD5, so the MD5
// check passes and only a signature can tell. A badge without a mitm fault sees the server's answer.
import { createHash, generateKeyPairSync } from "node:crypto";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { BadgeClient, type Offer } from "../../badge-sim/network/badge-client.ts";
import { startFaultProxy, type FaultProxy } from "../../badge-sim/network/fault-proxy/proxy.ts";
import type { Fault } from "../../badge-sim/network/fault-proxy/faults.ts";
import { rawPublicKey, verifyImage } from "../../firmware/index.ts";
import { startBadgeHarness, type BadgeHarness } from "../server/badge-harness.ts";

const STATUS = { version: "1.9.0", display: null, volts: 4.1, charging: true };
let h: BadgeHarness;
let image: Uint8Array;
const { privateKey, publicKey } = generateKeyPairSync("ed25519");
const proxies: FaultProxy[] = [];

beforeAll(async () => {
  h = await startBadgeHarness();
  image = await h.publish("2.0.0", { size: 128 * 1024, signingKey: privateKey, trustedKeys: [rawPublicKey(publicKey)] });
});
afterEach(async () => {
  await Promise.all(proxies.splice(0).map((p) => p.close()));
});
afterAll(() => h.close());

async function clientBehind(faults: Fault[]): Promise<{ client: BadgeClient; proxy: FaultProxy }> {
  const proxy = await startFaultProxy({ target: h.url, faults });
  proxies.push(proxy);
  return { client: new BadgeClient({ baseUrl: proxy.url }), proxy };
}

async function offerOf(client: BadgeClient): Promise<Offer> {
  const answer = await client.check(h.devices.r1.token, STATUS, undefined, true);
  if (answer.kind !== "offer") throw new Error(`expected an offer, got ${JSON.stringify(answer)}`);
  return answer.offer;
}

async function download(client: BadgeClient, path: string): Promise<Buffer> {
  const chunks: Uint8Array[] = [];
  const result = await client.download(h.devices.r1.token, path, { onBody: (chunk) => chunks.push(Buffer.from(chunk)) });
  expect(result).toMatchObject({ status: 200, ending: "complete" });
  return Buffer.concat(chunks);
}

const md5 = (bytes: Uint8Array) => createHash("md5").update(bytes).digest("hex");

describe("a mitm fault", () => {
  it("tampers with byte atByte of every download and puts the tampered image's MD5 in the offer; the signature stays the server's and fails", async () => {
    const { client, proxy } = await clientBehind([{ kind: "mitm", atByte: 100_000, xor: 0x20 }]);
    const offer = await offerOf(client);
    const served = await download(client, offer.path);
    expect(served.length).toBe(image.length);
    expect([...served].flatMap((byte, at) => (byte === image[at] ? [] : [[at, byte ^ image[at]!]]))).toEqual([[100_000, 0x20]]);
    expect(offer.md5).toBe(md5(served));
    expect(offer.md5).not.toBe(md5(image));
    expect(verifyImage(image, offer.signature!.signature, rawPublicKey(publicKey))).toBe(true);
    expect(verifyImage(served, offer.signature!.signature, rawPublicKey(publicKey))).toBe(false);
    expect(proxy.log.filter((event) => event.type === "fault").map((event) => event.type === "fault" && event.kind)).toEqual(["mitm", "corrupt"]);
  });

  it("replaces the lines it names (here G, with a value that is not base64), which the badge then reads as a broken offer", async () => {
    const { client } = await clientBehind([{ kind: "mitm", lines: { G: "1e0b53aa36bdb94d this-is-not-base64!" } }]);
    const answer = await client.check(h.devices.r1.token, STATUS, undefined, true);
    expect(answer).toMatchObject({ kind: "failed", message: "offer of 2.0.0 has no valid G (signature) line: not a 16-hex-digit key id and an 88-character base64 signature" });
    // the download itself is untouched
    expect(md5(await download(client, "/api/badge/ota/download?v=2.0.0"))).toBe(md5(image));
  });

  it("adds a line the answer did not have after P, and passes an answer that is not an offer through unchanged", async () => {
    const { client } = await clientBehind([{ kind: "mitm", lines: { G: "1e0b53aa36bdb94d this-is-not-base64!" } }]);
    // a badge that does not announce sig=ed25519 gets no G from the server: the man in the middle adds one
    const added = await client.check(h.devices.r1.token, STATUS);
    expect(added).toMatchObject({ kind: "failed", message: expect.stringMatching(/^offer of 2\.0\.0 has no valid G/) });
    const current = await client.check(h.devices.r1.token, { ...STATUS, version: "2.0.0" }, undefined, true);
    expect(current).toMatchObject({ kind: "current", latest: "2.0.0" });
  });

  it("is refused in a scenario file or an option when a line is not one letter, or its value not one line", async () => {
    await expect(startFaultProxy({ target: h.url, faults: [{ kind: "mitm", lines: { g: "x" } }] })).rejects.toThrow(/faults\[0\]\.lines\.g: Invalid key in record/);
    await expect(startFaultProxy({ target: h.url, faults: [{ kind: "mitm", lines: { G: "a\nb" } }] })).rejects.toThrow(/faults\[0\]\.lines\.G: expected one line/);
  });
});
