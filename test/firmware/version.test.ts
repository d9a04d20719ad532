import { describe, expect, it } from "vitest";
import { compareVersions, isReleaseVersion, parseVersion, VERSION_MAX_LENGTH } from "../../firmware/version.ts";

function version(text: string) {
  const parsed = parseVersion(text);
  if (!parsed) throw new Error(`test setup: ${text} should parse`);
  return parsed;
}

describe("parseVersion", () => {
  it.each([
    ["0.0.0", 0, 0, 0],
    ["1.2.3", 1, 2, 3],
    ["10.20.30", 10, 20, 30],
    ["999999999.0.1", 999999999, 0, 1],
    ["1.2.3-rc1", 1, 2, 3],
    ["1.2.3-rc.1", 1, 2, 3],
    ["1.2.3+abc", 1, 2, 3],
    ["1.2.3-beta.2+build.7", 1, 2, 3],
    ["1.2.3-0-x", 1, 2, 3],
  ])("accepts %s", (text, major, minor, patch) => {
    expect(parseVersion(text)).toEqual({ major, minor, patch, text });
  });

  it.each([
    ["", "empty"],
    ["1.2", "two numbers"],
    ["1.2.3.4", "four numbers"],
    ["x.y.z", "letters"],
    [" 1.2.3", "leading space"],
    ["1.2.3 ", "trailing space"],
    ["1.2.3\n", "trailing newline"],
    ["1.2.3\0", "NUL"],
    ["1.2.3-rc\t1", "tab"],
    ["01.2.3", "leading zero in major"],
    ["1.02.3", "leading zero in minor"],
    ["1.2.03", "leading zero in patch"],
    ["1234567890.0.0", "ten digits"],
    ["v1.2.3", "v prefix"],
    ["1.2.3-", "empty pre-release"],
    ["1.2.3+", "empty build"],
    ["1.2.3-rc..1", "empty identifier"],
    ["1.2.3-rc_1", "underscore"],
    ["1.2.3-é", "non-ASCII"],
    ["-1.2.3", "negative"],
    ["1.2.3-" + "a".repeat(200), "200 characters"],
  ])("rejects %j (%s)", (text) => {
    expect(parseVersion(text)).toBeNull();
  });

  it("accepts exactly VERSION_MAX_LENGTH characters and no more", () => {
    const longest = "1.2.3-" + "a".repeat(VERSION_MAX_LENGTH - 6);
    expect(longest).toHaveLength(31);
    expect(parseVersion(longest)?.text).toBe(longest);
    expect(parseVersion(longest + "a")).toBeNull();
  });
});

describe("compareVersions", () => {
  it.each([
    ["1.2.3", "1.2.4", -1],
    ["1.2.4", "1.2.3", 1],
    ["1.3.0", "1.2.9", 1],
    ["2.0.0", "1.99.99", 1],
    ["1.10.0", "1.9.0", 1],
    ["0.0.1", "0.0.0", 1],
    ["1.2.3", "1.2.3", 0],
  ] as const)("%s vs %s is %d", (a, b, expected) => {
    expect(compareVersions(version(a), version(b))).toBe(expected);
  });

  it("ignores pre-release and build metadata (SPEC 4.8 rule 1)", () => {
    const plain = version("1.2.3");
    for (const text of ["1.2.3-rc1", "1.2.3+abc", "1.2.3-rc.2+build.5"]) {
      expect(compareVersions(version(text), plain)).toBe(0);
      expect(compareVersions(plain, version(text))).toBe(0);
    }
    expect(compareVersions(version("1.2.4-rc1"), version("1.2.3+zzz"))).toBe(1);
  });
});

describe("isReleaseVersion", () => {
  it.each(["1.2.3", "0.0.1", "1.2.3-rc.1", "1.2.3-beta"])("accepts %s", (text) => {
    expect(isReleaseVersion(text)).toBe(true);
  });

  it.each(["1.2.3+abc", "1.2.3-rc1+abc", "1.2", "1.2.3.4", "x.y.z", "", " 1.2.3", "01.2.3", "1.2.3-" + "a".repeat(30)])(
    "rejects %j",
    (text) => {
      expect(isReleaseVersion(text)).toBe(false);
    },
  );
});
