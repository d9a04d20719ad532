// Writes a valid ESP32 app image for tests and demos (firmware/app-image.ts buildAppImage).
// Usage: tsx scripts/cli/make-test-image.ts --version 1.4.0 --out FILE [--size 1.9MiB]
//   [--project NAME] [--wifi-password PW] [--crash-on-boot] [--seed N] [--no-hash] [--json]
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import yargs from "yargs";
import { hideBin } from "yargs/helpers";
import { buildAppImage, ImageOptionsError, md5Hex, sha256Hex, type BuildImageOptions } from "../../firmware/index.ts";

export interface TestImageSummary {
  path: string;
  version: string;
  size: number;
  md5: string;
  sha256: string;
}

/** A size as written on a command line: 65536, 0x1E0000, 64KiB, 1.9MiB. null when unreadable. */
export function parseSize(text: string): number | null {
  if (/^[0-9]+$/.test(text)) return Number(text);
  if (/^0x[0-9a-f]+$/i.test(text)) return Number.parseInt(text.slice(2), 16);
  const scaled = /^([0-9]+(?:\.[0-9]+)?) ?(KiB|MiB)$/.exec(text);
  if (!scaled) return null;
  return Math.floor(Number(scaled[1]) * (scaled[2] === "KiB" ? 1024 : 1024 * 1024));
}

export function makeTestImage(out: string, options: BuildImageOptions): TestImageSummary {
  const image = buildAppImage(options);
  const file = path.resolve(out);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, image);
  return { path: file, version: options.version, size: image.length, md5: md5Hex(image), sha256: sha256Hex(image) };
}

/** A usage mistake exits 2, a failed write 1; either is one line, or one JSON object under --json. */
function fail(json: boolean, code: string, message: string, exitCode: number): never {
  if (json) process.stdout.write(`${JSON.stringify({ error: { code, message } })}\n`);
  else process.stderr.write(`make-test-image: ${message}\n${exitCode === 2 ? "run with --help for usage\n" : ""}`);
  process.exit(exitCode);
}

async function main(argv: string[]) {
  const json = argv.includes("--json");
  const args = await yargs(argv)
    .scriptName("make-test-image")
    .usage("$0 --version X.Y.Z --out FILE [options]\n\nWrites a valid ESP32 app image for tests.")
    .version(false) // --version is the image's version, not this script's
    .strict()
    .option("version", { type: "string", demandOption: true, describe: "version in the app descriptor and in plain text" })
    .option("out", { type: "string", demandOption: true, describe: "file to write" })
    .option("size", { type: "string", describe: "file size: bytes, 0x hex, or KiB/MiB (default 64KiB; rounded down to a multiple of 16)" })
    .option("project", { type: "string", describe: "project name in the app descriptor (default badge)" })
    .option("wifi-password", { type: "string", describe: "embed this Wi-Fi password, as a careless release build would" })
    .option("crash-on-boot", { type: "boolean", default: false, describe: "the simulated badge crashes when it boots this image" })
    .option("seed", { type: "number", describe: "seed of the filler bytes (default derived from the version)" })
    .option("hash", { type: "boolean", default: true, describe: "append the SHA-256 digest (--no-hash leaves it out)" })
    .option("trusted-key", { type: "string", array: true, describe: "a release public key (.pub from release keys create) the firmware trusts for signed updates; at most 2" })
    .option("json", { type: "boolean", default: false, describe: "print one JSON object" })
    .help()
    .fail((message, error) => {
      if (error) throw error;
      fail(json, "usage", message, 2);
    })
    .parseAsync();

  const size = args.size === undefined ? undefined : parseSize(args.size);
  if (size === null) fail(json, "usage", `--size '${args.size}' is not a size; use bytes, 0x hex, or a KiB/MiB suffix such as 1.9MiB`, 2);

  let trustedKeys: Uint8Array[] | undefined;
  try {
    const { readPublicKey } = await import("../../server/releases/signing-keys.ts");
    trustedKeys = args["trusted-key"]?.map((file) => readPublicKey(String(file), "--trusted-key"));
  } catch (error) {
    fail(json, "signing_key_invalid", (error as Error).message, 2);
  }
  let summary: TestImageSummary;
  try {
    summary = makeTestImage(args.out, {
      version: args.version,
      size,
      projectName: args.project,
      wifiPassword: args["wifi-password"],
      crashOnBoot: args["crash-on-boot"],
      seed: args.seed,
      hashAppended: args.hash,
      trustedKeys,
    });
  } catch (error) {
    if (error instanceof ImageOptionsError) fail(json, "invalid_option", error.message, 2);
    const code = (error as NodeJS.ErrnoException).code;
    if (typeof code === "string") fail(json, "write_failed", `cannot write ${args.out}: ${(error as Error).message}`, 1);
    throw error;
  }
  if (json) process.stdout.write(`${JSON.stringify(summary)}\n`);
  else {
    const rounded = size !== undefined && size !== summary.size ? ` (rounded down from ${size}: image sizes are multiples of 16)` : "";
    process.stdout.write(`wrote ${summary.path}: version ${summary.version}, ${summary.size} bytes${rounded}, md5 ${summary.md5}\n`);
  }
}

// Run as a script, also through a symlinked checkout (import.meta.url is the file's real path).
if (process.argv[1] && fs.realpathSync(path.resolve(process.argv[1])) === fileURLToPath(import.meta.url)) await main(hideBin(process.argv));
