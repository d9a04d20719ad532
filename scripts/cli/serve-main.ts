// What `npm start` runs, built to dist/serve.js (`npm run build`, esbuild; `npm start` builds it
// first): `badgebench serve` alone, as plain JavaScript, so the production server loads neither
// the TypeScript loader nor the simulator, the rig and yargs the full command line carries (the
// idle RSS counts each of them). The options are the full command line's `serve` options.
import { parseArgs } from "node:util";
import { ListenError } from "../../server/main.ts";
import { DownloadLimitsError } from "../../server/services/load-shaping.ts";
import { StoreError, UnusableStoreError } from "../../server/store/database.ts";
import { WebhookConfigError } from "../../server/webhooks/webhook-config.ts";
import { EXIT } from "./exit-codes.ts";
import { cliFailure } from "./cli-failure.ts";
import { DatabaseSettingError, isSettingError, serve } from "./serve.ts";
import { SERVE_HELP, serveDefaults, SYNC_MODES, type ServeArgs } from "./serve-options.ts";

const USAGE = `usage: npm start -- [--port N] [--host H] [--data DIR] [--database URL] [--demo] [--sync ${SYNC_MODES.join("|")}]
  --port     ${SERVE_HELP.port}
  --host     ${SERVE_HELP.host}
  --data     ${SERVE_HELP.data}
  --database ${SERVE_HELP.database}
  --demo     ${SERVE_HELP.demo}
  --sync     ${SERVE_HELP.sync}
`;

class UsageError extends Error {}

function parseServeArgs(argv: string[]): ServeArgs | "help" {
  const defaults = serveDefaults();
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        port: { type: "string" },
        host: { type: "string", default: defaults.host },
        data: { type: "string" },
        database: { type: "string" },
        demo: { type: "boolean", default: false },
        sync: { type: "string", default: defaults.sync },
        help: { type: "boolean", default: false },
      },
    }));
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  if (values.help) return "help";
  const port = values.port === undefined ? defaults.port : Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new UsageError(`--port must be a whole number from 0 to 65535, got ${values.port}`);
  const sync = SYNC_MODES.find((mode) => mode === values.sync);
  if (!sync) throw new UsageError(`--sync must be one of ${SYNC_MODES.join(", ")}, got ${values.sync}`);
  return { port, host: values.host, data: values.data, database: values.database, demo: values.demo, sync };
}

const argv = process.argv.slice(2);
const fail = cliFailure(
  argv,
  [ListenError, WebhookConfigError, StoreError, DownloadLimitsError, DatabaseSettingError],
  (error) => ({
    code: error instanceof ListenError ? "listen_failed" : error instanceof UnusableStoreError ? "data_unusable" : error instanceof StoreError ? "database_error" : "invalid_request",
    message: error.message,
  }),
  (error) => (error instanceof UnusableStoreError || isSettingError(error) ? EXIT.usage : 1),
);
try {
  const args = parseServeArgs(argv);
  if (args === "help") process.stdout.write(USAGE);
  else await serve(args);
} catch (error) {
  if (error instanceof UsageError) fail(error.message, undefined);
  fail((error as Error).message, error as Error);
}
