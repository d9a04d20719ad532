// `openapi`: writes the OpenAPI 3.1 document of /v1 (what GET /v1/openapi.json serves) to a file
// or stdout, for integrators and client generators, without a running server.
import type { Argv } from "yargs";
import { EXIT } from "../exit-codes.ts";

export function openapiCommands(y: Argv): Argv {
  return y.command(
    "openapi",
    "write the OpenAPI 3.1 document of the /v1 API (what GET /v1/openapi.json serves)",
    (k) => k.option("out", { type: "string", describe: "file to write (default: print to stdout)" }),
    async (args) => {
      const [fs, { openApiDocument }] = await Promise.all([import("node:fs"), import("../../../server/openapi/openapi-document.ts")]);
      const text = `${JSON.stringify(openApiDocument(), null, 2)}\n`;
      if (args.out === undefined) return void process.stdout.write(text);
      try {
        fs.writeFileSync(args.out, text);
      } catch (error) {
        process.stderr.write(`error: cannot write --out ${args.out}: ${(error as Error).message}; name a file in a folder that exists\n`);
        process.exitCode = EXIT.usage;
        return;
      }
      process.stderr.write(`wrote ${args.out}\n`);
    },
  );
}
