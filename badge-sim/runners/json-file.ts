// Reading the JSON files people write by hand (scenario files here, rig files in hil/): every
// error names the file (with the line and column of a JSON mistake), and a file that does not match its schema gets one line per field that
// is wrong, saying what was expected. An unknown key is named as a field of its own.
import fs from "node:fs";
import path from "node:path";
import { parse, type ParseError } from "jsonc-parser";
import { z } from "zod";

/** The file's JSON, or `fail(message)` thrown when it cannot be read or is not JSON. */
export function readJsonFile(file: string, fail: (message: string) => Error): unknown {
  let text: string;
  try {
    text = fs.readFileSync(file, "utf8");
  } catch (error) {
    throw fail(`${file}: cannot read: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
  }
  try {
    return JSON.parse(text) as unknown;
  } catch (error) {
    // JSON.parse names a position for some mistakes and none for others ("Unexpected token");
    // jsonc-parser, strict, finds where every one of them is.
    const errors: ParseError[] = [];
    parse(text, errors, { disallowComments: true, allowTrailingComma: false, allowEmptyContent: false });
    const what = (error as Error).message.replace(/ in JSON at position \d+.*$|, (\.\.\.)?".*" is not valid JSON$/s, "");
    throw fail(`${file}:${lineAndColumn(text, errors[0]?.offset ?? text.length)}: not JSON: ${what}`);
  }
}

/** `LINE:COLUMN`, both counted from 1, of a character offset. */
function lineAndColumn(text: string, offset: number): string {
  const before = text.slice(0, offset).split("\n");
  return `${before.length}:${before.at(-1)!.length + 1}`;
}

/** The name a file goes by in messages: relative to the working directory when inside it. */
export const displayName = (file: string) => path.relative(process.cwd(), file) || file;

/** `  badge.version: expected three dotted numbers`, one line per problem. */
export function describeIssues(error: z.ZodError): string[] {
  return error.issues.flatMap((issue) =>
    issue.code === "unrecognized_keys"
      ? issue.keys.map((key) => `  ${fieldOf([...issue.path, key])}: unknown field`)
      : [`  ${fieldOf(issue.path)}: ${issue.message}`],
  );
}

const fieldOf = (issuePath: PropertyKey[]) => z.core.toDotPath(issuePath) || "(the file)";
