// The badgebench command line. Thin: it parses arguments and calls the modules; each command
// group lives in commands/. Every admin command takes --data and --json; with --json it prints
// exactly one JSON object. It runs from its bundle (build-cli.js), where each handler imports
// what it runs when it runs: --help and the option tables load no server, simulator or rig.
import yargs from "yargs";
import { cliFailure, failUsage } from "./cli-failure.ts";
import { devicesCommands } from "./commands/devices.ts";
import { hilCommands } from "./commands/hil.ts";
import { keysCommands } from "./commands/keys.ts";
import { openapiCommands } from "./commands/openapi.ts";
import { releaseCommands } from "./commands/releases.ts";
import { schoolCommands } from "./commands/school.ts";
import { simCommands } from "./commands/sim.ts";
import { webhooksCommands } from "./commands/webhooks.ts";
import { serveOptions } from "./serve-options.ts";

export function buildCli(argv: string[]) {
  let cli = yargs(argv)
    .scriptName("badgebench")
    .version(false)
    .strict()
    .demandCommand(1, "name a command")
    .command("serve", "start the server", serveOptions, async (args) => (await import("./serve.ts")).serve(args));
  for (const addCommands of [webhooksCommands, keysCommands, schoolCommands, releaseCommands, devicesCommands, simCommands, hilCommands, openapiCommands]) cli = addCommands(cli);
  return cli.help().fail((message: string, error: Error | undefined) => {
    if (error) throw error;
    failUsage(argv, message);
  });
}

/** Runs the command line on `argv` (the arguments after the program name). */
export async function runCli(argv: string[]): Promise<void> {
  try {
    await buildCli(argv).parseAsync();
  } catch (error) {
    const { USER_ERRORS, errorBody, exitCodeOf } = await import("./user-errors.ts");
    cliFailure(argv, USER_ERRORS, errorBody, exitCodeOf)((error as Error).message, error as Error);
  }
}
