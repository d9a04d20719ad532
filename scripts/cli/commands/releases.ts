// `publish` and `release list|promote`: firmware releases. Publish and promote work in one mode
// (--mode, test by default as for `devices add`: firmware reaches live badges only when
// `--mode live` says so); list shows both modes unless one is named.
import fs from "node:fs";
import path from "node:path";
import type { Argv } from "yargs";
import { adminOptions, releaseStoresOf, withStore, print } from "./admin.ts";
import { table } from "../../../badge-sim/reports/text.ts";
import { rolloutCommands } from "./rollouts.ts";

// Imported when a command runs: publishing loads the firmware contract, which --help does not need.
const publishing = () => import("../../../server/releases/publishing.ts");
const signingKeys = () => import("../../../server/releases/signing-keys.ts");

/**
 * publishing.ts's WIFI_PASSWORD_ENV, named here for the option's description without loading it
 * (cli-help.test.ts checks they agree).
 */
const WIFI_PASSWORD_ENV = "BADGE_DEV_WIFI_PASSWORD";

const MODES = ["test", "live"] as const;
type ModeName = (typeof MODES)[number];
const livemodeOf = (mode: ModeName) => (mode === "live" ? 1 : 0);
const modeOption = { choices: MODES, describe: "whose releases: test badges and keys, or live ones" } as const;

/** The developer Wi-Fi password publish checks images for: the file's first line, else the environment. */
async function devWifiPassword(file: string | undefined): Promise<string | undefined> {
  if (file === undefined) return process.env[WIFI_PASSWORD_ENV] || undefined;
  try {
    return fs.readFileSync(file, "utf8").split(/\r?\n/)[0] || undefined;
  } catch (error) {
    const { DeviceError } = await import("../../../server/services/devices.ts");
    throw new DeviceError(`cannot read --wifi-password-file ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
  }
}

export function releaseCommands(y: Argv): Argv {
  return y
    .command(
      "publish <image> <version> [notes..]",
      "publish a firmware release (refused if the image is not fit to ship)",
      (y) =>
        adminOptions(y)
          .positional("image", { type: "string", demandOption: true, describe: "the ESP32 app image (.bin)" })
          .positional("version", { type: "string", demandOption: true, describe: "three dotted numbers, like 1.4.0" })
          .positional("notes", { type: "string", array: true, default: [] as string[], describe: "up to 3 release notes of 40 characters" })
          .option("display", { type: "string", describe: "the string the badge shows (default: the version)" })
          .option("mode", { ...modeOption, default: "test" as ModeName })
          .option("canary", { type: "string", describe: "offer the release to this one device (dev_..., of the same mode) until promoted" })
          .option("signing-key", { type: "string", describe: "sign the image with this Ed25519 private key file (from release keys create)" })
          .option("wifi-password-file", { type: "string", describe: `file whose first line is the developer Wi-Fi password (default $${WIFI_PASSWORD_ENV})` }),
      (args) =>
        withStore(args, async (store) => {
          const livemode = livemodeOf(args.mode);
          // read first: a key file that is not a key is a usage mistake, before anything else is looked at
          const signingKey = args.signingKey === undefined ? undefined : (await signingKeys()).readSigningKey(args.signingKey);
          const releases = (await releaseStoresOf(store, args))[livemode];
          const entry = await (await publishing()).publishRelease(store.db, releases, {
            signingKey,
            imagePath: path.resolve(args.image),
            version: args.version,
            notes: args.notes.map(String),
            display: args.display,
            canary: args.canary,
            devWifiPassword: await devWifiPassword(args.wifiPasswordFile),
          });
          const audience = entry.canary
            ? `offered to ${args.mode} canary ${entry.canary} only; promote it with: badgebench release promote ${entry.version} --mode ${args.mode}`
            : `offered to the whole ${args.mode} fleet`;
          const signed = entry.signature ? `, signed by key ${entry.signature.key_id}` : "";
          print(args, { ...entry, livemode: livemode === 1 }, `published ${args.mode} release ${entry.version} (${entry.size} bytes, md5 ${entry.md5}${signed}): ${audience}`);
        }),
    )
    .command("release", "list, promote and roll out releases", (y) =>
      y
        .demandCommand(1, "name a release command")
        .command("keys", "release signing keys", (k) =>
          k.demandCommand(1, "name a release keys command").command(
            "create",
            "make an Ed25519 signing key: the private key to --out (keep it off the server), the public one to --out.pub",
            (c) =>
              c
                .option("out", { type: "string", demandOption: true, describe: "the private key's file (written 0600, never overwritten); not in the data directory's release directories" })
                .option("data", { type: "string", describe: "data directory whose release directories the key must stay out of (default $BADGEBENCH_DATA or ./var)" })
                .option("json", { type: "boolean", default: false, describe: "print exactly one JSON object" }),
            async (args) => {
              const { resolveDataDir } = await import("../../../server/data-dir.ts");
              const key = (await signingKeys()).createSigningKey(args.out, resolveDataDir(args.data));
              print(args, key, `key id ${key.key_id}\nprivate key: ${key.private_key_file} (publish --signing-key; keep it off the server)\npublic key: ${key.public_key_file}, raw ${key.public_key_hex} (what badge firmware trusts)`);
            },
          ),
        )
        .command("rollout", "staged rollouts: create, list, show, advance, pause, resume, abort", rolloutCommands)
        .command(
          "list",
          "list published releases, live then test",
          (k) => adminOptions(k).option("mode", { ...modeOption, describe: "only this mode's releases (default: both)" }),
          (args) =>
            withStore(args, async (store) => {
              const stores = await releaseStoresOf(store, args);
              const { listReleases } = await import("../../../server/services/releases.ts");
              const modes: ModeName[] = args.mode === undefined ? ["live", "test"] : [args.mode];
              const fleet: Partial<Record<ModeName, string | null>> = {};
              const releases = [];
              for (const mode of modes) {
                const manifest = await stores[livemodeOf(mode)].read();
                fleet[mode] = manifest.fleet;
                releases.push(...(await listReleases(store.db, livemodeOf(mode), manifest)));
              }
              const rows = releases.map((r) => {
                const report = r.canary?.last_report;
                const role = r.role === "canary" ? `canary ${r.canary?.id}` : r.role;
                const promotion = r.role === "canary" ? `last report ${report ? `${report.outcome}|${report.version}` : "none"}; ${r.promotion?.allowed ? "promotable" : "not promotable yet"}` : "";
                return [r.livemode ? "live" : "test", r.version, String(r.size), r.md5, r.published_at, role, promotion];
              });
              print(args, { object: "list", fleet, data: releases }, rows.length ? table(["mode", "version", "bytes", "md5", "published", "role", "canary's report"], rows) : "no releases published");
            }),
        )
        .command(
          "promote <version>",
          "make a canary release the fleet's release, once its canary reported ota=ok",
          (k) =>
            adminOptions(k)
              .positional("version", { type: "string", demandOption: true, describe: "the canary release's version, from release list" })
              .option("mode", { ...modeOption, default: "test" as ModeName })
              .option("force", { type: "boolean", default: false, describe: "promote without the canary's ok report (recorded)" })
              .option("reason", { type: "string", describe: "why; recorded in the manifest" }),
          (args) =>
            withStore(args, async (store) => {
              const livemode = livemodeOf(args.mode);
              const releases = (await releaseStoresOf(store, args))[livemode];
              const entry = await (await publishing()).promoteRelease(store.db, releases, args.version, { force: args.force, reason: args.reason });
              const how = entry.promoted?.forced ? "forced without the canary's report" : `canary reported ok (${entry.promoted?.canary_report})`;
              print(args, { ...entry, livemode: livemode === 1 }, `${entry.version} is now the ${args.mode} fleet's release: ${how}`);
            }),
        ),
    );
}
