// Scenario results as a JUnit XML report, the format CI systems (GitLab, Jenkins, GitHub
// actions that annotate tests) read: one <testsuite>, one <testcase> per scenario file, a
// <failure> listing expected vs observed, an <error> when a scenario could not be played, a
// <skipped> with the reason, and the badge's observation log as <system-out>. The shape is the
// one fixtures/junit/junit.xsd describes; the test suite validates reports against it.
import os from "node:os";
import type { ScenarioResult } from "./scenario-runner.ts";
import type { Observation } from "./virtual-badge.ts";

export interface JUnitOptions {
  suiteName: string;
  timestamp: Date;
}

export function toJUnitXml(results: ScenarioResult[], options: JUnitOptions): string {
  const count = (outcome: ScenarioResult["outcome"]) => results.filter((r) => r.outcome === outcome).length;
  const seconds = (ms: number) => (ms / 1000).toFixed(3);
  const totalMs = results.reduce((sum, r) => sum + r.wallMs, 0);
  const suite = {
    name: options.suiteName,
    tests: results.length,
    failures: count("failed"),
    errors: count("error"),
    skipped: count("skipped"),
    time: seconds(totalMs),
    timestamp: options.timestamp.toISOString().replace(/\.\d+Z$/, ""),
    hostname: os.hostname(),
  };
  const lines = [`<?xml version="1.0" encoding="UTF-8"?>`, `<testsuites ${attributes({ name: suite.name, tests: suite.tests, failures: suite.failures, errors: suite.errors, skipped: suite.skipped, time: suite.time })}>`];
  lines.push(`  <testsuite ${attributes(suite)}>`);
  for (const result of results) {
    lines.push(`    <testcase ${attributes({ name: result.name, classname: result.file, time: seconds(result.wallMs) })}>`);
    if (result.outcome === "failed") {
      const failed = result.checks.filter((check) => !check.passed);
      const message = failed.map((check) => `${check.field}: expected ${JSON.stringify(check.expected)}, observed ${JSON.stringify(check.observed)}`);
      lines.push(`      <failure ${attributes({ message: message.join("; "), type: "expectation" })}>${escape(message.join("\n"))}</failure>`);
    } else if (result.outcome === "error") {
      lines.push(`      <error ${attributes({ message: result.message ?? "", type: "scenario_error" })}>${escape(result.message ?? "")}</error>`);
    } else if (result.outcome === "skipped") {
      lines.push(`      <skipped ${attributes({ message: result.message ?? "" })}/>`);
    }
    if (result.observations.length > 0) lines.push(`      <system-out>${escape(formatObservations(result.observations))}</system-out>`);
    lines.push(`    </testcase>`);
  }
  lines.push(`  </testsuite>`, `</testsuites>`, "");
  return lines.join("\n");
}

/** The observation log, one line each: `   12.345 s  state       online.checking`. */
export function formatObservations(observations: Observation[]): string {
  return observations.map((o) => `${(o.t / 1000).toFixed(3).padStart(9)} s  ${o.kind.padEnd(14)}${o.detail.replaceAll("\n", " / ")}`).join("\n");
}

function attributes(values: Record<string, string | number>): string {
  return Object.entries(values)
    .map(([name, value]) => `${name}="${escape(String(value)).replaceAll('"', "&quot;").replaceAll("\n", "&#10;")}"`)
    .join(" ");
}

/** Escapes markup and drops what XML 1.0 cannot hold at all (most control characters, lone surrogates). */
function escape(value: string): string {
  return value
    .replace(/[^\t\n\r\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]/gu, "\uFFFD")
    .replaceAll("&", "&amp;")
    .replaceAll("<", "&lt;")
    .replaceAll(">", "&gt;");
}
