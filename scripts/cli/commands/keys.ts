// `keys create|list|revoke`: API keys, written straight to the store.
import type { Argv } from "yargs";
import { createApiKey, listApiKeys, revokeApiKey, SCOPES } from "../../../server/services/api-keys.ts";
import { adminOptions, withStore, print } from "./admin.ts";
import { table } from "../../../badge-sim/reports/text.ts";

export function keysCommands(y: Argv): Argv {
  return y
    .command("keys", "manage API keys", (y) =>
      y
        .demandCommand(1, "name a keys command")
        .command(
          "create",
          "create an API key (the secret is shown once)",
          (k) =>
            adminOptions(k)
              .option("mode", { choices: ["test", "live"] as const, demandOption: true, describe: "which data the key reads and writes: the test mode's or the live one's" })
              .option("scope", { type: "string", array: true, demandOption: true, describe: `what the key may do, once per scope: ${Object.keys(SCOPES).join(", ")}` })
              .option("name", { type: "string", describe: "a label to tell the key apart in keys list, e.g. the integration using it" })
              .option("user", { type: "string", describe: "the person corrections made with this key are attributed to", default: "Administrator" }),
          (args) =>
            withStore(args, async (store) => {
              const key = await createApiKey(store.db, { mode: args.mode, scopes: args.scope, name: args.name, user: args.user });
              print(args, key, `${key.id}\n${key.secret}\n(the secret is shown once; store it now)`);
            }),
        )
        .command("list", "list API keys", adminOptions, (args) =>
          withStore(args, async (store) => {
            const keys = await listApiKeys(store.db);
            const rows = keys.map((k) => [k.id, k.mode, k.secret_hint, k.revoked_at ? "revoked" : "active", k.scopes.join(","), k.name ?? ""]);
            print(args, { object: "list", data: keys }, rows.length ? table(["id", "mode", "secret", "status", "scopes", "name"], rows) : "no API keys");
          }),
        )
        .command(
          "revoke <id>",
          "revoke an API key",
          (k) => adminOptions(k).positional("id", { type: "string", demandOption: true, describe: "the key's id (key_...), from keys list" }),
          (args) =>
            withStore(args, async (store) => {
              const key = await revokeApiKey(store.db, args.id);
              print(args, key, `revoked ${key.id}`);
            }),
        ),
    );
}
