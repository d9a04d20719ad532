// `webhooks listen`: a local receiver of webhook deliveries.
import type { Argv } from "yargs";

export function webhooksCommands(y: Argv): Argv {
  return y
    .command("webhooks", "receive webhooks locally", (y) =>
      y.demandCommand(1, "name a webhooks command").command(
        "listen",
        "a local receiver: verifies each delivery's signature, answers like SPEC 5 says, prints each event on one line",
        (k) =>
          k
            .option("port", { type: "number", demandOption: true, describe: "port to listen on (0 picks a free one)" })
            .option("host", { type: "string", default: "127.0.0.1", describe: "address to listen on (0.0.0.0 for every interface)" })
            .option("secret", { type: "string", array: true, demandOption: true, describe: "the endpoint's signing secret whsec_...; give it twice while a secret is rolled" })
            .option("forward-to", { type: "string", describe: "after acknowledging, POST each new delivery unchanged to this URL" })
            .option("json", { type: "boolean", default: false, describe: "print each event as one JSON object per line" }),
        async (args) => {
          const [{ ListenError }, { startListener }] = await Promise.all([import("../../../server/main.ts"), import("../webhooks-listen.ts")]);
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
    );
}
