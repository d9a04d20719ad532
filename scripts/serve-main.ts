// What `npm start` runs, built to dist/serve.js (`npm run build`, esbuild; `npm start` builds it
// first): `badgebench serve` alone, as plain JavaScript, so the production server loads neither
// the TypeScript loader nor the simulator and rig the full command line carries.
import yargs from "yargs";
import { ListenError } from "../server/main.ts";
import { cliFailure } from "./cli-failure.ts";
import { serve, serveOptions } from "./serve.ts";

const argv = process.argv.slice(2);
await yargs(argv)
  .scriptName("badgebench serve")
  .version(false)
  .strict()
  .command("$0", "start the server", serveOptions, (args) => serve(args))
  .help()
  .fail(cliFailure(argv, [ListenError], (error) => ({ code: "listen_failed", message: error.message })))
  .parseAsync();
