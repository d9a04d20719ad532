// How the command lines (cli.ts, serve-main.ts) end on a mistake: a usage mistake (exit 2) or an
// error the user can fix (exit 1) is one line, or one JSON object under --json; an unexpected
// error keeps its stack on stderr.
export type ErrorBody = { code: string; message: string; reasons?: unknown };

function report(argv: string[], body: ErrorBody, usage: boolean) {
  if (argv.includes("--json")) process.stdout.write(`${JSON.stringify({ error: body })}\n`);
  else process.stderr.write(`badgebench: ${body.message}\n${usage ? "run with --help for usage\n" : ""}`);
}

/** A usage mistake: one line naming it, exit 2. */
export function failUsage(argv: string[], message: string): never {
  report(argv, { code: "usage", message }, true);
  process.exit(2);
}

export function cliFailure(
  argv: string[],
  userErrors: (abstract new (...args: never[]) => Error)[],
  bodyOf: (error: Error) => ErrorBody,
  exitCodeOf: (error: Error) => number = () => 1,
) {
  return (message: string, error: Error | undefined): never => {
    if (!error) failUsage(argv, message);
    if (!userErrors.some((kind) => error instanceof kind)) throw error;
    report(argv, bodyOf(error), false);
    process.exit(exitCodeOf(error));
  };
}
