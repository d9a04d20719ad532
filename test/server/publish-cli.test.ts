// The publish commands as an operator runs them (`badgebench publish`, `scripts/cli/publish.ts`):
// where the developer Wi-Fi password comes from (file, environment, neither), the exit code, the
// --json output, and nothing written on a refusal.
import fs from "node:fs";
import path from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { buildAppImage, md5Hex, type ReleaseEntry } from "../../firmware/index.ts";
import { WIFI_PASSWORD_ENV } from "../../server/releases/publishing.ts";
import { run, storeIn, tempDirs } from "./cli-process.ts";
import { DEV_WIFI_PASSWORD, NOTE_41, sha256, writeFile, releasesDir, imagesDir, snapshot, readManifestFile, codesOf, singleJson, type CliRefusal, envWithout, runPublishScript } from "./publish-fixture.ts";

const tempDir = tempDirs("publish-cli");

describe("badgebench publish and scripts/cli/publish.ts", () => {
  let dataDir: string;
  let src: string;
  let passwordFile: string;

  beforeAll(async () => {
    dataDir = await storeIn(tempDir("cli"));
    src = tempDir("cli-src");
    passwordFile = path.join(src, "wifi-password.txt");
    fs.writeFileSync(passwordFile, `${DEV_WIFI_PASSWORD}\nthis second line is not part of it\n`);
    writeFile(src, "1.4.0.bin", buildAppImage({ version: "1.4.0" }));
    writeFile(src, "1.5.0-with-password.bin", buildAppImage({ version: "1.5.0", wifiPassword: DEV_WIFI_PASSWORD }));
  });

  it("with no Wi-Fi password configured refuses, says how to configure one, and creates nothing", async () => {
    const result = await run(["publish", path.join(src, "1.4.0.bin"), "1.4.0", "--mode", "test", "--data", dataDir, "--json"], { env: envWithout() });
    expect(result.code).toBe(1);
    const body = singleJson<CliRefusal>(result);
    expect(body.error.code).toBe("refused");
    expect(body.error.reasons?.map((r) => r.code)).toEqual(["wifi_password_unconfigured"]);
    expect(body.error.message).toContain(WIFI_PASSWORD_ENV);
    expect(body.error.message).toContain("--wifi-password-file");
    expect(fs.existsSync(releasesDir(dataDir))).toBe(false);
  });

  it("with --wifi-password-file publishes and prints the release entry", async () => {
    const result = await run(
      ["publish", path.join(src, "1.4.0.bin"), "1.4.0", "First fleet build", "--display", "Badge 1.4", "--wifi-password-file", passwordFile, "--mode", "test", "--data", dataDir, "--json"],
      { env: envWithout() },
    );
    expect(result.code, result.stderr).toBe(0);
    const { livemode, ...entry } = singleJson<ReleaseEntry & { livemode: boolean }>(result);
    expect(livemode).toBe(false);
    const input = fs.readFileSync(path.join(src, "1.4.0.bin"));
    expect(entry).toMatchObject({
      version: "1.4.0",
      display: "Badge 1.4",
      size: input.length,
      md5: md5Hex(input),
      sha256: sha256(input),
      notes: ["First fleet build"],
      canary: null,
      promoted: null,
    });
    const stored = path.join(imagesDir(dataDir), entry.file);
    expect(fs.readFileSync(stored).equals(input)).toBe(true);
    expect(fs.statSync(stored).mode & 0o222).toBe(0);
    expect(readManifestFile(dataDir)).toEqual({ format: 1, fleet: "1.4.0", releases: [entry] });
  });

  it("uses the password from the file: an image containing it is refused, with every other reason", async () => {
    const before = snapshot(dataDir);
    const result = await run(
      [
        "publish", path.join(src, "1.5.0-with-password.bin"), "1.5.0", "ok", NOTE_41, "three", "four",
        "--display", "D".repeat(41), "--wifi-password-file", passwordFile, "--mode", "test", "--data", dataDir, "--json",
      ],
      // The environment's password differs: the file wins.
      { env: envWithout({ [WIFI_PASSWORD_ENV]: "not-the-one-in-the-image" }) },
    );
    expect(result.code).toBe(1);
    const body = singleJson<CliRefusal>(result);
    expect(body.error.code).toBe("refused");
    expect(codesOf(body.error as { reasons: { code: string }[] })).toEqual(
      ["display_invalid", "image_contains_wifi_password", "note_invalid", "notes_too_many"],
    );
    expect(body.error.message).toContain("4 release notes given; at most 3");
    expect(body.error.message).toContain("release note 2 is 41 characters");
    expect(body.error.message).toContain("display string is 41 characters");
    expect(body.error.message).toContain("image contains the developer Wi-Fi password");
    expect(result.stdout).not.toContain(DEV_WIFI_PASSWORD);
    expect(snapshot(dataDir)).toEqual(before);
  });

  it("scripts/cli/publish.ts reads BADGE_DEV_WIFI_PASSWORD and refuses a version like 1.2", async () => {
    const before = snapshot(dataDir);
    const result = await runPublishScript(
      [path.join(src, "1.5.0-with-password.bin"), "1.2", "--mode", "test", "--data", dataDir, "--json"],
      envWithout({ [WIFI_PASSWORD_ENV]: DEV_WIFI_PASSWORD }),
    );
    expect(result.code, result.stderr).toBe(1);
    const body = singleJson<CliRefusal>(result);
    expect(codesOf(body.error as { reasons: { code: string }[] })).toEqual(["image_contains_wifi_password", "version_invalid"]);
    expect(body.error.message).toContain("version '1.2' is not three dotted numbers");
    expect(snapshot(dataDir)).toEqual(before);
  });
});
