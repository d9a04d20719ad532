// Release signing keys (issue 24): `release keys create` makes an Ed25519 key pair whose private
// half goes to a file the operator keeps (never the database, never a release directory), and
// `publish --signing-key FILE` reads it back. A file that is not a key, a public key where the
// private one is needed, or a key of another kind is a SigningKeyError naming the file: the CLI
// prints it as one line and exits 2, before anything is written.
import { createPrivateKey, createPublicKey, generateKeyPairSync, sign, type KeyObject } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { keyIdOf, rawPublicKey } from "../../firmware/index.ts";
import { RELEASES_DIRS } from "./release-store.ts";

export class SigningKeyError extends Error {
  override name = "SigningKeyError";
}

export interface CreatedKey {
  key_id: string;
  /** the file holding the private key (PEM, PKCS #8, mode 0600) */
  private_key_file: string;
  /** the file holding the public key (PEM, SPKI) */
  public_key_file: string;
  /** the raw 32-byte public key in hex: what firmware compiles in as its trusted key */
  public_key_hex: string;
}

/** Refuses a key file path inside a data directory's release directories, where the server serves and copies files from. */
function checkKeyPath(file: string, dataDir: string): void {
  for (const dir of Object.values(RELEASES_DIRS)) {
    const releases = path.resolve(dataDir, dir);
    const relative = path.relative(releases, path.resolve(file));
    if (!relative.startsWith("..") && !path.isAbsolute(relative)) {
      throw new SigningKeyError(`--out ${file} is inside the release directory ${releases}; keep the private key outside the server's data`);
    }
  }
}

/** Writes a new key pair to `file` (private) and `file.pub` (public); refuses to overwrite either. */
export function createSigningKey(file: string, dataDir: string): CreatedKey {
  checkKeyPath(file, dataDir);
  const publicFile = `${file}.pub`;
  for (const target of [file, publicFile]) {
    if (fs.existsSync(target)) throw new SigningKeyError(`${target} already exists; a signing key is never overwritten (choose another --out)`);
  }
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  try {
    fs.writeFileSync(file, privateKey.export({ format: "pem", type: "pkcs8" }), { mode: 0o600, flag: "wx" });
    fs.writeFileSync(publicFile, publicKey.export({ format: "pem", type: "spki" }), { flag: "wx" });
  } catch (error) {
    throw new SigningKeyError(`cannot write the key to ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
  }
  const raw = rawPublicKey(publicKey);
  return { key_id: keyIdOf(raw), private_key_file: file, public_key_file: publicFile, public_key_hex: Buffer.from(raw).toString("hex") };
}

function readKeyText(file: string, option: string): string {
  try {
    return fs.readFileSync(file, "utf8");
  } catch (error) {
    throw new SigningKeyError(`cannot read ${option} ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
  }
}

const isPublicKey = (text: string) => {
  try {
    createPublicKey(text);
    return !/PRIVATE KEY/.test(text);
  } catch {
    return false;
  }
};

/** The Ed25519 private key in `file` (what `release keys create --out` wrote). */
export function readSigningKey(file: string): KeyObject {
  const text = readKeyText(file, "--signing-key");
  let key: KeyObject;
  try {
    key = createPrivateKey(text);
  } catch {
    if (isPublicKey(text)) throw new SigningKeyError(`--signing-key ${file} is a public key; publish signs with the private key (the file release keys create --out wrote, not its .pub)`);
    throw new SigningKeyError(`--signing-key ${file} is not a key: expected the PEM private key that release keys create --out wrote`);
  }
  if (key.asymmetricKeyType !== "ed25519") throw new SigningKeyError(`--signing-key ${file} is a ${key.asymmetricKeyType} key; releases are signed with Ed25519 (release keys create)`);
  return key;
}

/** The raw Ed25519 public key in `file` (a `.pub` that `release keys create` wrote), for images that trust it. */
export function readPublicKey(file: string, option: string): Uint8Array {
  const text = readKeyText(file, option);
  let key: KeyObject;
  try {
    if (/PRIVATE KEY/.test(text)) throw new SigningKeyError(`${option} ${file} is a private key; give its .pub (a private key never goes into firmware)`);
    key = createPublicKey(text);
  } catch (error) {
    if (error instanceof SigningKeyError) throw error;
    throw new SigningKeyError(`${option} ${file} is not a key: expected the PEM public key (.pub) that release keys create wrote`);
  }
  if (key.asymmetricKeyType !== "ed25519") throw new SigningKeyError(`${option} ${file} is a ${key.asymmetricKeyType} key; badges trust Ed25519 keys`);
  return rawPublicKey(key);
}

/** The manifest's `signature` of `image` by `privateKey`. */
export function signImage(image: Uint8Array, privateKey: KeyObject): { key_id: string; ed25519: string } {
  return { key_id: keyIdOf(rawPublicKey(createPublicKey(privateKey))), ed25519: sign(null, image, privateKey).toString("base64") };
}
