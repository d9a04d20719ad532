// The badgebench command line. Thin: it parses arguments and calls the server modules.
// Every admin command takes --data and --json; with --json it prints exactly one JSON object.
import fs from "node:fs";
import path from "node:path";
import yargs, { type Argv } from "yargs";
import { ApiError } from "../server/errors.ts";
import { ListenError, resolveDatabaseUrl, resolveDataDir } from "../server/main.ts";
import { promoteRelease, PublishRefusal, publishRelease, WIFI_PASSWORD_ENV } from "../server/releases/publishing.ts";
import { openReleaseStore } from "../server/releases/open-release-store.ts";
import { ReleaseStoreError } from "../server/releases/release-store.ts";
import { ApiKeyError, createApiKey, listApiKeys, revokeApiKey, SCOPES } from "../server/services/api-keys.ts";
import { importSchool, SchoolImportError } from "../server/services/school-import.ts";
import { listReleases } from "../server/services/releases.ts";
import { createDevice, DeviceError, fleetViewOf, revokeDevice } from "../server/services/devices.ts";
import { SESSION_ACTIONS, transitionSession, type SessionAction } from "../server/services/sessions.ts";
import { listDevices } from "../server/store/devices-store.ts";
import { DEFAULT_STALL_TIMEOUT_MS } from "../badge-sim/scenario-runner.ts";
import { runSimCoverage } from "./sim-coverage.ts";
import { runHilRun } from "./hil-run.ts";
import { runSimFleet } from "./sim-fleet.ts";
import { runSimRun } from "./sim-run.ts";
import { runSimSerial } from "./sim-serial.ts";
import { runHilFlashCommand, runHilMonitor, runHilPorts } from "./hil-console.ts";
import { cliFailure, type ErrorBody } from "./cli-failure.ts";
import { serve, serveOptions } from "./serve.ts";
import { SimSetupError } from "./sim-server.ts";
import { openStore, StoreError, type Store } from "../server/store/database.ts";
import { WebhookConfigError } from "../server/webhooks/webhook-config.ts";
import { startListener } from "./webhooks-listen.ts";

interface AdminArgs {
  data?: string;
  database?: string;
  json: boolean;
}

/** Errors a user can fix; printed as a message, never as a stack trace. */
const USER_ERRORS = [ApiKeyError, SchoolImportError, ApiError, ListenError, DeviceError, PublishRefusal, ReleaseStoreError, SimSetupError, WebhookConfigError, StoreError];

function errorBody(error: Error): ErrorBody {
  if (error instanceof ApiError) return { code: error.code, message: error.message };
  if (error instanceof ListenError) return { code: "listen_failed", message: error.message };
  if (error instanceof StoreError) return { code: "database_error", message: error.message };
  if (error instanceof PublishRefusal) return { code: "refused", message: error.message, reasons: error.reasons };
  return { code: "invalid_request", message: error.message };
}

/** The developer Wi-Fi password publish checks images for: the file's first line, else the environment. */
function devWifiPassword(file: string | undefined): string | undefined {
  if (file === undefined) return process.env[WIFI_PASSWORD_ENV] || undefined;
  try {
    return fs.readFileSync(file, "utf8").split(/\r?\n/)[0] || undefined;
  } catch (error) {
    throw new DeviceError(`cannot read --wifi-password-file ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
  }
}

function print(args: AdminArgs, json: unknown, text: string) {
  process.stdout.write(args.json ? `${JSON.stringify(json)}\n` : `${text}\n`);
}

async function withStore<T>(args: AdminArgs, run: (store: Store) => Promise<T>): Promise<void> {
  const store = await openStore({ dataDir: resolveDataDir(args.data), databaseUrl: resolveDatabaseUrl(args.database) });
  try {
    await run(store);
  } finally {
    await store.close();
  }
}

const adminOptions = (y: Argv) =>
  y
    .option("data", { type: "string", describe: "data directory (default $BADGEBENCH_DATA or ./var)" })
    .option("database", { type: "string", describe: "PostgreSQL URL instead of SQLite in the data directory (default $DATABASE_URL)" })
    .option("json", { type: "boolean", default: false, describe: "print exactly one JSON object" });

export function buildCli(argv: string[]) {
  return yargs(argv)
    .scriptName("badgebench")
    .version(false)
    .strict()
    .demandCommand(1, "name a command")
    .command(
      "serve",
      "start the server",
      serveOptions,
      (args) => serve(args),
    )
    .command("webhooks", "receive webhooks locally", (y) =>
      y.demandCommand(1, "name a webhooks command").command(
        "listen",
        "a local receiver: verifies each delivery's signature, answers like SPEC 5 says, prints each event on one line",
        (k) =>
          k
            .option("port", { type: "number", demandOption: true, describe: "port to listen on (0 picks a free one)" })
            .option("host", { type: "string", default: "127.0.0.1" })
            .option("secret", { type: "string", array: true, demandOption: true, describe: "the endpoint's signing secret whsec_...; give it twice while a secret is rolled" })
            .option("forward-to", { type: "string", describe: "after acknowledging, POST each new delivery unchanged to this URL" })
            .option("json", { type: "boolean", default: false, describe: "print each event as one JSON object per line" }),
        async (args) => {
          const listener = await startListener({ port: args.port, host: args.host, secrets: args.secret.map(String), forwardTo: args["forward-to"], json: args.json }).catch(
            (error: Error) => {
              throw new ListenError(`cannot listen on ${args.host}:${args.port}: ${error.message}`, { cause: error });
            },
          );
          process.stderr.write(`listening on ${listener.url}\n`);
          const stop = () => {
            listener.close().then(() => process.exit(0), () => process.exit(1));
          };
          process.once("SIGINT", stop);
          process.once("SIGTERM", stop);
        },
      ),
    )
    .command("keys", "manage API keys", (y) =>
      y
        .demandCommand(1, "name a keys command")
        .command(
          "create",
          "create an API key (the secret is shown once)",
          (k) =>
            adminOptions(k)
              .option("mode", { choices: ["test", "live"] as const, demandOption: true })
              .option("scope", { type: "string", array: true, demandOption: true, describe: `one of ${Object.keys(SCOPES).join(", ")}` })
              .option("name", { type: "string" })
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
            const lines = keys.map((k) => `${k.id}  ${k.mode}  ${k.secret_hint}  ${k.scopes.join(",")}  ${k.name}${k.revoked_at ? "  REVOKED" : ""}`);
            print(args, { object: "list", data: keys }, lines.join("\n") || "no API keys");
          }),
        )
        .command(
          "revoke <id>",
          "revoke an API key",
          (k) => adminOptions(k).positional("id", { type: "string", demandOption: true }),
          (args) =>
            withStore(args, async (store) => {
              const key = await revokeApiKey(store.db, args.id);
              print(args, key, `revoked ${key.id}`);
            }),
        ),
    )
    .command(
      "import <file>",
      "import a school (rooms, students, courses, enrollments, sessions, timetable)",
      (y) =>
        adminOptions(y)
          .positional("file", { type: "string", demandOption: true })
          .option("mode", { choices: ["test", "live"] as const, default: "test" as const })
          .option("week", { type: "string", describe: "a date in the week the timetable expands into (default: this week)" }),
      (args) =>
        withStore(args, async (store) => {
          const file = path.resolve(args.file);
          let school: unknown;
          try {
            school = JSON.parse(fs.readFileSync(file, "utf8"));
          } catch (error) {
            throw new SchoolImportError(`${file}: cannot read JSON: ${(error as Error).message}`);
          }
          const summary = await importSchool(store.db, school, { mode: args.mode, week: args.week, source: file });
          print(
            args,
            summary,
            `imported into ${summary.mode} mode: ${summary.rooms} rooms, ${summary.students} students, ${summary.courses} courses, ${summary.enrollments} enrollments, ${summary.sessions_added} new sessions`,
          );
        }),
    )
    .command(
      "sessions <action> <id>",
      "open, close or cancel a session",
      (y) =>
        adminOptions(y)
          .positional("action", { choices: Object.keys(SESSION_ACTIONS) as SessionAction[], demandOption: true })
          .positional("id", { type: "string", demandOption: true }),
      (args) =>
        withStore(args, async (store) => {
          const session = await store.db.transaction().execute((trx) => transitionSession(trx, args.id, args.action));
          print(args, session, `${session.id} is now ${session.status}`);
        }),
    )
    .command(
      "publish <image> <version> [notes..]",
      "publish a firmware release (refused if the image is not fit to ship)",
      (y) =>
        adminOptions(y)
          .positional("image", { type: "string", demandOption: true, describe: "the ESP32 app image (.bin)" })
          .positional("version", { type: "string", demandOption: true, describe: "three dotted numbers, like 1.4.0" })
          .positional("notes", { type: "string", array: true, default: [] as string[], describe: "up to 3 release notes of 40 characters" })
          .option("display", { type: "string", describe: "the string the badge shows (default: the version)" })
          .option("canary", { type: "string", describe: "offer the release to this one device (dev_...) until promoted" })
          .option("wifi-password-file", { type: "string", describe: `file whose first line is the developer Wi-Fi password (default $${WIFI_PASSWORD_ENV})` }),
      (args) =>
        withStore(args, async (store) => {
          const releases = openReleaseStore(store.db, resolveDataDir(args.data));
          const entry = await publishRelease(store.db, releases, {
            imagePath: path.resolve(args.image),
            version: args.version,
            notes: args.notes.map(String),
            display: args.display,
            canary: args.canary,
            devWifiPassword: devWifiPassword(args.wifiPasswordFile),
          });
          const audience = entry.canary ? `offered to canary ${entry.canary} only; promote it with: badgebench release promote ${entry.version}` : "offered to the whole fleet";
          print(args, entry, `published ${entry.version} (${entry.size} bytes, md5 ${entry.md5}): ${audience}`);
        }),
    )
    .command("release", "list and promote releases", (y) =>
      y
        .demandCommand(1, "name a release command")
        .command("list", "list published releases", adminOptions, (args) =>
          withStore(args, async (store) => {
            const manifest = await openReleaseStore(store.db, resolveDataDir(args.data)).read();
            const releases = await listReleases(store.db, manifest);
            const lines = releases.map((r) => {
              const report = r.canary?.last_report;
              const canary = r.canary && `canary ${r.canary.id}, last report ${report ? `${report.outcome}|${report.version}` : "none"}`;
              const audience = r.role === "fleet" ? "FLEET" : r.role === "canary" ? `${canary}; ${r.promotion?.allowed ? "promotable" : "not promotable yet"}` : "";
              return `${r.version}  ${r.size} bytes  md5 ${r.md5}  ${r.published_at}  ${audience}`.trimEnd();
            });
            print(args, { object: "list", fleet: manifest.fleet, data: releases }, lines.join("\n") || "no releases published");
          }),
        )
        .command(
          "promote <version>",
          "make a canary release the fleet's release, once its canary reported ota=ok",
          (k) =>
            adminOptions(k)
              .positional("version", { type: "string", demandOption: true })
              .option("force", { type: "boolean", default: false, describe: "promote without the canary's ok report (recorded)" })
              .option("reason", { type: "string", describe: "why; recorded in the manifest" }),
          (args) =>
            withStore(args, async (store) => {
              const releases = openReleaseStore(store.db, resolveDataDir(args.data));
              const entry = await promoteRelease(store.db, releases, args.version, { force: args.force, reason: args.reason });
              const how = entry.promoted?.forced ? "forced without the canary's report" : `canary reported ok (${entry.promoted?.canary_report})`;
              print(args, entry, `${entry.version} is now the fleet's release: ${how}`);
            }),
        ),
    )
    .command("devices", "manage badges and their device tokens", (y) =>
      y
        .demandCommand(1, "name a devices command")
        .command(
          "add",
          "register a badge and print its device token (shown once)",
          (k) =>
            adminOptions(k)
              .option("room", { type: "string", demandOption: true, describe: "the room code the badge hangs in" })
              .option("model", { type: "string", demandOption: true })
              .option("name", { type: "string" })
              .option("mode", { choices: ["test", "live"] as const, default: "test" as const }),
          (args) =>
            withStore(args, async (store) => {
              const device = await createDevice(store.db, { mode: args.mode, room: args.room, model: args.model, name: args.name });
              print(args, device, `${device.id}\n${device.token}\n(the token is shown once; store it on the badge now)`);
            }),
        )
        .command("list", "list badges with their firmware state", adminOptions, (args) =>
          withStore(args, async (store) => {
            const manifest = await openReleaseStore(store.db, resolveDataDir(args.data)).read();
            const now = new Date();
            const devices = await Promise.all((await listDevices(store.db)).map((row) => fleetViewOf(store.db, row, manifest, now)));
            const lines = devices.map(
              (d) => `${d.id}  ${d.room}  ${d.model}  ${d.firmware.installed?.version ?? "-"}  ${d.firmware.state}${d.revoked_at ? "  REVOKED" : ""}  ${d.name}`,
            );
            print(args, { object: "list", data: devices }, lines.join("\n") || "no devices");
          }),
        )
        .command(
          "revoke <id>",
          "revoke a badge's device token (the badge gets 401 and clears it)",
          (k) => adminOptions(k).positional("id", { type: "string", demandOption: true }),
          (args) =>
            withStore(args, async (store) => {
              const device = await revokeDevice(store.db, args.id);
              print(args, device, `revoked the token of ${device.id}`);
            }),
        ),
    )
    .command("sim", "run simulated badges against the server", (y) =>
      y
        .demandCommand(1, "name a sim command")
        .command(
          "run <files..>",
          "play scenario files (or directories of them) on virtual badges; exit 1 when any fails",
          (k) =>
            k
              .positional("files", { type: "string", array: true, demandOption: true, describe: "scenario files or directories, e.g. fixtures/scenarios" })
              .option("server", { type: "string", describe: "a running server's URL (default: a server in this process per scenario)" })
              .option("data", { type: "string", describe: "with --server: that server's data directory on this machine" })
              .option("junit", { type: "string", describe: "write a JUnit XML report to this file" })
              .option("html", { type: "string", describe: "write a self-contained HTML report (summary, each scenario's timeline) to this file" })
              .option("json", { type: "boolean", default: false, describe: "print exactly one JSON object" })
              .option("stall-timeout", { type: "number", default: DEFAULT_STALL_TIMEOUT_MS, describe: "wall ms a badge waits on a silent download" }),
          async (args) => {
            process.exitCode = await runSimRun({
              files: args.files,
              server: args.server,
              data: args.data,
              junit: args.junit,
              html: args.html,
              json: args.json,
              stallTimeoutMs: args.stallTimeout,
              interactive: process.stderr.isTTY === true && !process.env.CI,
            });
          },
        )
        .command(
          "serial",
          "a simulated badge on a serial port (one end of a socat pty pair), for hil monitor and hil run without hardware; Ctrl-C to end",
          (k) =>
            k
              .option("port", { type: "string", demandOption: true, describe: "the badge end of the serial line, e.g. one end of a socat pty pair" })
              .option("server", { type: "string", demandOption: true, describe: "the server the badge talks to, http://HOST:PORT" })
              .option("token", { type: "string", demandOption: true, describe: "the badge's device token from `badgebench devices add`" })
              .option("version", { type: "string", default: "1.4.0", describe: "the firmware version the badge runs" }),
          async (args) => {
            process.exitCode = await runSimSerial({ port: args.port, serverUrl: args.server, token: args.token, version: args.version });
          },
        )
        .command(
          "fleet",
          "many virtual badges checking in against one server; a table of outcomes and the server's latencies",
          (k) =>
            k
              .option("badges", { type: "number", demandOption: true, describe: "how many badges" })
              .option("downloading", { type: "number", describe: "badges whose wearer asks for the update (default: a tenth)" })
              .option("server", { type: "string", describe: "a running server's URL (default: a server in this process)" })
              .option("data", { type: "string", describe: "with --server: that server's data directory on this machine" })
              .option("image-size", { type: "number", describe: "bytes of the release image, in-process server only (default 262144)" })
              .option("spread-ms", { type: "number", describe: "wall ms over which the badges boot (default 10 per badge)" })
              .option("seed", { type: "number", describe: "seed of the schedule, so a run repeats" })
              .option("json", { type: "boolean", default: false, describe: "print exactly one JSON object" })
              .option("html", { type: "string", describe: "write the figures as a self-contained HTML picture to this file" }),
          async (args) => {
            process.exitCode = await runSimFleet({
              badges: args.badges,
              downloading: args.downloading,
              server: args.server,
              data: args.data,
              imageSize: args.imageSize,
              spreadMs: args.spreadMs,
              seed: args.seed,
              json: args.json,
              html: args.html,
              progress: true,
            });
          },
        )
        .command(
          "coverage",
          "run generated paths through the badge model and print the share of its transitions they took; exit 1 below 100 %",
          (k) => k.option("json", { type: "boolean", default: false, describe: "print exactly one JSON object" }),
          async (args) => {
            process.exitCode = await runSimCoverage({ json: args.json });
          },
        ),
    )
    .command("hil", "a real badge on a USB serial port", (y) =>
      y
        .demandCommand(1, "name a hil command")
        .command(
          "ports",
          "list the serial ports the system sees (path, usb:<vid>:<pid>, serial:<serial number>, manufacturer)",
          (k) => k.option("json", { type: "boolean", default: false, describe: "print exactly one JSON object" }),
          async (args) => {
            process.exitCode = await runHilPorts({ json: args.json });
          },
        )
        .command(
          "monitor",
          "show a badge's console live (events decoded on a terminal), send typed lines as commands, save the transcript",
          (k) =>
            k
              .option("port", { type: "string", demandOption: true, describe: "a path, serial:<serial number> or usb:<vid>:<pid>" })
              .option("baud", { type: "number", describe: "baud rate (default 115200)" })
              .option("transcript", { type: "string", describe: "transcript file (default ./var/transcripts/<timestamp>.txt)" })
              .option("until", { type: "string", describe: "exit 0 once a received line matches this regex" })
              .option("timeout", { type: "number", describe: "ms; with --until exit 1 if nothing matched by then, else end the session then" })
              .option("json", { type: "boolean", default: false, describe: "one JSON object per line received, then one for the session" }),
          async (args) => {
            process.exitCode = await runHilMonitor({
              port: args.port,
              baudRate: args.baud,
              transcript: args.transcript,
              until: args.until,
              timeoutMs: args.timeout,
              json: args.json,
            });
          },
        )
        .command(
          "flash <files..>",
          "flash images over USB serial with esptool-js: FILE@OFFSET ..., or one app FILE (at 0x10000)",
          (k) =>
            k
              .positional("files", { type: "string", array: true, demandOption: true, describe: "FILE@OFFSET, e.g. bootloader.bin@0x1000 app.bin@0x10000" })
              .option("port", { type: "string", demandOption: true, describe: "a path, serial:<serial number> or usb:<vid>:<pid>" })
              .option("baud", { type: "number", describe: "transfer baud rate (default 921600)" })
              .option("json", { type: "boolean", default: false, describe: "print exactly one JSON object" }),
          async (args) => {
            process.exitCode = await runHilFlashCommand({
              port: args.port,
              files: args.files.map(String),
              baudRate: args.baud,
              json: args.json,
              progress: process.stderr.isTTY === true && !process.env.CI,
            });
          },
        )
        .command(
          "run <scenarios..>",
          "play scenario files (or directories of them) on the rig's real badge through its serial console; exit 1 when any fails",
          (k) =>
            k
              .positional("scenarios", { type: "string", array: true, demandOption: true, describe: "scenario files or directories, e.g. fixtures/scenarios" })
              .option("rig", { type: "string", demandOption: true, describe: "the rig file: port, power relay, server and device token (fixtures/rigs/)" })
              .option("port", { type: "string", describe: "a serial port path instead of the rig file's port" })
              .option("junit", { type: "string", describe: "write a JUnit XML report to this file" })
              .option("html", { type: "string", describe: "write a self-contained HTML report (summary, each scenario's timeline) to this file" })
              .option("json", { type: "boolean", default: false, describe: "print exactly one JSON object" }),
          async (args) => {
            process.exitCode = await runHilRun({
              files: args.scenarios.map(String),
              rig: args.rig,
              port: args.port,
              junit: args.junit,
              html: args.html,
              json: args.json,
              interactive: process.stderr.isTTY === true && !process.env.CI,
            });
          },
        ),
    )
    .help()
    .fail(cliFailure(argv, USER_ERRORS, errorBody));
}

/** Runs the command line on `argv` (the arguments after the program name). */
export async function runCli(argv: string[]): Promise<void> {
  await buildCli(argv).parseAsync();
}
