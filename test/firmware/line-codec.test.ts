import { describe, expect, it } from "vitest";
import {
  formatRequest,
  formatResponse,
  LineFormatError,
  MAX_REQUEST_BYTES,
  parseRequest,
  parseResponse,
  type ResponseLine,
} from "../../firmware/line-codec.ts";

describe("parseRequest", () => {
  it("reads a check request in order", () => {
    expect(parseRequest("v=1\nsv=1.2.3\nfw=Badge 1.2.3\nbat=87\n")).toEqual({
      ok: true,
      pairs: [
        ["v", "1"],
        ["sv", "1.2.3"],
        ["fw", "Badge 1.2.3"],
        ["bat", "87"],
      ],
    });
  });

  it("keeps repeated keys, empty values, and '=' or '|' inside values", () => {
    const result = parseRequest("tap=a|1\ntap=b|2\nnote=\nexpr=a=b=c\nota=err|1.4.0|stopped at byte 40960");
    expect(result).toEqual({
      ok: true,
      pairs: [
        ["tap", "a|1"],
        ["tap", "b|2"],
        ["note", ""],
        ["expr", "a=b=c"],
        ["ota", "err|1.4.0|stopped at byte 40960"],
      ],
    });
  });

  it("accepts CRLF line ends and exactly one trailing newline", () => {
    expect(parseRequest("v=1\r\nsv=1.2.3\r\n")).toEqual({ ok: true, pairs: [["v", "1"], ["sv", "1.2.3"]] });
    expect(parseRequest("v=1")).toEqual({ ok: true, pairs: [["v", "1"]] });
  });

  it("accepts the longest key and refuses one character more", () => {
    expect(parseRequest("a234567890123456=x")).toEqual({ ok: true, pairs: [["a234567890123456", "x"]] });
    expect(parseRequest("a2345678901234567=x")).toMatchObject({ ok: false, line: 1 });
  });

  it.each([
    ["", 1, "line 1 is empty"],
    ["\n", 1, "line 1 is empty"],
    ["v=1\n\n", 2, "line 2 is empty"],
    ["v=1\n\nsv=1.2.3", 2, "line 2 is empty"],
    ["v=1\r\n\r\nsv=1.2.3", 2, "line 2 is empty"],
    ["v=1\nsv", 2, "line 2 is not key=value"],
    ["v=1\nsv=1\nhello world", 3, "line 3 is not key=value"],
    ["=1", 1, 'line 1 has key ""'],
    ["V=1", 1, 'line 1 has key "V"'],
    ["1v=1", 1, 'line 1 has key "1v"'],
    ["_v=1", 1, 'line 1 has key "_v"'],
    ["s v=1", 1, 'line 1 has key "s v"'],
    ["v-1=1", 1, 'line 1 has key "v-1"'],
    ["v=1\nfw=a\tb", 2, 'the value of "fw" contains the control character U+0009'],
    ["v=1\nfw=a\rb", 2, "U+000D"],
    ["v=1\nfw=a\u0000", 2, "U+0000"],
    ["v=1\nfw=\u007f", 2, "U+007F"],
    ["v=1\nfw=\u0085", 2, "U+0085"],
  ])("refuses %j at line %d", (body, line, message) => {
    const result = parseRequest(body);
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.line).toBe(line);
    expect(result.message).toContain(message);
  });

  it("names what a key must look like", () => {
    const result = parseRequest("Sv=1");
    expect(result).toMatchObject({ ok: false, message: expect.stringMatching(/a key is a lowercase letter then up to 15 of a-z, 0-9 and _/) });
  });

  it("accepts a body of exactly MAX_REQUEST_BYTES and refuses one byte more, as a whole (line 0)", () => {
    const filler = (bytes: number) => `x=${"a".repeat(bytes - 2)}`;
    expect(parseRequest(filler(MAX_REQUEST_BYTES)).ok).toBe(true);
    const result = parseRequest(filler(MAX_REQUEST_BYTES + 1));
    expect(result).toEqual({ ok: false, line: 0, message: `request body is ${MAX_REQUEST_BYTES + 1} bytes; at most 16384 are accepted` });
  });

  it("counts the limit in UTF-8 bytes, not characters", () => {
    const body = `fw=${"é".repeat(MAX_REQUEST_BYTES / 2)}`;
    expect(body.length).toBeLessThan(MAX_REQUEST_BYTES);
    expect(parseRequest(body)).toMatchObject({ ok: false, line: 0 });
  });
});

describe("formatRequest", () => {
  it("writes key=value lines, each ending with a newline", () => {
    expect(formatRequest([["v", "1"], ["sv", "1.2.3"]])).toBe("v=1\nsv=1.2.3\n");
  });

  it("round-trips through parseRequest", () => {
    const pairs: Array<[string, string]> = [
      ["v", "1"],
      ["tap", "stu_1|2026-11-22T09:00:00Z"],
      ["tap", "stu_2|2026-11-22T09:00:05Z"],
      ["fw", "Bädge = 1.2.3 | ünïcode"],
      ["empty", ""],
      ["ota", "err|1.4.0|md5 mismatch"],
    ];
    expect(parseRequest(formatRequest(pairs))).toEqual({ ok: true, pairs });
  });

  it.each<[Array<[string, string]>, RegExp]>([
    [[], /at least one/],
    [[["Bad", "1"]], /request key "Bad" is not valid/],
    [[["", "1"]], /request key "" is not valid/],
    [[["a=b", "1"]], /request key "a=b" is not valid/],
    [[["fw", "two\nlines"]], /"fw" contains the control character U\+000A/],
    [[["fw", "cr\r"]], /U\+000D/],
    [[["fw", "tab\t"]], /U\+0009/],
  ])("throws LineFormatError for %j", (pairs, message) => {
    expect(() => formatRequest(pairs)).toThrow(LineFormatError);
    expect(() => formatRequest(pairs)).toThrow(message);
  });
});

describe("formatResponse", () => {
  it("writes V1, the letter lines and a final '.', every line ending with a newline", () => {
    const offer: ResponseLine[] = [
      { letter: "U", value: "1.4.0" },
      { letter: "B", value: "Badge 1.4.0" },
      { letter: "Z", value: "65536" },
      { letter: "L", value: "" },
    ];
    expect(formatResponse(offer)).toBe("V1\nU 1.4.0\nB Badge 1.4.0\nZ 65536\nL\n.\n");
    expect(formatResponse([])).toBe("V1\n.\n");
  });

  it.each([
    [{ letter: "u", value: "1" }, /letter "u" is not a single letter A-Z/],
    [{ letter: "UU", value: "1" }, /letter "UU"/],
    [{ letter: "", value: "1" }, /letter ""/],
    [{ letter: ".", value: "" }, /letter "\."/],
    [{ letter: "B", value: "two\nlines" }, /line B contains the control character U\+000A/],
    [{ letter: "B", value: "cr\r" }, /U\+000D/],
  ])("throws LineFormatError for %j", (line, message) => {
    expect(() => formatResponse([line])).toThrow(LineFormatError);
    expect(() => formatResponse([line])).toThrow(message);
  });
});

describe("parseResponse", () => {
  it("round-trips what formatResponse writes, values kept exactly", () => {
    const lines: ResponseLine[] = [
      { letter: "U", value: "1.4.0" },
      { letter: "B", value: " padded  " },
      { letter: "L", value: "." },
      { letter: "L", value: "" },
      { letter: "P", value: "/api/badge/ota/download?v=1.4.0" },
    ];
    expect(parseResponse(formatResponse(lines))).toEqual({ ok: true, version: 1, lines });
  });

  it("reads CRLF line ends and a final '.' without its newline", () => {
    expect(parseResponse("V1\r\nN 1.4.0\r\n.\r\n")).toEqual({ ok: true, version: 1, lines: [{ letter: "N", value: "1.4.0" }] });
    expect(parseResponse("V1\nN 1.4.0\n.")).toEqual({ ok: true, version: 1, lines: [{ letter: "N", value: "1.4.0" }] });
  });

  it("reports the format version it was given", () => {
    expect(parseResponse("V2\n.\n")).toEqual({ ok: true, version: 2, lines: [] });
  });

  it.each([
    ["V1\nU 1.4.0\nB Badge", "after 3 lines"],
    ["V1\nU 1.4.0\nZ 6553", "after 3 lines"],
    ["V1\n", "after 1 lines"],
    ["V1", "after 1 lines"],
  ])("says a response without the final '.' was cut: %j", (text, detail) => {
    const result = parseResponse(text);
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.message).toMatch(/^response was cut: no final '\.' line/);
    expect(result.message).toContain(detail);
  });

  it.each([
    ["", "response is empty"],
    ["X\n.\n", 'line 1 is "X"; expected V<number>'],
    ["v1\n.\n", 'line 1 is "v1"'],
    ["<html>\n.\n", 'line 1 is "<html>"'],
    ["V1\nu 1\n.\n", `line 2 is not '<LETTER> <value>' (got "u 1")`],
    ["V1\nUV 1\n.\n", "line 2 is not '<LETTER> <value>'"],
    ["V1\nU\n\n.\n", "line 3 is not '<LETTER> <value>'"],
    ["V1\nB a\tb\n.\n", "line 2 contains the control character U+0009"],
    ["V1\n.\nU 1.4.0\n.\n", "line 3 follows the final '.' line"],
    ["V1\n.\n\n", "line 3 follows the final '.' line"],
  ])("refuses %j", (text, message) => {
    const result = parseResponse(text);
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.message).toContain(message);
  });
});
