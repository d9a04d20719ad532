// JUnit reports (`sim run --junit`, `hil run --junit`) checked against fixtures/junit/junit.xsd
// with xmllint, as CI's report readers would take them.
import { spawnSync } from "node:child_process";
import path from "node:path";
import { ROOT } from "../server/cli-process.ts";

const XSD = path.join(ROOT, "fixtures/junit/junit.xsd");

/** xmllint's verdict on a JUnit report: null when it validates, else what it said. */
export function junitProblems(file: string): string | null {
  const result = spawnSync("xmllint", ["--noout", "--schema", XSD, file], { encoding: "utf8" });
  if (result.error) throw new Error(`xmllint is needed to validate JUnit reports (apt-get install libxml2-utils): ${result.error.message}`);
  return result.status === 0 ? null : result.stderr;
}
