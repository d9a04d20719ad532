// `devices add|list|revoke`: badges and their device tokens.
import type { Argv } from "yargs";
import { adminOptions, releaseStoresOf, withStore, print } from "./admin.ts";
import { table } from "../../../badge-sim/reports/text.ts";

/** The badge service, imported when a command runs: it loads the firmware contract, which --help does not need. */
const devicesService = () => import("../../../server/services/devices.ts");

export function devicesCommands(y: Argv): Argv {
  return y
    .command("devices", "manage badges and their device tokens", (y) =>
      y
        .demandCommand(1, "name a devices command")
        .command(
          "add",
          "register a badge and print its device token (shown once)",
          (k) =>
            adminOptions(k)
              .option("room", { type: "string", demandOption: true, describe: "the room code the badge hangs in" })
              .option("model", { type: "string", demandOption: true, describe: "the badge's hardware model, shown on the fleet page" })
              .option("name", { type: "string", describe: "a label for the fleet page and devices list (default: MODEL in ROOM)" })
              .option("mode", { choices: ["test", "live"] as const, default: "test" as const, describe: "which data the badge's taps go to: the test mode's or the live one's" }),
          (args) =>
            withStore(args, async (store) => {
              const device = await (await devicesService()).createDevice(store.db, { mode: args.mode, room: args.room, model: args.model, name: args.name });
              print(args, device, `${device.id}\n${device.token}\n(the token is shown once; store it on the badge now)`);
            }),
        )
        .command("list", "list badges with their firmware state", adminOptions, (args) =>
          withStore(args, async (store) => {
            const releases = await releaseStoresOf(store, args);
            // Each badge is judged against its own mode's releases.
            const manifests = { 1: await releases[1].read(), 0: await releases[0].read() };
            const now = new Date();
            const [{ fleetViewOf }, { listDevices }] = await Promise.all([devicesService(), import("../../../server/store/devices-store.ts")]);
            const devices = await Promise.all((await listDevices(store.db)).map((row) => fleetViewOf(store.db, row, manifests[row.livemode], now)));
            const rows = devices.map((d) => [d.id, d.room, d.model, d.firmware.installed?.version ?? "-", d.firmware.state, d.name]);
            print(args, { object: "list", data: devices }, rows.length ? table(["id", "room", "model", "version", "firmware", "name"], rows) : "no devices");
          }),
        )
        .command(
          "revoke <id>",
          "revoke a badge's device token (the badge gets 401 and clears it)",
          (k) => adminOptions(k).positional("id", { type: "string", demandOption: true, describe: "the badge's id (dev_...), from devices list" }),
          (args) =>
            withStore(args, async (store) => {
              const device = await (await devicesService()).revokeDevice(store.db, args.id);
              print(args, device, `revoked the token of ${device.id}`);
            }),
        ),
    );
}
