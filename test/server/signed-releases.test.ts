// Signed releases over HTTP (issue 24): a badge that sends `sig=ed25519` is offered a signed
// release with `G <key id> <signature>` after `P`, a signature of the whole image that Node's
// crypto verifies with the signer's public key; a badge without the line (all firmware before
// signed releases) gets the very answer it always got, and so does one naming another scheme.
import { createPublicKey, generateKeyPairSync } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { keyIdOf, md5Hex, parseSignatureLine, rawPublicKey, verifyImage } from "../../firmware/index.ts";
import { spreadRecheckS } from "../../server/services/load-shaping.ts";
import { lines, startBadgeHarness, type BadgeHarness } from "./badge-harness.ts";

let h: BadgeHarness;
const { privateKey, publicKey } = generateKeyPairSync("ed25519");
const raw = rawPublicKey(publicKey);
let image: Uint8Array;

beforeAll(async () => {
  h = await startBadgeHarness();
  image = await h.publish("1.4.0", { notes: ["Signed"], signingKey: privateKey, trustedKeys: [raw] });
});
afterAll(() => h.close());

// S is the hour spread per badge (services/load-shaping.ts), as to any badge
const OFFER_WITHOUT_SIGNATURE = () => ["V1", `S ${spreadRecheckS(3600, h.devices.r1.id)}`, "U 1.4.0", "B 1.4.0", `Z ${image.length}`, `M ${md5Hex(image)}`, "P /api/badge/ota/download?v=1.4.0", "L Signed", ".", ""];

describe("a signed release", () => {
  it("is offered with its G line to a badge that announces sig=ed25519, the signature verifying over the image served", async () => {
    const answer = await h.check(h.devices.r1.token, lines("v=1", "sv=1.3.2", "bat=3.97", "sig=ed25519"));
    expect(answer.status).toBe(200);
    const expected = OFFER_WITHOUT_SIGNATURE();
    expect(answer.text.split("\n").filter((line) => !line.startsWith("G "))).toEqual(expected);
    // G comes right after P
    expect(answer.lines?.map((line) => line.letter)).toEqual(["S", "U", "B", "Z", "M", "P", "G", "L"]);
    const signature = parseSignatureLine(answer.get("G")!);
    if (typeof signature === "string") throw new Error(signature);
    expect(signature.keyId).toBe(keyIdOf(raw));
    const download = await fetch(`${h.server.url}/api/badge/ota/download?v=1.4.0`, { headers: { authorization: `Bearer ${h.devices.r1.token}` } });
    const served = new Uint8Array(await download.arrayBuffer());
    expect(served).toEqual(image);
    expect(verifyImage(served, signature.signature, raw)).toBe(true);
    expect(verifyImage(served, signature.signature, rawPublicKey(createPublicKey(generateKeyPairSync("ed25519").privateKey)))).toBe(false);
  });

  it.each([
    ["no sig line (firmware before signed releases)", lines("v=1", "sv=1.3.2", "bat=3.97")],
    ["a scheme this server does not sign with", lines("v=1", "sv=1.3.2", "bat=3.97", "sig=rsa-pss")],
    ["an empty sig", lines("v=1", "sv=1.3.2", "bat=3.97", "sig=")],
  ])("is offered exactly as before to a badge with %s", async (_name, body) => {
    const answer = await h.check(h.devices.r1.token, body);
    expect(answer.status).toBe(200);
    expect(answer.text).toBe(OFFER_WITHOUT_SIGNATURE().join("\n"));
  });

  it("refuses sig given twice as any repeated key is refused", async () => {
    const answer = await h.check(h.devices.r1.token, lines("v=1", "sv=1.3.2", "bat=3.97", "sig=ed25519", "sig=ed25519"));
    expect(answer.status).toBe(400);
    expect(answer.get("X")).toBe("malformed_request line 5: key 'sig' is given twice");
  });
});

describe("an unsigned release", () => {
  it("is offered without a G line even to a badge that verifies (which then refuses it itself)", async () => {
    await h.publish("1.5.0", { notes: ["Unsigned"] });
    const answer = await h.check(h.devices.r2.token, lines("v=1", "sv=1.4.0", "bat=3.97", "sig=ed25519"));
    expect(answer.get("U")).toBe("1.5.0");
    expect(answer.get("G")).toBeUndefined();
  });
});
