// Release signatures on the wire (firmware/signature.ts): the G line reads back what the server
// writes and nothing else (a fast-check fuzz of wrong lengths, non-base64 and non-canonical
// base64), a signature verifies over the whole image only, and an image's trusted keys are found
// as the badges find them.
import { generateKeyPairSync, sign } from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  buildAppImage,
  formatSignatureLine,
  keyIdOf,
  parseSignatureLine,
  rawPublicKey,
  SIGNATURE_BASE64_CHARS,
  SIGNATURE_LINE_PROBLEM,
  trustedKeysIn,
  verifyImage,
} from "../../firmware/index.ts";

const pair = () => {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  return { privateKey, raw: rawPublicKey(publicKey) };
};

describe("the G line", () => {
  it("reads back a key id and signature as the server writes them", () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 64, maxLength: 64 }), fc.uint8Array({ minLength: 8, maxLength: 8 }), (signature, id) => {
        const keyId = Buffer.from(id).toString("hex");
        expect(parseSignatureLine(formatSignatureLine(keyId, signature))).toEqual({ keyId, signature });
      }),
    );
  });

  it("refuses a signature of the wrong length, not base64, or base64 that is not canonical, with one message", () => {
    const good = formatSignatureLine("1e0b53aa36bdb94d", new Uint8Array(64).fill(7));
    const [id, base64] = good.split(" ") as [string, string];
    for (const bad of [
      `${id} ${base64.slice(0, -4)}==`, // 85 characters
      `${id} ${base64}A`,
      `${id} ${"!".repeat(86)}==`,
      `${id} ${base64.slice(0, 85)}B==`, // a last character with stray bits: decodes, but not canonical
      `${id.toUpperCase()} ${base64}`,
      `${id.slice(1)} ${base64}`,
      `${id}  ${base64}`,
      base64,
      "",
    ]) {
      expect(parseSignatureLine(bad), bad).toBe(SIGNATURE_LINE_PROBLEM);
    }
  });

  it("never reads a line of another shape (fuzz)", () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 120 }), (line) => {
        const parsed = parseSignatureLine(line);
        if (typeof parsed === "string") return;
        // whatever parses is exactly what the server would have written
        expect(formatSignatureLine(parsed.keyId, parsed.signature)).toBe(line);
      }),
      { numRuns: 2000 },
    );
    fc.assert(
      fc.property(fc.string({ minLength: SIGNATURE_BASE64_CHARS, maxLength: SIGNATURE_BASE64_CHARS, unit: fc.constantFrom(..."ABCab+/=0!-_ ") }), (base64) => {
        const parsed = parseSignatureLine(`1e0b53aa36bdb94d ${base64}`);
        if (typeof parsed !== "string") expect(Buffer.from(parsed.signature).toString("base64")).toBe(base64);
      }),
    );
  });
});

describe("a release signature", () => {
  it("verifies over the whole image with the signer's key only", () => {
    const signer = pair();
    const other = pair();
    const image = buildAppImage({ version: "1.5.0", size: 64 * 1024 });
    const signature = sign(null, image, signer.privateKey);
    expect(verifyImage(image, signature, signer.raw)).toBe(true);
    expect(verifyImage(image, signature, other.raw)).toBe(false);
    const tampered = image.slice();
    tampered[40_000]! ^= 1;
    expect(verifyImage(tampered, signature, signer.raw)).toBe(false);
    expect(verifyImage(image.subarray(0, image.length - 16), signature, signer.raw)).toBe(false);
  });

  it("names a key by the first 8 bytes of the SHA-256 of its raw public key", () => {
    expect(keyIdOf(new Uint8Array(32))).toBe("66687aadf862bd77"); // sha256 of 32 zero bytes
  });
});

describe("an image's trusted keys", () => {
  it("are the keys it was built with, at most two, and none for firmware before signed releases", () => {
    const [a, b] = [pair().raw, pair().raw];
    expect(trustedKeysIn(buildAppImage({ version: "1.5.0", trustedKeys: [a, b] }))).toEqual([a, b]);
    expect(trustedKeysIn(buildAppImage({ version: "1.5.0", trustedKeys: [b] }))).toEqual([b]);
    expect(trustedKeysIn(buildAppImage({ version: "1.5.0" }))).toEqual([]);
    expect(() => buildAppImage({ version: "1.5.0", trustedKeys: [a, b, a] })).toThrow(/at most 2 raw Ed25519 public keys/);
  });
});
