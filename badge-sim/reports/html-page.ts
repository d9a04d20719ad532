// The pieces every HTML report of the simulator shares (the scenario report, the fleet's and the
// sweep's pictures): a template tag that escapes every interpolation, JSON that is safe inside a
// <script>, uPlot read from node_modules and inlined, and the page around a report's body. A
// report file needs no network to open.
import fs from "node:fs";
import { createRequire } from "node:module";

export class Html {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}

const ESCAPES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
const escapeHtml = (value: string) => value.replace(/[&<>"']/g, (c) => ESCAPES[c]!);

type Piece = Html | string | number | null | undefined | false | Piece[];

function render(piece: Piece): string {
  if (piece === null || piece === undefined || piece === false) return "";
  if (piece instanceof Html) return piece.text;
  if (Array.isArray(piece)) return piece.map(render).join("");
  return escapeHtml(String(piece));
}

/** A template whose interpolations are escaped (arrays joined, `Html` kept as it is). */
export function html(strings: TemplateStringsArray, ...values: Piece[]): Html {
  return new Html(strings.reduce((out, part, i) => out + part + (i < values.length ? render(values[i]!) : ""), ""));
}

/** JSON for a `<script type="application/json">`: `<` and the line separators escaped. */
export const scriptJson = (value: unknown) =>
  new Html(JSON.stringify(value).replace(/</g, "\\u003c").replace(/\u2028/g, "\\u2028").replace(/\u2029/g, "\\u2029"));

const require = createRequire(import.meta.url);

/** uPlot's script and stylesheet, inlined into every report. */
function chartLibrary(): { script: Html; style: Html } {
  const read = (file: string) => fs.readFileSync(require.resolve(`uplot/dist/${file}`), "utf8");
  // The library's own text, placed in <script>; it contains no `</script`.
  return { script: new Html(read("uPlot.iife.min.js")), style: new Html(read("uPlot.min.css")) };
}

/** `flaky`: passed only on a retry (hil run --retries) */
export type Verdict = "passed" | "flaky" | "failed" | "error" | "skipped";

const VERDICT_WORDS: Record<Verdict, { word: string; icon: string }> = {
  passed: { word: "PASS", icon: "✔" },
  flaky: { word: "FLAKY", icon: "≈" },
  failed: { word: "FAIL", icon: "✘" },
  error: { word: "ERROR", icon: "⚠" },
  skipped: { word: "SKIP", icon: "–" },
};

/** A verdict told by word and icon (the colour only adds to them). */
export const verdictBadge = (verdict: Verdict) =>
  html`<span class="outcome outcome-${verdict}"><span aria-hidden="true">${VERDICT_WORDS[verdict].icon}</span> ${VERDICT_WORDS[verdict].word}</span>`;

export interface ReportPage {
  title: string;
  verdict: Verdict;
  /** the one line under the title: what the run came to */
  headline: string;
  meta: string;
  body: Html;
  /** what the page's script draws, as `#chart-data` */
  data: unknown;
  /** a script that reads `#chart-data` and draws with `uPlot` */
  script: string;
  /** the report's own styles, after the shared ones */
  css?: string;
}

/** The whole document: uPlot's stylesheet and script inlined, the data as JSON, the report's script last. */
export function reportPage(page: ReportPage): string {
  const library = chartLibrary();
  return html`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${VERDICT_WORDS[page.verdict].word}: ${page.title}</title>
<style>${library.style}</style>
<style>${new Html(PAGE_CSS)}${new Html(page.css ?? "")}</style>
</head><body>
<header><h1>${page.title}</h1>
<p class="overall outcome-${page.verdict}" id="overall">${verdictBadge(page.verdict)} ${page.headline}</p>
<p class="meta">${page.meta}</p></header>
<main>
${page.body}
</main>
<script type="application/json" id="chart-data">${scriptJson(page.data)}</script>
<script>${library.script}</script>
<script>${new Html(page.script)}</script>
</body></html>
`.text;
}

const PAGE_CSS = `
body { font-family: system-ui, "DejaVu Sans", sans-serif; margin: 0; color: #1b1f24; background: #f6f8fa; line-height: 1.4; }
header { background: #fff; border-bottom: 1px solid #d0d7de; padding: 0.75rem 1rem; }
h1 { font-size: 1.4rem; margin: 0; }
main { max-width: 70rem; margin: 0 auto; padding: 0 1rem 2rem; }
section { background: #fff; border: 1px solid #d0d7de; border-radius: 6px; padding: 1rem; margin-top: 1rem; }
h2 { font-size: 1.15rem; margin: 0 0 0.5rem; } h3 { font-size: 1rem; margin: 1rem 0 0.4rem; } h4 { font-size: 0.95rem; margin: 0.75rem 0 0.3rem; }
.meta { color: #57606a; font-size: 0.9rem; margin: 0.2rem 0; }
.overall { font-size: 1.1rem; font-weight: 600; margin: 0.4rem 0; }
.outcome { font-weight: 700; white-space: nowrap; }
.outcome-passed { color: #1a7f37; } .outcome-flaky { color: #9a6700; } .outcome-failed, .outcome-error { color: #cf222e; } .outcome-skipped { color: #57606a; }
table { border-collapse: collapse; width: 100%; margin: 0.4rem 0; }
th, td { text-align: left; padding: 0.3rem 0.5rem; border-bottom: 1px solid #d0d7de; vertical-align: top; font-size: 0.92rem; }
th { color: #57606a; font-size: 0.85rem; }
tr.bad td { background: #ffebe9; }
td code { display: block; max-height: 9rem; overflow: auto; }
code, pre { font-family: "DejaVu Sans Mono", monospace; font-size: 0.85rem; overflow-wrap: anywhere; white-space: pre-wrap; margin: 0; }
.message { padding: 0.5rem; border-left: 4px solid #57606a; background: #f6f8fa; }
.message.bad { border-left-color: #cf222e; }

`;
