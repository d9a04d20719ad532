import { describe, expect, it } from "vitest";
import { EMPTY_MANIFEST, MANIFEST_FORMAT, OTA_SLOT_BYTES, parseManifest, type Manifest, type ReleaseEntry } from "../../firmware/manifest.ts";

function release(overrides: Partial<ReleaseEntry> = {}): ReleaseEntry {
  return {
    version: "1.4.0",
    display: "Badge 1.4.0",
    file: "1.4.0-0123456789abcdef.bin",
    size: 65536,
    md5: "0123456789abcdef0123456789abcdef",
    sha256: "0123456789abcdef".repeat(4),
    notes: ["Faster check-in", "Fixes the low battery icon"],
    published_at: "2026-11-22T09:00:00.000Z",
    canary: null,
    promoted: null,
    ...overrides,
  };
}

function manifest(releases: ReleaseEntry[], fleet: string | null = null): Manifest {
  return { format: MANIFEST_FORMAT, fleet, releases };
}

/** The failure message for a manifest that must be refused. */
function refusal(json: unknown): string {
  const result = parseManifest(json);
  if (result.ok) throw new Error("expected the manifest to be refused");
  return result.message;
}

describe("parseManifest", () => {
  it("accepts a fleet release, a promoted canary and a pending canary", () => {
    const valid = manifest(
      [
        release({ version: "1.3.0", file: "a.bin", promoted: { at: "2026-11-20T10:00:00Z", forced: false, reason: null, canary_report: "ok|1.3.0" } }),
        release({ version: "1.4.0-rc.1", file: "b.bin", canary: "dev_0123456789abcdefghjkmnpqrs", notes: [], published_at: "2026-11-22T09:00:00+01:00" }),
        release({ version: "1.5.0", file: "c.bin", size: OTA_SLOT_BYTES, notes: ["a".repeat(40), "b", "c"] }),
      ],
      "1.3.0",
    );
    expect(parseManifest(valid)).toEqual({ ok: true, manifest: valid });
  });

  it("accepts the empty manifest, which is frozen", () => {
    expect(parseManifest(EMPTY_MANIFEST)).toEqual({ ok: true, manifest: { format: 1, fleet: null, releases: [] } });
    expect(Object.isFrozen(EMPTY_MANIFEST)).toBe(true);
    expect(() => EMPTY_MANIFEST.releases.push(release())).toThrow(TypeError);
  });

  it("counts screen text in characters, not UTF-16 units", () => {
    expect(parseManifest(manifest([release({ display: "🔋".repeat(40) })])).ok).toBe(true);
    expect(refusal(manifest([release({ display: "🔋".repeat(41) })]))).toContain("releases[0].display: must be at most 40 characters");
  });

  it.each<[string, unknown, string]>([
    ["a duplicate version", manifest([release({ file: "a.bin" }), release({ file: "b.bin" })]), "releases[1].version: 1.4.0 repeats releases[0].version 1.4.0"],
    [
      "versions equal by their three numbers",
      manifest([release({ version: "1.4.0-rc.1", file: "a.bin" }), release({ version: "1.4.0", file: "b.bin" })]),
      "releases[1].version: 1.4.0 repeats releases[0].version 1.4.0-rc.1",
    ],
    ["two releases sharing an image file", manifest([release({ version: "1.3.0" }), release()]), "releases[1].file: 1.4.0-0123456789abcdef.bin is already the image of releases[0]"],
    ["fleet naming an absent version", manifest([release()], "1.3.0"), "fleet: names 1.3.0, which is not a release in this manifest"],
    ["a note of 41 characters", manifest([release({ notes: ["a".repeat(41)] })]), "releases[0].notes[0]: must be at most 40 characters"],
    ["an empty note", manifest([release({ notes: ["ok", ""] })]), "releases[0].notes[1]: must not be empty"],
    ["a note with a newline", manifest([release({ notes: ["two\nlines"] })]), "releases[0].notes[0]: must not contain control characters"],
    ["4 notes", manifest([release({ notes: ["a", "b", "c", "d"] })]), "releases[0].notes: must have at most 3 notes"],
    ["file ../x", manifest([release({ file: "../x" })]), "releases[0].file: must be a bare file name"],
    ["file images/x.bin", manifest([release({ file: "images/x.bin" })]), "releases[0].file: must be a bare file name"],
    ["file .hidden", manifest([release({ file: ".hidden" })]), "releases[0].file: must be a bare file name"],
    ["a build suffix in the version", manifest([release({ version: "1.4.0+abc" })]), "releases[0].version: must be MAJOR.MINOR.PATCH"],
    ["a two-number version", manifest([release({ version: "1.4" })]), "releases[0].version"],
    ["an image larger than the OTA slot", manifest([release({ size: OTA_SLOT_BYTES + 1 })]), "releases[0].size: must fit the 1966080-byte OTA slot"],
    ["a size of 0", manifest([release({ size: 0 })]), "releases[0].size"],
    ["an upper-case md5", manifest([release({ md5: "0123456789ABCDEF0123456789ABCDEF" })]), "releases[0].md5: must be 32 lowercase hex digits"],
    ["a short sha256", manifest([release({ sha256: "abc" })]), "releases[0].sha256: must be 64 lowercase hex digits"],
    ["a display of 41 characters", manifest([release({ display: "d".repeat(41) })]), "releases[0].display: must be at most 40 characters"],
    ["a date that is not ISO", manifest([release({ published_at: "22/11/2026" })]), "releases[0].published_at: must be an ISO 8601 timestamp"],
    ["a canary that is not a device id", manifest([release({ canary: "stu_1" })]), "releases[0].canary: must be a device id"],
    [
      "a promotion without forced",
      manifest([release({ promoted: { at: "2026-11-22T09:00:00Z", reason: null, canary_report: null } as never })]),
      "releases[0].promoted.forced",
    ],
    ["an unknown field", { ...manifest([]), latest: "1.0.0" }, 'Unrecognized key: "latest"'],
    ["format 2", { ...manifest([]), format: 2 }, "format"],
    ["no releases array", { format: 1, fleet: null }, "releases"],
    ["not an object", "manifest", "manifest:"],
  ])("refuses %s, naming the field", (_name, json, message) => {
    expect(refusal(json)).toContain(message);
  });
});
