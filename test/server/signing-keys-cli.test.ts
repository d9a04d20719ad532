// Release signing keys from the command line (issue 24): `release keys create` writes the private
// key where the operator says (0600, never over another file, never into a release directory) and
// the public key beside it; `publish --signing-key` signs, and the manifest holds key id and
// signature. A file that is not a key, a public key where the private one is needed, or an image
// that trusts no key is one line and a defined exit code, and nothing is published.
import { createPublicKey } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { buildAppImage, keyIdOf, rawPublicKey, verifyImage } from "../../firmware/index.ts";
import { run, storeIn, tempDirs } from "./cli-process.ts";
import { DEV_WIFI_PASSWORD, envWithout, readManifestFile, singleJson, snapshot, writeFile, type CliRefusal } from "./publish-fixture.ts";

const tempDir = tempDirs("signing-keys-cli");

describe("badgebench release keys create", () => {
  it("writes the private key 0600 and the public key beside it, and prints the key id and raw public key", async () => {
    const dir = tempDir("create");
    const keyFile = path.join(dir, "release.key");
    const result = await run(["release", "keys", "create", "--out", keyFile, "--data", path.join(dir, "var"), "--json"]);
    expect(result.code, result.stderr).toBe(0);
    const created = singleJson(result);
    const raw = rawPublicKey(createPublicKey(fs.readFileSync(`${keyFile}.pub`, "utf8")));
    expect(created).toEqual({ key_id: keyIdOf(raw), private_key_file: keyFile, public_key_file: `${keyFile}.pub`, public_key_hex: Buffer.from(raw).toString("hex") });
    expect(fs.readFileSync(keyFile, "utf8")).toMatch(/^-----BEGIN PRIVATE KEY-----\n/);
    expect(fs.statSync(keyFile).mode & 0o777).toBe(0o600);

    // never over an existing key: the operator's only copy would be gone
    const again = await run(["release", "keys", "create", "--out", keyFile, "--data", path.join(dir, "var")]);
    expect(again.code).toBe(2);
    expect(again.stderr).toBe(`badgebench: ${keyFile} already exists; a signing key is never overwritten (choose another --out)\n`);
    expect(rawPublicKey(createPublicKey(fs.readFileSync(`${keyFile}.pub`, "utf8")))).toEqual(raw);
  });

  it("refuses a path inside the data directory's release directories, writing nothing", async () => {
    const data = tempDir("data");
    const inside = path.join(data, "test-releases", "release.key");
    const result = await run(["release", "keys", "create", "--out", inside, "--data", data]);
    expect(result.code).toBe(2);
    expect(result.stderr).toBe(`badgebench: --out ${inside} is inside the release directory ${path.join(data, "test-releases")}; keep the private key outside the server's data\n`);
    expect(fs.existsSync(path.dirname(inside))).toBe(false);
  });
});

describe("badgebench publish --signing-key", () => {
  let dataDir: string;
  let src: string;
  let keyFile: string;
  let raw: Uint8Array;
  const env = () => envWithout({ BADGE_DEV_WIFI_PASSWORD: DEV_WIFI_PASSWORD });

  beforeAll(async () => {
    dataDir = await storeIn(tempDir("cli"));
    src = tempDir("src");
    keyFile = path.join(src, "release.key");
    expect((await run(["release", "keys", "create", "--out", keyFile, "--data", dataDir])).code).toBe(0);
    raw = rawPublicKey(createPublicKey(fs.readFileSync(`${keyFile}.pub`, "utf8")));
    writeFile(src, "1.4.0.bin", buildAppImage({ version: "1.4.0", trustedKeys: [raw] }));
    writeFile(src, "1.4.0-no-keys.bin", buildAppImage({ version: "1.4.0" }));
    fs.writeFileSync(path.join(src, "notes.txt"), "not a key at all\n");
  });

  it.each([
    ["a file that is not a key", () => path.join(src, "notes.txt"), (file: string) => `--signing-key ${file} is not a key: expected the PEM private key that release keys create --out wrote`],
    ["the public key", () => `${keyFile}.pub`, (file: string) => `--signing-key ${file} is a public key; publish signs with the private key (the file release keys create --out wrote, not its .pub)`],
    ["a file that does not exist", () => path.join(src, "missing.key"), (file: string) => `cannot read --signing-key ${file}: ENOENT`],
  ])("refuses %s in one line, exit 2, publishing nothing", async (_name, file, message) => {
    const before = snapshot(dataDir);
    const result = await run(["publish", path.join(src, "1.4.0.bin"), "1.4.0", "--signing-key", file(), "--data", dataDir], { env: env() });
    expect(result.code).toBe(2);
    expect(result.stderr).toBe(`badgebench: ${message(file())}\n`);
    expect(snapshot(dataDir)).toEqual(before);
    const json = await run(["publish", path.join(src, "1.4.0.bin"), "1.4.0", "--signing-key", file(), "--data", dataDir, "--json"], { env: env() });
    expect(singleJson<CliRefusal>(json).error).toEqual({ code: "signing_key_invalid", message: message(file()) });
  });

  it("refuses to sign an image that trusts no key, publishing nothing", async () => {
    const before = snapshot(dataDir);
    const result = await run(["publish", path.join(src, "1.4.0-no-keys.bin"), "1.4.0", "--signing-key", keyFile, "--data", dataDir, "--json"], { env: env() });
    expect(result.code).toBe(1);
    expect(singleJson<CliRefusal>(result).error.reasons?.map((r) => r.code)).toEqual(["image_trusts_no_key"]);
    expect(snapshot(dataDir)).toEqual(before);
  });

  it("signs the whole image: the manifest records the key id and a signature that verifies over the stored image", async () => {
    const result = await run(["publish", path.join(src, "1.4.0.bin"), "1.4.0", "--signing-key", keyFile, "--data", dataDir], { env: env() });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain(`signed by key ${keyIdOf(raw)}`);
    const [entry] = readManifestFile(dataDir).releases;
    expect(entry!.signature?.key_id).toBe(keyIdOf(raw));
    const stored = fs.readFileSync(path.join(dataDir, "test-releases", "images", entry!.file));
    expect(verifyImage(stored, Buffer.from(entry!.signature!.ed25519, "base64"), raw)).toBe(true);
    // the private key is in neither the release directory nor the database
    const secret = fs.readFileSync(keyFile, "utf8").split("\n")[1]!;
    for (const file of fs.readdirSync(dataDir, { recursive: true, encoding: "utf8" })) {
      const full = path.join(dataDir, file);
      if (fs.statSync(full).isFile()) expect(fs.readFileSync(full, "latin1").includes(secret), full).toBe(false);
    }
  });
});
