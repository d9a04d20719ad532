// `hil ports|monitor|flash|run`: a real badge (or the simulated one) on a serial port.
import type { Argv } from "yargs";

export function hilCommands(y: Argv): Argv {
  return y
    .command("hil", "a real badge on a USB serial port", (y) =>
      y
        .demandCommand(1, "name a hil command")
        .command(
          "ports",
          "list the serial ports the system sees (path, usb:<vid>:<pid>, serial:<serial number>, manufacturer)",
          (k) => k.option("json", { type: "boolean", default: false, describe: "print exactly one JSON object" }),
          async (args) => {
            const { runHilPorts } = await import("../hil-console.ts");
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
            const { runHilMonitor } = await import("../hil-console.ts");
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
            const { runHilFlashCommand } = await import("../hil-console.ts");
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
          "play scenario files (or directories of them) on the rig's badge (or, with --parallel, badges) through the serial console; exit 0 passed (flaky ones too: the reports say flaky), 1 failed, 2 bad input, 3 server unreachable, 4 a badge in use, 5 nothing ran",
          (k) =>
            k
              .positional("scenarios", { type: "string", array: true, demandOption: true, describe: "scenario files or directories, e.g. fixtures/scenarios" })
              .option("rig", { type: "string", demandOption: true, describe: "the rig file: badge (real or simulated), port, power relay, server and device token (fixtures/rigs/)" })
              .option("port", { type: "string", describe: "a serial port path instead of the rig file's port" })
              .option("junit", { type: "string", describe: "write a JUnit XML report to this file" })
              .option("html", { type: "string", describe: "write a self-contained HTML report (summary, each scenario's timeline) to this file" })
              .option("json", { type: "boolean", default: false, describe: "print exactly one JSON object" })
              .option("parallel", { type: "boolean", default: false, describe: "spread the scenarios over every badge the rig file names (a farm)" })
              .option("wait", { type: "number", default: 0, describe: "seconds to wait for a badge another run holds (0: fail at once, saying who holds it)" })
              .option("retries", { type: "number", default: 0, describe: "play a failed scenario again up to N times; one that then passes is reported flaky" }),
          async (args) => {
            const { runHilRun } = await import("../hil-run.ts");
            process.exitCode = await runHilRun({
              files: args.scenarios.map(String),
              rig: args.rig,
              port: args.port,
              junit: args.junit,
              html: args.html,
              json: args.json,
              interactive: process.stderr.isTTY === true && !process.env.CI,
              parallel: args.parallel,
              waitS: args.wait,
              retries: args.retries,
            });
          },
        ),
    );
}
