// Scenario results as a JUnit XML report, the format CI systems (GitLab, Jenkins, GitHub
// actions that annotate tests) read: one <testsuite>, one <testcase> per scenario file, a
// <failure> listing expected vs observed, an <error> when a scenario could not be played, a
// <skipped> with the reason, and the badge's observation log as <system-out>. The shape is the
// one fixtures/junit/junit.xsd describes; the test suite validates reports against it.
import os from "node:os";
import type { ScenarioResult } from "../runners/scenario-runner.ts";
import type { Observation } from "../virtual-badge/observation-log.ts";

export interface JUnitOptions {
  suiteName: string;
  timestamp: Date;
}

export function toJUnitXml(results: ScenarioResult[], options: JUnitOptions): string {
  const count = (outcome: ScenarioResult["outcome"]) => results.filter((r) => r.outcome === outcome).length;
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
  for (const result of results) lines.push(...testcase(result));
  lines.push(`  </testsuite>`, `</testsuites>`, "");
  return lines.join("\n");
}

/**
 * One <testcase>: its outcome; for a retried one (hil run --retries) Surefire's elements that
 * Jenkins, GitLab and Maven's reporters read: a flaky one (passed on a retry) gets a
 * <flakyFailure> per failed try, a failed one its first try as <failure>/<error> and each
 * retry as <rerunFailure>/<rerunError>. The badge it ran on is a property; its attachments are
 * named in <system-out> as Jenkins' JUnit Attachments plugin reads them ([[ATTACHMENT|path]]).
 */
function testcase(result: ScenarioResult): string[] {
  const lines = [`    <testcase ${attributes({ name: result.name, classname: result.file, time: seconds(result.wallMs) })}>`];
  if (result.badge !== undefined) lines.push(`      <properties>`, `        <property ${attributes({ name: "badge", value: result.badge })}/>`, `      </properties>`);
  const reruns = result.reruns ?? [];
  if (result.outcome === "failed" || result.outcome === "error") {
    // Surefire: the first try is the <failure>, every later one a rerun
    const [first, ...later] = [...reruns, result];
    lines.push(problem(first!, ""));
    for (const rerun of later) lines.push(problem(rerun, "rerun"));
  } else if (result.outcome === "skipped") {
    lines.push(`      <skipped ${attributes({ message: result.message ?? "" })}/>`);
  } else {
    for (const rerun of reruns) lines.push(problem(rerun, "flaky"));
  }
  const out = [
    ...(result.observations.length > 0 ? [formatObservations(result.observations)] : []),
    ...(result.attachments ?? []).map((attachment) => `[[ATTACHMENT|${attachment.path}]]`),
  ];
  if (out.length > 0) lines.push(`      <system-out>${escape(out.join("\n"))}</system-out>`);
  lines.push(`    </testcase>`);
  return lines;
}

/** <failure>/<error>, or Surefire's <flakyFailure>/<rerunFailure> (and Error) for a try of a retried scenario. */
function problem(result: ScenarioResult, kind: "" | "rerun" | "flaky"): string {
  const failed = result.outcome === "failed";
  const element = kind === "" ? (failed ? "failure" : "error") : `${kind}${failed ? "Failure" : "Error"}`;
  const text = failureText(result);
  const type = failed ? "expectation" : "scenario_error";
  if (kind === "") return `      <${element} ${attributes({ message: text.replaceAll("\n", "; "), type })}>${escape(text)}</${element}>`;
  return `      <${element} ${attributes({ message: text.replaceAll("\n", "; "), type })}><stackTrace>${escape(text)}</stackTrace></${element}>`;
}

/** What went wrong in a failed or erred result: each failed check (expected vs observed), or the error's message. */
export function failureText(result: ScenarioResult): string {
  const failed = result.checks.filter((check) => !check.passed);
  if (failed.length === 0) return result.message ?? "";
  return failed.map((check) => `${check.field}: expected ${JSON.stringify(check.expected)}, observed ${JSON.stringify(check.observed)}`).join("\n");
}

const seconds = (ms: number) => (ms / 1000).toFixed(3);

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
