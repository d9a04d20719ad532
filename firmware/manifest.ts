// The release manifest (<data>/releases/manifest.json): every published release, which one
// the fleet is offered, and which device a canary release is pinned to. The check and
// download endpoints answer from it alone; a download's file name comes from here, never from
// the request (SPEC 4.9 rule 1).
import { z } from "zod";
import { hasControlCharacter } from "./line-codec.ts";
import { KEY_ID_HEX, parseSignatureLine, SIGNATURE_BASE64_CHARS } from "./signature.ts";
import { compareVersions, isReleaseVersion, parseVersion, type Version } from "./version.ts";

export const MANIFEST_FORMAT = 1;
/** App slot size of arduino-esp32's min_spiffs partition table; a larger image cannot be installed. */
export const OTA_SLOT_BYTES = 0x1e0000;
/** The badge screen shows release notes and the display string in 40 characters per line. */
export const NOTE_MAX_CHARS = 40;
export const NOTES_MAX = 3;
export const DISPLAY_MAX_CHARS = 40;

/** One line of badge screen text; length counted in characters (code points), not UTF-16 units. */
const screenText = (max: number) =>
  z
    .string()
    .refine((text) => text.length > 0, "must not be empty")
    .refine((text) => [...text].length <= max, `must be at most ${max} characters`)
    .refine((text) => !hasControlCharacter(text), "must not contain control characters");

const timestamp = z.iso.datetime({ offset: true, message: "must be an ISO 8601 timestamp such as 2026-11-22T09:00:00Z" });

export const releaseEntrySchema = z.strictObject({
  version: z.string().refine(isReleaseVersion, "must be MAJOR.MINOR.PATCH with an optional -prerelease (at most 31 characters)"),
  display: screenText(DISPLAY_MAX_CHARS),
  file: z
    .string()
    .max(255, "must be at most 255 characters")
    .regex(/^[A-Za-z0-9_-][A-Za-z0-9._-]*$/, "must be a bare file name of A-Z a-z 0-9 . _ - not starting with '.'"),
  size: z.number().int().positive().max(OTA_SLOT_BYTES, `must fit the ${OTA_SLOT_BYTES}-byte OTA slot`),
  md5: z.string().regex(/^[0-9a-f]{32}$/, "must be 32 lowercase hex digits"),
  sha256: z.string().regex(/^[0-9a-f]{64}$/, "must be 64 lowercase hex digits"),
  notes: z.array(screenText(NOTE_MAX_CHARS)).max(NOTES_MAX, `must have at most ${NOTES_MAX} notes`),
  published_at: timestamp,
  /** The one device this release is offered to until it is promoted to the fleet. */
  /** Present on a signed release: the key that signed it and its Ed25519 signature of the whole image (signature.ts). */
  signature: z
    .strictObject({
      key_id: z.string().regex(new RegExp(`^[0-9a-f]{${KEY_ID_HEX}}$`), `must be ${KEY_ID_HEX} lowercase hex digits`),
      ed25519: z.string().refine((value) => typeof parseSignatureLine(`${"0".repeat(KEY_ID_HEX)} ${value}`) !== "string", `must be ${SIGNATURE_BASE64_CHARS} characters of base64`),
    })
    .optional(),
  canary: z.string().regex(/^dev_[A-Za-z0-9_-]{1,64}$/, "must be a device id such as dev_...").nullable(),
  promoted: z
    .strictObject({
      at: timestamp,
      /** Promoted without a successful canary report. */
      forced: z.boolean(),
      reason: z.string().nullable(),
      canary_report: z.string().nullable(),
    })
    .nullable(),
});

export const manifestSchema = z
  .strictObject({
    format: z.literal(MANIFEST_FORMAT),
    fleet: z.string().nullable(),
    releases: z.array(releaseEntrySchema),
  })
  .superRefine((manifest, context) => {
    // Versions compare by three numbers, so 1.2.3-rc1 and 1.2.3 would be the same offer; the
    // image behind a version a badge was already told about must never change either.
    const seenVersions: Array<{ index: number; version: Version }> = [];
    const seenFiles = new Map<string, number>();
    manifest.releases.forEach((release, index) => {
      const version = parseVersion(release.version);
      const earlier = version && seenVersions.find((seen) => compareVersions(seen.version, version) === 0);
      if (earlier) {
        context.addIssue({
          code: "custom",
          path: ["releases", index, "version"],
          message: `${release.version} repeats releases[${earlier.index}].version ${earlier.version.text} (versions compare by their three numbers)`,
        });
      }
      if (version) seenVersions.push({ index, version });
      const sameFile = seenFiles.get(release.file);
      if (sameFile !== undefined) {
        context.addIssue({ code: "custom", path: ["releases", index, "file"], message: `${release.file} is already the image of releases[${sameFile}]` });
      }
      seenFiles.set(release.file, index);
    });
    if (manifest.fleet !== null && !manifest.releases.some((release) => release.version === manifest.fleet)) {
      context.addIssue({ code: "custom", path: ["fleet"], message: `names ${manifest.fleet}, which is not a release in this manifest` });
    }
  });

export type ReleaseEntry = z.infer<typeof releaseEntrySchema>;
export type Manifest = z.infer<typeof manifestSchema>;

/** Frozen, so it cannot be changed by accident; build a new manifest with `structuredClone(EMPTY_MANIFEST)`. */
export const EMPTY_MANIFEST: Manifest = Object.freeze({
  format: MANIFEST_FORMAT,
  fleet: null,
  releases: Object.freeze([]) as unknown as ReleaseEntry[],
});

/** `releases[2].notes[0]` style. */
function formatPath(path: ReadonlyArray<PropertyKey>): string {
  let text = "";
  for (const part of path) text += typeof part === "number" ? `[${part}]` : `${text ? "." : ""}${String(part)}`;
  return text || "manifest";
}

export function parseManifest(json: unknown): { ok: true; manifest: Manifest } | { ok: false; message: string } {
  const result = manifestSchema.safeParse(json);
  if (result.success) return { ok: true, manifest: result.data };
  const message = result.error.issues.map((issue) => `${formatPath(issue.path)}: ${issue.message}`).join("; ");
  return { ok: false, message };
}
