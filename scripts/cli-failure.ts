// How the command lines (cli.ts, serve-main.ts) end on a mistake: a usage mistake (exit 2) or an
// error the user can fix (exit 1) is one line, or one JSON object under --json; an unexpected
// error keeps its stack on stderr.
export type ErrorBody = { code: string; message: string; reasons?: unknown };

export function cliFailure(argv: string[], userErrors: (abstract new (...args: never[]) => Error)[], bodyOf: (error: Error) => ErrorBody) {
  return (message: string, error: Error | undefined): never => {
    if (error && !userErrors.some((kind) => error instanceof kind)) throw error;
    const body = error ? bodyOf(error) : { code: "usage", message };
    if (argv.includes("--json")) process.stdout.write(`${JSON.stringify({ error: body })}\n`);
    else process.stderr.write(`badgebench: ${body.message}\n${error ? "" : "run with --help for usage\n"}`);
    process.exit(error ? 1 : 2);
  };
}
