// One self-contained HTML file for a run of scenarios (`sim run --html`, `hil run --html`): a
// summary at the top (pass or fail, expected against observed for every failed check), then per
// scenario a timeline built from the badge's observation log: the states as a band, the
// download's bytes and the battery's volts over badge time (uPlot, inlined), the faults marked
// where they struck, the screens and the report sent. Everything from a scenario or a badge is
// escaped (html-page.ts: the template tag, the JSON in a script, uPlot inlined).
import { FaultBook } from "../network/fault-proxy/fault-book.ts";
import type { Fault } from "../network/fault-proxy/faults.ts";
import type { Scenario } from "../runners/scenario.ts";
import type { ScenarioOutcome, ScenarioResult } from "../runners/scenario-runner.ts";
import type { Observation } from "../virtual-badge/observation-log.ts";
import { html, Html, reportPage, verdictBadge, type Verdict } from "./html-page.ts";
import { failureText } from "./junit.ts";
import { isFlaky } from "../runners/flaky.ts";
import { pathToFileURL } from "node:url";
import { counted } from "./text.ts";

// ---- the timeline of one scenario, from its observations ----

export interface Timeline {
  durationMs: number;
  /** the state entered at each time; each lasts until the next */
  states: { t: number; state: string }[];
  /** image bytes written; null between downloads */
  download: [number, number | null][];
  battery: [number, number][];
  faults: { t: number; label: string }[];
  /** what a person reads: inputs, states, screens, power, boots, requests, answers, reports, taps */
  events: Observation[];
}

const CHARTED = new Set(["download", "battery", "flash.erase", "flash.write"]);

function describeNetworkFault(fault: Fault): string {
  const at = "atByte" in fault && fault.atByte !== undefined ? ` at byte ${fault.atByte}` : "";
  switch (fault.kind) {
    case "drop":
      return `connection dropped${at}`;
    case "stall":
      return `download stalled${at}`;
    case "corrupt":
      return `byte flipped${at}`;
    case "status":
      return `HTTP ${fault.code} injected`;
    case "throttle":
      return `throttled to ${fault.bytesPerSecond} B/s`;
    case "mitm":
      return `check answered by a man in the middle${fault.atByte === undefined ? "" : `, image tampered${at} with its MD5 recomputed`}`;
    case "range":
      return fault.mode === "ignore" ? "proxy ignores Range" : fault.mode === "shift" ? "resume answered at the wrong offset" : "resume answered 416";
  }
}

/**
 * Where the scenario's network faults struck: at the answer to each request they applied to,
 * chosen by the fault proxy's own FaultBook replayed over the requests the badge made.
 */
function networkFaultMarks(observations: Observation[], faults: Fault[]): { t: number; label: string }[] {
  const book = new FaultBook(faults);
  const marks: { t: number; label: string }[] = [];
  let struck: Fault[] = [];
  for (const o of observations) {
    if (o.kind === "request") struck = book.select(o.detail.replace(/^\S+ /, ""));
    else if (o.kind === "answer") {
      marks.push(...struck.map((fault) => ({ t: o.t, label: describeNetworkFault(fault) })));
      struck = [];
    }
  }
  return marks;
}

export function timelineOf(result: ScenarioResult, scenario: Scenario | undefined): Timeline {
  const observations = result.observations;
  const durationMs = Math.max(result.simulatedMs, observations.at(-1)?.t ?? 0, 1);
  const states: Timeline["states"] = [];
  const download: Timeline["download"] = [];
  const battery: Timeline["battery"] = [];
  const faults: Timeline["faults"] = [];
  let downloading = false;
  for (const o of observations) {
    switch (o.kind) {
      case "state":
        states.push({ t: o.t, state: o.detail });
        break;
      case "download": {
        const bytes = Number(/^(\d+) of/.exec(o.detail)?.[1]);
        if (!Number.isFinite(bytes)) break;
        // A new download starts from 0; a gap before it separates it from the last one.
        if (bytes === 0 && downloading) download.push([o.t, null]);
        download.push([o.t, bytes]);
        downloading = true;
        break;
      }
      case "battery": {
        const volts = Number.parseFloat(o.detail);
        if (Number.isFinite(volts)) battery.push([o.t, volts]);
        break;
      }
      case "power":
        if (/^(lost|relay off)/.test(o.detail)) faults.push({ t: o.t, label: `power ${o.detail}` });
        break;
    }
    // The download ends when the badge leaves online.downloading (done, cut, or its power died):
    // the line stops at the last bytes it had.
    if (o.kind === "state" && o.detail !== "online.downloading" && downloading) {
      download.push([o.t, null]);
      downloading = false;
    }
  }
  faults.push(...networkFaultMarks(observations, scenario?.faults.network ?? []));
  faults.sort((a, b) => a.t - b.t);
  return { durationMs, states, download, battery, faults, events: observations.filter((o) => !CHARTED.has(o.kind)) };
}

// ---- the page ----

const seconds = (ms: number) => `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
const valueText = (value: unknown) => (value === undefined ? "(nothing)" : typeof value === "string" ? value : JSON.stringify(value));

function checksTable(result: ScenarioResult, onlyFailed: boolean): Html {
  const checks = onlyFailed ? result.checks.filter((c) => !c.passed) : result.checks;
  if (checks.length === 0) return html``;
  return html`<table class="checks">
<thead><tr><th scope="col">Check</th><th scope="col">Expected</th><th scope="col">Observed</th><th scope="col">Result</th></tr></thead>
<tbody>${checks.map(
    (c) =>
      html`<tr class="${c.passed ? "ok" : "bad"}"><td>${c.field}</td><td><code>${valueText(c.expected)}</code></td><td><code>${valueText(c.observed)}</code></td><td>${verdictBadge(c.passed ? "passed" : "failed")}</td></tr>`,
  )}</tbody></table>`;
}

/** The states as a band: each segment's width is its share of the scenario's badge time. */
function stateBand(timeline: Timeline): Html {
  if (timeline.states.length === 0) return html``;
  const segments = timeline.states.map((s, i) => {
    const end = timeline.states[i + 1]?.t ?? timeline.durationMs;
    const share = Math.max(0, ((end - s.t) / timeline.durationMs) * 100);
    const family = s.state.split(".")[0]!.replace(/[^a-zA-Z]/g, "");
    return html`<div class="segment state-${family}" style="flex-basis: ${share.toFixed(3)}%" title="${s.state} at ${seconds(s.t)} for ${seconds(end - s.t)}"><span>${s.state}</span></div>`;
  });
  return html`<div class="band" role="img" aria-label="States over time: ${timeline.states.map((s) => s.state).join(", ")}">${segments}</div>`;
}

const EVENT_LABELS: Record<string, string> = {
  input: "wearer / world",
  state: "state",
  screen: "screen",
  power: "power",
  boot: "boot",
  request: "request",
  answer: "answer",
  "report.stored": "report stored",
  "report.sent": "report sent",
  "report.cleared": "report cleared",
  "tap.queued": "tap queued",
  "tap.sent": "tap sent",
  "tap.cleared": "tap answered",
  "token.cleared": "token cleared",
};

function eventsTable(timeline: Timeline): Html {
  if (timeline.events.length === 0) return html`<p>The badge observed nothing.</p>`;
  const faultTimes = new Set(timeline.faults.map((f) => f.t));
  return html`<details><summary>Everything the badge did (${counted(timeline.events.length, "event")})</summary>
<table class="events"><thead><tr><th scope="col">Badge time</th><th scope="col">What</th><th scope="col">Detail</th></tr></thead><tbody>${timeline.events.map(
    (e) =>
      html`<tr class="kind-${e.kind.replace(".", "-")}${faultTimes.has(e.t) && (e.kind === "power" || e.kind === "answer") ? " fault" : ""}"><td>${seconds(e.t)}</td><td>${EVENT_LABELS[e.kind] ?? e.kind}</td><td>${e.kind === "screen" ? html`<pre>${e.detail}</pre>` : e.detail}</td></tr>`,
  )}</tbody></table></details>`;
}

/**
 * The screens shown, in order; a run of screens with the same first line (a download's progress)
 * shows as its first and last, with how many came between.
 */
function screensList(timeline: Timeline): Html {
  const screens = timeline.events.filter((e) => e.kind === "screen" && e.detail !== "");
  if (screens.length === 0) return html``;
  const firstLine = (text: string) => text.split("\n")[0];
  const runs: Observation[][] = [];
  for (const screen of screens) {
    const run = runs.at(-1);
    if (run && firstLine(run[0]!.detail) === firstLine(screen.detail)) run.push(screen);
    else runs.push([screen]);
  }
  const item = (s: Observation) => html`<li><span class="t">${seconds(s.t)}</span><pre>${s.detail}</pre></li>`;
  return html`<h4>Screens</h4><ol class="screens">${runs.map((run) =>
    run.length <= 2 ? run.map(item) : [item(run[0]!), html`<li class="more">… ${run.length - 2} more like these</li>`, item(run.at(-1)!)],
  )}</ol>`;
}

function scenarioSection(result: ScenarioResult, index: number, timeline: Timeline, scenario: Scenario | undefined): Html {
  const reports = timeline.events.filter((e) => e.kind === "report.sent").map((e) => e.detail);
  const hasChart = timeline.download.length > 0 || timeline.battery.length > 0;
  return html`<section class="scenario" id="scenario-${index}" aria-labelledby="scenario-${index}-title">
<h2 id="scenario-${index}-title">${verdictBadge(verdictOf(result))} ${result.name}</h2>
<p class="meta">${result.file}${result.badge === undefined ? "" : html` · on badge <strong>${result.badge}</strong>`} · ${seconds(result.simulatedMs)} of badge time in ${seconds(result.wallMs)}</p>
${retriesList(result)}
${attachmentsList(result)}
${scenario ? html`<p>${scenario.description}</p>` : ""}
${result.message ? html`<p class="message ${result.outcome === "error" ? "bad" : ""}">${result.outcome === "error" ? "Could not be played: " : "Skipped: "}${result.message}</p>` : ""}
${checksTable(result, false)}
${
  result.observations.length > 0
    ? html`<h3>Timeline</h3>
${stateBand(timeline)}
${hasChart ? html`<div class="chart" id="chart-${index}" data-scenario="${index}"></div>` : ""}
${timeline.faults.length > 0 ? html`<p class="faults"><span aria-hidden="true">⚡</span> Faults: ${timeline.faults.map((f, i) => html`${i > 0 ? ", " : ""}${f.label} at ${seconds(f.t)}`)}</p>` : ""}
<p class="reports">Report sent: ${reports.length > 0 ? reports.map((r, i) => html`${i > 0 ? ", " : ""}<code>${r}</code>`) : "none"}</p>
${screensList(timeline)}
${eventsTable(timeline)}`
    : ""
}
</section>`;
}

/** A scenario's verdict: flaky when it passed only on a retry. */
const verdictOf = (result: ScenarioResult): Verdict => (isFlaky(result) ? "flaky" : result.outcome);

/** The failed tries of a retried scenario (hil run --retries), each with what went wrong. */
function retriesList(result: ScenarioResult): Html | string {
  const reruns = result.reruns ?? [];
  if (reruns.length === 0) return "";
  const how = result.outcome === "passed" ? `Flaky: passed on try ${reruns.length + 1}` : `Failed on each of ${reruns.length + 1} tries`;
  return html`<div class="retries"><p class="message bad">${how}; the tries before:</p><ol>${reruns.map((rerun) => html`<li>${verdictBadge(rerun.outcome)} <code>${failureText(rerun)}</code></li>`)}</ol></div>`;
}

/** Links to the files that go with the case (transcript, timeline, image SHA-256), relative to the report when they can be. */
function attachmentsList(result: ScenarioResult): Html | string {
  const attachments = result.attachments ?? [];
  if (attachments.length === 0) return "";
  return html`<p class="attachments">Attachments: ${attachments.map((a, i) => html`${i > 0 ? ", " : ""}<a href="${pathToFileURL(a.path).href}">${a.name}</a>`)}</p>`;
}

export interface ReportInput {
  title: string;
  results: ScenarioResult[];
  /** the scenario each result played, by file (absent for a file that could not be loaded) */
  scenarios: Map<string, Scenario>;
  generatedAt: Date;
}

/** The whole report as one HTML document. */
export function scenarioReportHtml(input: ReportInput): string {
  const { results } = input;
  const count = (outcome: ScenarioOutcome) => results.filter((r) => r.outcome === outcome).length;
  const bad = count("failed") + count("error");
  const overall: ScenarioOutcome = bad > 0 ? (count("failed") > 0 ? "failed" : "error") : "passed";
  const timelines = results.map((r) => timelineOf(r, input.scenarios.get(r.file)));
  const chartData = timelines.map((t) => ({ download: t.download, battery: t.battery, faults: t.faults, durationMs: t.durationMs }));
  const flaky = results.filter(isFlaky).length;
  // a farm's report (hil run --parallel) names the badge of each scenario
  const onFarm = results.some((r) => r.badge !== undefined);
  const summaryLine = `${counted(results.length, "scenario")}: ${count("passed")} passed${flaky > 0 ? ` (${flaky} flaky: passed on a retry)` : ""}, ${count("failed")} failed, ${counted(count("error"), "error")}, ${count("skipped")} skipped`;
  const failing = results.map((r, i) => ({ r, i })).filter(({ r }) => r.outcome === "failed" || r.outcome === "error");

  return reportPage({
    title: input.title,
    verdict: overall,
    headline: summaryLine,
    meta: `Written ${input.generatedAt.toISOString()} · badge time is simulated on a virtual badge, wall time on a real one`,
    body: html`<section aria-labelledby="summary-title"><h2 id="summary-title">Summary</h2>
<table class="summary"><thead><tr><th scope="col">Result</th><th scope="col">Scenario</th><th scope="col">File</th>${onFarm ? html`<th scope="col">Badge</th>` : ""}<th scope="col">Badge time</th></tr></thead><tbody>
${results.map((r, i) => html`<tr><td>${verdictBadge(verdictOf(r))}</td><td><a href="#scenario-${i}">${r.name}</a></td><td>${r.file}</td>${onFarm ? html`<td>${r.badge ?? ""}</td>` : ""}<td>${seconds(r.simulatedMs)}</td></tr>`)}
</tbody></table>
${
  failing.length > 0
    ? html`<h3>What went wrong</h3>${failing.map(
        ({ r, i }) => html`<div class="failure"><h4>${verdictBadge(r.outcome)} <a href="#scenario-${i}">${r.name}</a></h4>
${r.message ? html`<p class="message bad">${r.outcome === "error" ? "Could not be played: " : ""}${r.message}</p>` : ""}${checksTable(r, true)}</div>`,
      )}`
    : ""
}
</section>
${results.map((r, i) => scenarioSection(r, i, timelines[i]!, input.scenarios.get(r.file)))}`,
    data: chartData,
    script: CHART_SCRIPT,
    css: SCENARIO_CSS,
  });
}

/** Draws each scenario's chart: download KiB (left axis) and battery volts (right), faults as red lines. */
const CHART_SCRIPT = `
(function () {
  var data = JSON.parse(document.getElementById("chart-data").textContent);
  function faultLines(faults) {
    return { hooks: { draw: [function (u) {
      var ctx = u.ctx;
      ctx.save();
      ctx.strokeStyle = "#cf222e"; ctx.fillStyle = "#cf222e"; ctx.lineWidth = 2 * devicePixelRatio;
      ctx.font = (11 * devicePixelRatio) + "px sans-serif";
      faults.forEach(function (f) {
        var x = u.valToPos(f.t / 1000, "x", true);
        ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke();
        ctx.fillText("\\u26a1 " + f.label, x + 4 * devicePixelRatio, u.bbox.top + 12 * devicePixelRatio);
      });
      ctx.restore();
      u.root.setAttribute("data-faults-drawn", String(faults.length));
    }] } };
  }
  document.querySelectorAll(".chart").forEach(function (el) {
    var d = data[Number(el.getAttribute("data-scenario"))];
    var times = {};
    d.download.forEach(function (p) { times[p[0]] = true; });
    d.battery.forEach(function (p) { times[p[0]] = true; });
    times[0] = true; times[d.durationMs] = true;
    var xs = Object.keys(times).map(Number).sort(function (a, b) { return a - b; });
    // Each value holds until the next point; a download's null (its end) leaves a gap until the next.
    function holding(points, scale) {
      var out = [], i = 0, value = null;
      xs.forEach(function (t) {
        while (i < points.length && points[i][0] <= t) { value = points[i][1] === null ? null : points[i][1] / scale; i++; }
        out.push(value);
      });
      return out;
    }
    var dl = holding(d.download, 1024), bat = holding(d.battery, 1);
    var width = Math.min(el.clientWidth, 1000);
    new uPlot({
      width: width, height: 240,
      plugins: [faultLines(d.faults)],
      scales: {
        x: { time: false },
        kib: { auto: true },
        // A cell's working range, widened to whatever was seen, so a flat line reads as flat.
        v: { range: function (u, min, max) { return [Math.min(3.3, (min || 3.3) - 0.05), Math.max(4.3, (max || 4.3) + 0.05)]; } }
      },
      axes: [
        { label: "badge time (s)" },
        { scale: "kib", label: "downloaded (KiB)" },
        { scale: "v", label: "battery (V)", side: 1, grid: { show: false } }
      ],
      series: [
        { label: "time (s)" },
        { label: "downloaded (KiB)", scale: "kib", stroke: "#0969da", width: 2, spanGaps: false, points: { show: false } },
        { label: "battery (V)", scale: "v", stroke: "#1a7f37", width: 2, paths: uPlot.paths.stepped({ align: 1 }), points: { show: false } }
      ]
    }, [xs.map(function (t) { return t / 1000; }), dl, bat], el);
  });
})();
`;

const SCENARIO_CSS = `
.screens .more { list-style: none; color: #57606a; font-size: 0.85rem; }
.failure { border-top: 1px solid #d0d7de; }
.band { display: flex; height: 2rem; border: 1px solid #d0d7de; border-radius: 4px; overflow: hidden; margin: 0.3rem 0; }
.segment { min-width: 2px; overflow: hidden; white-space: nowrap; font-size: 0.7rem; padding: 0.45rem 0.2rem 0; box-sizing: border-box; border-right: 1px solid #fff; }
.state-awake { background: #dafbe1; } .state-online { background: #ddf4ff; } .state-asleep { background: #eaeef2; }
.state-off { background: #1b1f24; color: #fff; } .state-booting { background: #fff8c5; } .state-updateFailed, .state-bricked { background: #ffebe9; }
.state-unprovisioned { background: #fbefff; } .state-restarting, .state-wakingUp { background: #fff8c5; }
.chart { margin: 0.5rem 0; }
.faults { color: #cf222e; font-weight: 600; }
.screens { padding-left: 1.2rem; } .screens li { margin: 0.2rem 0; } .screens .t { color: #57606a; font-size: 0.85rem; }
.screens pre { display: inline-block; background: #1b1f24; color: #e6edf3; padding: 0.2rem 0.5rem; border-radius: 3px; margin-left: 0.5rem; vertical-align: top; }
tr.fault td { background: #ffebe9; font-weight: 600; }
details summary { cursor: pointer; margin: 0.5rem 0; }
`;
