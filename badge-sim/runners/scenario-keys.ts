// The release signing keys scenario files name (`badge.trustedKeys`, `server.release.signedWith`):
// test key pairs shipped in fixtures/signing-keys/ (NAME.key private, NAME.key.pub public), made
// with `badgebench release keys create`. They sign test releases only; no badge in the field trusts them.
import { createPublicKey } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { rawPublicKey } from "../../firmware/index.ts";

export const SCENARIO_KEY_NAMES = ["old", "new"] as const;
export type ScenarioKeyName = (typeof SCENARIO_KEY_NAMES)[number];

const KEYS_DIR = path.join(import.meta.dirname, "../../fixtures/signing-keys");

/** The private key file of a scenario key (what `publish --signing-key` reads). */
export const scenarioKeyFile = (name: ScenarioKeyName) => path.join(KEYS_DIR, `${name}.key`);

/** The raw public key of a scenario key, as firmware trusting it compiles it in. */
export function scenarioPublicKey(name: ScenarioKeyName): Uint8Array {
  return rawPublicKey(createPublicKey(fs.readFileSync(`${scenarioKeyFile(name)}.pub`, "utf8")));
}
