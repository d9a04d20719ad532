// "SQL only in store/" (DESIGN.md): no string or template outside server/store/ reads as SQL, and
// no Kysely `sql` template is written there either. Tests may speak SQL to a database they poke;
// the layers may not. The planted file under fixtures/layering-violation/ proves the check finds one.
import fs from "node:fs";
import path from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";
import { ROOT, sourceFiles } from "./source-tree.ts";

const SQL = /\b(SELECT\s[\s\S]*?\sFROM\s|INSERT\s+INTO\s|UPDATE\s+\w+\s+SET\s|DELETE\s+FROM\s|(CREATE|DROP)\s+DATABASE\s|CREATE\s+(UNIQUE\s+)?(TABLE|INDEX)\s|ALTER\s+TABLE\s|DROP\s+TABLE\s)/i;

/** The SQL-looking strings and `sql` templates in a TypeScript file, as "file:line". */
function sqlIn(file: string): string[] {
  const source = ts.createSourceFile(file, fs.readFileSync(path.join(ROOT, file), "utf8"), ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const at = (node: ts.Node) => `${file}:${source.getLineAndCharacterOfPosition(node.getStart()).line + 1}`;
  const visit = (node: ts.Node) => {
    if (ts.isTaggedTemplateExpression(node) && node.tag.getText() === "sql") found.push(at(node));
    else if ((ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) && SQL.test(node.text)) found.push(at(node));
    else if (ts.isTemplateExpression(node) && SQL.test([node.head.text, ...node.templateSpans.map((span) => span.literal.text)].join(" x "))) found.push(at(node));
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

describe("SQL lives in server/store/ only", () => {
  // Parses every source file outside the store: seconds on a busy 2-core machine.
  it("no layer outside it holds SQL", () => {
    const layers = /^(firmware|server|badge-sim|hil|scripts)\//;
    const files = sourceFiles().filter((file) => layers.test(file) && !file.startsWith("server/store/") && file.endsWith(".ts"));
    expect(files.flatMap(sqlIn)).toEqual([]);
  });

  it("finds the SQL planted in fixtures/layering-violation", () => {
    expect(sqlIn("fixtures/layering-violation/server/inline-sql.ts")).toEqual(["fixtures/layering-violation/server/inline-sql.ts:2"]);
  });
});
