// Signed releases (issue 24): what an Ed25519 release signature looks like on the wire and in
// the manifest, how a key is named (its key id), and where a badge finds the public keys it
// trusts: in its own app image, as firmware compiles them in. Node's own crypto does the maths;
// the C badge does the same with libsodium (reference-badge/signature.c).
import { createHash, createPublicKey, verify, type KeyObject } from "node:crypto";

/** The request line (`sig=ed25519`) by which a badge announces that it verifies signatures. */
export const SIGNATURE_REQUEST_KEY = "sig";
export const SIGNATURE_SCHEME = "ed25519";
/** The check answer's line that carries the offer's signature: `G <key id> <signature>`. */
export const SIGNATURE_LETTER = "G";
/** A key id is the first 8 bytes of the SHA-256 of the raw 32-byte public key, in lowercase hex. */
export const KEY_ID_HEX = 16;
export const PUBLIC_KEY_BYTES = 32;
export const SIGNATURE_BYTES = 64;
/** 64 bytes in standard base64 with its padding: 86 characters and `==`. */
export const SIGNATURE_BASE64_CHARS = 88;
/** A badge holds at most this many public keys: the current one and the one a rotation moves to. */
export const MAX_TRUSTED_KEYS = 2;
/**
 * How a test image carries a trusted key: this marker, then the raw public key in 64 hex digits
 * (firmware would compile the keys in as a const array; the host badges read them from here).
 */
export const TRUSTED_KEY_MARKER = "BADGEBENCH:ED25519_KEY=";

// An Ed25519 SubjectPublicKeyInfo is this fixed DER prefix and then the 32 raw key bytes.
const SPKI_PREFIX = Buffer.from("302a300506032b6570032100", "hex");

export interface ReleaseSignature {
  keyId: string;
  signature: Uint8Array;
}

export function keyIdOf(rawPublicKey: Uint8Array): string {
  return createHash("sha256").update(rawPublicKey).digest("hex").slice(0, KEY_ID_HEX);
}

export function rawPublicKey(key: KeyObject): Uint8Array {
  return new Uint8Array(key.export({ format: "der", type: "spki" }).subarray(SPKI_PREFIX.length));
}

function publicKeyFromRaw(raw: Uint8Array): KeyObject {
  return createPublicKey({ key: Buffer.concat([SPKI_PREFIX, raw]), format: "der", type: "spki" });
}

/** The value of a `G` line. */
export const formatSignatureLine = (keyId: string, signature: Uint8Array) => `${keyId} ${Buffer.from(signature).toString("base64")}`;

const SIGNATURE_LINE = new RegExp(`^([0-9a-f]{${KEY_ID_HEX}}) ([A-Za-z0-9+/]{86}==)$`);

/** What is wrong with a `G` value that is not a key id and a signature: the C badge says the same. */
export const SIGNATURE_LINE_PROBLEM = `not a ${KEY_ID_HEX}-hex-digit key id and an ${SIGNATURE_BASE64_CHARS}-character base64 signature`;

/** Reads a `G` value; SIGNATURE_LINE_PROBLEM unless it is `<16 hex> <88 base64>`, the base64 canonical (as the server writes it). */
export function parseSignatureLine(value: string): ReleaseSignature | string {
  const match = SIGNATURE_LINE.exec(value);
  const signature = match && Buffer.from(match[2]!, "base64");
  // base64 with stray bits in its last character decodes too, but is not how the server writes it
  if (!match || signature!.length !== SIGNATURE_BYTES || signature!.toString("base64") !== match[2]) return SIGNATURE_LINE_PROBLEM;
  return { keyId: match[1]!, signature: new Uint8Array(signature!) };
}

/** Whether `signature` is the Ed25519 signature of the whole `image` by `rawKey`. */
export function verifyImage(image: Uint8Array, signature: Uint8Array, rawKey: Uint8Array): boolean {
  return verify(null, image, publicKeyFromRaw(rawKey), signature);
}

/** The public keys an image trusts (its TRUSTED_KEY_MARKER strings), at most MAX_TRUSTED_KEYS, in the order it holds them. */
export function trustedKeysIn(image: Uint8Array): Uint8Array[] {
  const bytes = Buffer.from(image.buffer, image.byteOffset, image.byteLength);
  const keys: Uint8Array[] = [];
  for (let at = bytes.indexOf(TRUSTED_KEY_MARKER); at !== -1 && keys.length < MAX_TRUSTED_KEYS; at = bytes.indexOf(TRUSTED_KEY_MARKER, at + 1)) {
    const hex = bytes.toString("latin1", at + TRUSTED_KEY_MARKER.length, at + TRUSTED_KEY_MARKER.length + PUBLIC_KEY_BYTES * 2);
    if (/^[0-9a-f]{64}$/.test(hex)) keys.push(new Uint8Array(Buffer.from(hex, "hex")));
  }
  return keys;
}

/** The image strings that make a test image trust `keys`. */
export const trustedKeyStrings = (keys: Uint8Array[]) => keys.map((key) => `${TRUSTED_KEY_MARKER}${Buffer.from(key).toString("hex")}`);
