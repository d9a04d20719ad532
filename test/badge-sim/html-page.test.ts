// The HTML reports' two guards against text that is markup: the template tag escapes whatever it
// interpolates, and the JSON the charts read cannot end the <script> it sits in.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { html, scriptJson } from "../../badge-sim/reports/html-page.ts";

describe("html`...`", () => {
  it("escapes every interpolated string, so the only tags are the template's own", () => {
    fc.assert(
      fc.property(fc.string(), fc.string(), (text, attribute) => {
        const out = html`<p title="${attribute}">${text}</p>`.text;
        expect(out.match(/</g)).toHaveLength(2);
        expect(out.match(/"/g)).toHaveLength(2);
        const unescaped = (s: string) => s.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&amp;/g, "&");
        expect(unescaped(out)).toBe(`<p title="${attribute}">${text}</p>`);
      }),
    );
  });

  it("keeps nested html`...` as markup and escapes inside arrays", () => {
    const names = ["<b>a</b>", "c & d"];
    expect(html`<ul>${names.map((n) => html`<li>${n}</li>`)}</ul>`.text).toBe("<ul><li>&lt;b&gt;a&lt;/b&gt;</li><li>c &amp; d</li></ul>");
  });
});

describe("scriptJson", () => {
  it("never contains '<' (so no '</script>'), and parses back to the same value", () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        const text = scriptJson(value).text;
        expect(text).not.toContain("<");
        expect(JSON.parse(text)).toEqual(JSON.parse(JSON.stringify(value)));
      }),
    );
    expect(scriptJson({ label: "</script><script>alert(1)</script>" }).text).toBe('{"label":"\\u003c/script>\\u003cscript>alert(1)\\u003c/script>"}');
  });
});
