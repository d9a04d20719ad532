// Firmware versions: MAJOR.MINOR.PATCH with optional -prerelease and +build suffixes.
// Only the three numbers take part in a comparison (SPEC 4.8 rule 1): a build suffix that
// counted would keep "update available" on forever, and a pre-release that sorted below its
// release would move a hand-flashed development build back to the published one.

export interface Version {
  major: number;
  minor: number;
  patch: number;
  /** The string as given, suffixes included. */
  text: string;
}

/** esp_app_desc_t.version is char[32]; one byte is the terminating NUL. */
export const VERSION_MAX_LENGTH = 31;

// 1 to 9 digits keeps every number a safe integer; no leading zeros, as in semver.
const NUMBER = "(0|[1-9][0-9]{0,8})";
const IDENTIFIERS = "[0-9A-Za-z-]+(?:\\.[0-9A-Za-z-]+)*";
const VERSION_PATTERN = new RegExp(`^${NUMBER}\\.${NUMBER}\\.${NUMBER}(?:-${IDENTIFIERS})?(?:\\+${IDENTIFIERS})?$`);
// A published version travels in the download URL's query (`?v=`), where `+` would read as a space.
const RELEASE_PATTERN = new RegExp(`^${NUMBER}\\.${NUMBER}\\.${NUMBER}(?:-${IDENTIFIERS})?$`);

export function parseVersion(text: string): Version | null {
  if (text.length > VERSION_MAX_LENGTH) return null;
  const match = VERSION_PATTERN.exec(text);
  if (!match) return null;
  return { major: Number(match[1]), minor: Number(match[2]), patch: Number(match[3]), text };
}

/** Orders by major, minor, patch only: 1.2.3-rc1, 1.2.3+abc and 1.2.3 are equal. */
export function compareVersions(a: Version, b: Version): -1 | 0 | 1 {
  for (const key of ["major", "minor", "patch"] as const) {
    if (a[key] !== b[key]) return a[key] < b[key] ? -1 : 1;
  }
  return 0;
}

/** What publish accepts: MAJOR.MINOR.PATCH with an optional -prerelease, no +build. */
export function isReleaseVersion(text: string): boolean {
  return text.length <= VERSION_MAX_LENGTH && RELEASE_PATTERN.test(text);
}
