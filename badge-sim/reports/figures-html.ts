// The fleet's and the sweep's figures as one self-contained HTML file each (`sim fleet --html`,
// `bench-sim-sweep.ts --html`): the verdict and the headline figures at the top, then what a
// person would rather look at than read, drawn by uPlot (html-page.ts inlines it).
import type { FleetSummary, LatencyStats, RequestKind } from "../runners/fleet.ts";
import { describeCase, type SweepResult } from "../runners/fault-sweep.ts";
import { html, reportPage, type Html } from "./html-page.ts";
import { counted } from "./text.ts";

const count = (n: number) => n.toLocaleString("en-US");
const ms = (n: number) => `${n < 10 ? n.toFixed(1) : Math.round(n).toLocaleString("en-US")} ms`;

/** A bar a cell wide, `share` of the widest; the number beside it says the value. */
const bar = (share: number) => html`<span class="bar" style="width: ${(Math.max(0, Math.min(1, share)) * 100).toFixed(1)}%"></span>`;

/** One moment of a fleet run, from its progress callback. */
export interface FleetSample {
  /** wall ms since the badges' clocks started */
  t: number;
  live: number;
  downloading: number;
  finished: number;
  rssMiB: number;
}

const REQUEST_KINDS: Record<RequestKind, string> = {
  check: "update check",
  sync: "check-in sync",
  downloadHead: "download, to the status line",
  download: "download, whole image",
};

function latencyTable(latency: Record<RequestKind, LatencyStats | null>): Html {
  const rows = (Object.keys(REQUEST_KINDS) as RequestKind[]).map((kind) => ({ kind, stats: latency[kind] }));
  const widest = Math.max(1, ...rows.map((r) => r.stats?.p99 ?? 0));
  return html`<table><thead><tr><th scope="col">Request</th><th scope="col">Count</th><th scope="col">p50</th><th scope="col">p90</th><th scope="col">p99</th><th scope="col">Max</th><th scope="col" class="bar-col">p99</th></tr></thead><tbody>${rows.map(({ kind, stats }) =>
    stats
      ? html`<tr><td>${REQUEST_KINDS[kind]}</td><td>${count(stats.count)}</td><td>${ms(stats.p50)}</td><td>${ms(stats.p90)}</td><td>${ms(stats.p99)}</td><td>${ms(stats.max)}</td><td>${bar(stats.p99 / widest)}</td></tr>`
      : html`<tr><td>${REQUEST_KINDS[kind]}</td><td>0</td><td colspan="5">none made</td></tr>`,
  )}</tbody></table>`;
}

export function fleetReportHtml(input: { summary: FleetSummary; samples: FleetSample[]; setup: string; generatedAt: Date }): string {
  const { summary } = input;
  const widest = Math.max(1, ...summary.outcomes.map((o) => o.count));
  const headline =
    `${counted(summary.badges, "badge", "badges", count)} (${count(summary.asked)} asked for the update): ${summary.crashed} crashed, ` +
    `${counted(summary.maxConcurrentDownloads, "download", "downloads", count)} at once, peak RSS ${count(Math.round(summary.peakRssBytes / 2 ** 20))} MiB, ${(summary.wallMs / 1000).toFixed(1)} s`;
  return reportPage({
    title: "badgebench fleet",
    verdict: summary.crashed > 0 ? "failed" : "passed",
    headline,
    meta: `${input.setup} · written ${input.generatedAt.toISOString()} · ${summary.threads} badge threads; latencies are wall ms as the badges saw them`,
    body: html`<section aria-labelledby="time-title"><h2 id="time-title">Over time</h2>
<p class="meta">Badges alive, downloads in flight and badges finished (left), the process's RSS (right), sampled every 100 ms.</p>
<div class="chart" id="fleet-chart"></div></section>
<section aria-labelledby="outcomes-title"><h2 id="outcomes-title">How each badge's run ended</h2>
<table class="outcomes"><thead><tr><th scope="col">Outcome</th><th scope="col">Reason</th><th scope="col">Badges</th><th scope="col" class="bar-col">Share</th></tr></thead><tbody>${summary.outcomes.map(
      (o) => html`<tr><td>${o.outcome}</td><td>${o.reason ?? ""}</td><td>${count(o.count)}</td><td>${bar(o.count / widest)}</td></tr>`,
    )}</tbody></table></section>
<section aria-labelledby="latency-title"><h2 id="latency-title">The server's latencies as the badges saw them</h2>
${latencyTable(summary.latencyMs)}
<p class="meta">Start lag (how late a badge began after its moment): ${summary.startLagMs ? `p50 ${ms(summary.startLagMs.p50)}, p99 ${ms(summary.startLagMs.p99)}` : "none"}.
Event-loop delay p99: badge threads ${ms(summary.eventLoopDelayMs.badges.p99)}, this thread ${ms(summary.eventLoopDelayMs.caller.p99)}.</p></section>`,
    data: input.samples,
    script: FLEET_SCRIPT,
    css: FIGURES_CSS,
  });
}

const FLEET_SCRIPT = `
(function () {
  var samples = JSON.parse(document.getElementById("chart-data").textContent);
  var el = document.getElementById("fleet-chart");
  var col = function (key, scale) { return samples.map(function (s) { return s[key] / (scale || 1); }); };
  new uPlot({
    width: Math.min(el.clientWidth, 1000), height: 280,
    scales: { x: { time: false }, n: { auto: true }, mib: { auto: true } },
    axes: [{ label: "wall time (s)" }, { scale: "n", label: "badges" }, { scale: "mib", label: "RSS (MiB)", side: 1, grid: { show: false } }],
    series: [
      { label: "time (s)" },
      { label: "alive", scale: "n", stroke: "#0969da", width: 2, points: { show: false } },
      { label: "downloading", scale: "n", stroke: "#cf222e", width: 2, points: { show: false } },
      { label: "finished", scale: "n", stroke: "#1a7f37", width: 2, points: { show: false } },
      { label: "RSS (MiB)", scale: "mib", stroke: "#8250df", width: 1, dash: [6, 4], points: { show: false } }
    ]
  }, [col("t", 1000), col("live"), col("downloading"), col("finished"), col("rssMiB")], el);
  el.setAttribute("data-drawn", "true");
})();
`;

/** One case of the sweep as the picture needs it. */
export interface SweepCaseFigure {
  result: SweepResult;
  /** wall ms the case took, device and release setup included */
  wallMs: number;
}

/** What the server ended up holding for a case, in a few words. */
function reportKind(report: string | null): string {
  if (report === null) return "no report";
  if (report.startsWith("ok|")) return "ok";
  // The kind of failure without its figures: the text before the first colon, numbers as N.
  const why = report.split("|").slice(2).join("|").split(":")[0]!;
  return `err: ${why.replace(/\b\d[\d,.]*/g, "N")}`;
}

export function sweepReportHtml(input: { cases: SweepCaseFigure[]; setup: string; wallS: number; generatedAt: Date }): string {
  const kinds = [...new Set(input.cases.map((c) => c.result.case.fault.kind))];
  const violations = input.cases.filter((c) => c.result.violations.length > 0);
  const perKind = kinds.map((kind) => {
    const cases = input.cases.filter((c) => c.result.case.fault.kind === kind);
    const times = cases.map((c) => c.wallMs).sort((a, b) => a - b);
    const reports = new Map<string, number>();
    for (const c of cases) reports.set(reportKind(c.result.observed.serverReport), (reports.get(reportKind(c.result.observed.serverReport)) ?? 0) + 1);
    return { kind, cases, median: times[Math.floor((times.length - 1) / 2)] ?? 0, max: times.at(-1) ?? 0, reports: [...reports].sort((a, b) => b[1] - a[1]) };
  });
  const data = {
    kinds,
    points: kinds.map((kind) => input.cases.map((c, i) => (c.result.case.fault.kind === kind ? [i + 1, c.wallMs] : null)).filter(Boolean)),
  };
  const totalViolations = violations.reduce((n, c) => n + c.result.violations.length, 0);
  return reportPage({
    title: "badgebench fault sweep",
    verdict: violations.length > 0 ? "failed" : "passed",
    headline: `${count(input.cases.length)} cases in ${input.wallS.toFixed(2)} s: ${totalViolations} invariant violations`,
    meta: `${input.setup} · written ${input.generatedAt.toISOString()}`,
    body: html`<section aria-labelledby="cases-title"><h2 id="cases-title">Each case's wall time, by fault</h2>
<p class="meta">A stall costs its timeout in real time; everything else runs on the simulated clock.</p>
<div class="chart" id="sweep-chart"></div></section>
<section aria-labelledby="kinds-title"><h2 id="kinds-title">Per fault</h2>
<table><thead><tr><th scope="col">Fault</th><th scope="col">Cases</th><th scope="col">Violations</th><th scope="col">Median</th><th scope="col">Max</th><th scope="col">What the server ended up holding</th></tr></thead><tbody>${perKind.map(
      (k) =>
        html`<tr class="${k.cases.some((c) => c.result.violations.length > 0) ? "bad" : ""}"><td>${k.kind}</td><td>${k.cases.length}</td><td>${k.cases.reduce((n, c) => n + c.result.violations.length, 0)}</td><td>${ms(k.median)}</td><td>${ms(k.max)}</td><td>${k.reports.map(
          ([kind, n], i) => html`${i > 0 ? "; " : ""}${kind} × ${n}`,
        )}</td></tr>`,
    )}</tbody></table></section>
<section aria-labelledby="violations-title"><h2 id="violations-title">Invariant violations</h2>
${
  violations.length === 0
    ? html`<p>None: every case kept every invariant.</p>`
    : html`<table><thead><tr><th scope="col">Case</th><th scope="col">Violations</th></tr></thead><tbody>${violations.map(
        (c) => html`<tr class="bad"><td>${describeCase(c.result.case)}</td><td>${c.result.violations.map((v) => html`<div>${v}</div>`)}</td></tr>`,
      )}</tbody></table>`
}</section>`,
    data,
    script: SWEEP_SCRIPT,
    css: FIGURES_CSS,
  });
}

const SWEEP_SCRIPT = `
(function () {
  var data = JSON.parse(document.getElementById("chart-data").textContent);
  var el = document.getElementById("sweep-chart");
  var colours = ["#0969da", "#cf222e", "#1a7f37", "#8250df", "#9a6700", "#bf3989", "#57606a", "#1b7c83", "#fb8500"];
  var n = data.points.reduce(function (max, pts) { return pts.reduce(function (m, p) { return Math.max(m, p[0]); }, max); }, 0);
  var xs = []; for (var i = 1; i <= n; i++) xs.push(i);
  var columns = data.points.map(function (pts) {
    var col = xs.map(function () { return null; });
    pts.forEach(function (p) { col[p[0] - 1] = p[1]; });
    return col;
  });
  new uPlot({
    width: Math.min(el.clientWidth, 1000), height: 300,
    scales: { x: { time: false }, y: { distr: 3 } },
    axes: [{ label: "case", incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500] }, { label: "wall ms (log)" }],
    series: [{ label: "case" }].concat(data.kinds.map(function (kind, i) {
      return { label: kind, stroke: colours[i % colours.length], paths: function () { return null; }, points: { show: true, size: 5, fill: colours[i % colours.length] } };
    }))
  }, [xs].concat(columns), el);
  el.setAttribute("data-drawn", "true");
})();
`;

const FIGURES_CSS = `
.chart { margin: 0.5rem 0; }
.bar-col { width: 30%; }
.bar { display: inline-block; height: 0.8rem; background: #0969da; border-radius: 2px; vertical-align: middle; min-width: 1px; }
`;
