// Files and functions small enough to read: no source file over 500 lines and no function over
// 120, unless the README that owns the file says why (a line naming the file, or the function as
// `file.ts: name`, with "over 500 lines" or "over 120 lines"), as for a statechart or a
// migration list, which are declarative tables. A test file's describe blocks are lists of tests,
// not functions, and are not counted.
import fs from "node:fs";
import path from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";
import { lineCount, owningReadme, ROOT, sourceFiles } from "./source-tree.ts";

const MAX_FILE_LINES = 500;
const MAX_FUNCTION_LINES = 120;

function explained(readme: string, name: string, limit: "over 500 lines" | "over 120 lines"): boolean {
  return fs
    .readFileSync(path.join(ROOT, readme), "utf8")
    .split("\n")
    .some((line) => line.includes(name) && line.includes(limit));
}

/** Every function-like node of `file` longer than the limit, as "file.ts: name (N lines)". */
function longFunctions(file: string): { name: string; lines: number }[] {
  const source = ts.createSourceFile(file, fs.readFileSync(path.join(ROOT, file), "utf8"), ts.ScriptTarget.Latest, true);
  const found: { name: string; lines: number }[] = [];
  const visit = (node: ts.Node) => {
    if (ts.isFunctionLike(node) && "body" in node && node.body && !isDescribeBlock(node)) {
      const lines = source.getLineAndCharacterOfPosition(node.getEnd()).line - source.getLineAndCharacterOfPosition(node.getStart()).line + 1;
      if (lines > MAX_FUNCTION_LINES) found.push({ name: functionName(node), lines });
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

/** A test file's `describe(name, () => {...})` groups tests; it is a list, not a function doing a job. */
function isDescribeBlock(node: ts.Node): boolean {
  const call = node.parent;
  return ts.isCallExpression(call) && /^describe\b/.test(call.expression.getText());
}

function functionName(node: ts.Node): string {
  const named = node as { name?: ts.Node };
  if (named.name) return named.name.getText();
  const parent = node.parent;
  if (ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent)) return parent.name.getText();
  return `<anonymous at line ${node.getSourceFile().getLineAndCharacterOfPosition(node.getStart()).line + 1}>`;
}

describe("sizes", () => {
  const files = sourceFiles();

  it(`no source file is over ${MAX_FILE_LINES} lines unless its README says why`, () => {
    const long = files
      .filter((file) => lineCount(file) > MAX_FILE_LINES)
      .filter((file) => !explained(owningReadme(file), path.posix.basename(file), "over 500 lines"))
      .map((file) => `${file}: ${lineCount(file)} lines`);
    expect(long).toEqual([]);
  });

  // Parsing every source file takes about 5 s on an idle 2-core machine: a busy one needs more.
  it(`no function is over ${MAX_FUNCTION_LINES} lines unless its README says why`, () => {
    const long = files
      .filter((file) => /\.ts$/.test(file))
      .flatMap((file) =>
        longFunctions(file)
          .filter(({ name }) => !explained(owningReadme(file), `${path.posix.basename(file)}: ${name}`, "over 120 lines"))
          .map(({ name, lines }) => `${file}: ${name} (${lines} lines)`),
      );
    expect(long).toEqual([]);
  });
});
