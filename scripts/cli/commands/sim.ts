// `sim run|serial|fleet|coverage`: simulated badges.
import type { Argv } from "yargs";

/**
 * --key, --room and --timeout-ms for a run against a running server. Their defaults are named here
 * rather than imported: their modules load the simulator and the server, which --help does not
 * need (cli-help.test.ts checks they agree); `remoteServerArgs` fills them in when a command runs.
 */
const remoteServerOptions = <T>(k: Argv<T>) =>
  k
    .option("key", { type: "string", describe: "with --server: a test-mode API key with devices:write and releases:read (default: $BADGEBENCH_API_KEY)" })
    .option("room", { type: "string", defaultDescription: "SIM", describe: "with --server: the test-mode room the simulated badges hang in" })
    .option("timeout-ms", { type: "number", defaultDescription: "10000", describe: "with --server: wall ms to wait for each of its answers" });

async function remoteServerArgs(args: { key?: string; room?: string; timeoutMs?: number }) {
  const [{ SIM_ROOM }, { DEFAULT_SERVER_TIMEOUT_MS }] = await Promise.all([import("../../harness/sim-server.ts"), import("../../harness/remote-server.ts")]);
  return { key: args.key ?? process.env.BADGEBENCH_API_KEY, room: args.room ?? SIM_ROOM, timeoutMs: args.timeoutMs ?? DEFAULT_SERVER_TIMEOUT_MS };
}

export function simCommands(y: Argv): Argv {
  return y
    .command("sim", "run simulated badges against the server", (y) =>
      y
        .demandCommand(1, "name a sim command")
        .command(
          "run <files..>",
          "play scenario files (or directories of them) on virtual badges; exit 0 passed, 1 failed, 2 usage, 3 server unreachable, 5 nothing ran",
          // --stall-timeout's default is named here rather than imported, as remoteServerOptions' are.
          (k) =>
            remoteServerOptions(k)
              .positional("files", { type: "string", array: true, demandOption: true, describe: "scenario files or directories, e.g. fixtures/scenarios" })
              .option("server", { type: "string", describe: "a running server's URL, set up through its API (default: a server in this process per scenario)" })
              .option("junit", { type: "string", describe: "write a JUnit XML report to this file" })
              .option("html", { type: "string", describe: "write a self-contained HTML report (summary, each scenario's timeline) to this file" })
              .option("json", { type: "boolean", default: false, describe: "print exactly one JSON object" })
              .option("stall-timeout", { type: "number", defaultDescription: "500", describe: "wall ms a badge waits on a silent download" }),
          async (args) => {
            const { runSimRun } = await import("../sim-run.ts");
            process.exitCode = await runSimRun({
              files: args.files,
              server: args.server,
              ...(await remoteServerArgs(args)),
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
            const { runSimSerial } = await import("../sim-serial.ts");
            process.exitCode = await runSimSerial({ port: args.port, serverUrl: args.server, token: args.token, version: args.version });
          },
        )
        .command(
          "fleet",
          "many virtual badges checking in against one server; a table of outcomes and the server's latencies; exit 0 passed, 1 a badge crashed, 2 usage, 3 server unreachable",
          (k) =>
            remoteServerOptions(k)
              .option("badges", { type: "number", demandOption: true, describe: "how many badges" })
              .option("downloading", { type: "number", describe: "badges whose wearer asks for the update (default: a tenth)" })
              .option("server", { type: "string", describe: "a running server's URL, set up through its API (default: a server in this process)" })
              .option("image-size", { type: "number", describe: "bytes of the release image, in-process server only (default 262144)" })
              .option("spread-ms", { type: "number", describe: "wall ms over which the badges boot (default 10 per badge)" })
              .option("seed", { type: "number", describe: "seed of the schedule, so a run repeats" })
              .option("json", { type: "boolean", default: false, describe: "print exactly one JSON object" })
              .option("html", { type: "string", describe: "write the figures as a self-contained HTML picture to this file" }),
          async (args) => {
            const { runSimFleet } = await import("../sim-fleet.ts");
            process.exitCode = await runSimFleet({
              badges: args.badges,
              downloading: args.downloading,
              server: args.server,
              ...(await remoteServerArgs(args)),
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
            const { runSimCoverage } = await import("../sim-coverage.ts");
            process.exitCode = await runSimCoverage({ json: args.json });
          },
        ),
    );
}
