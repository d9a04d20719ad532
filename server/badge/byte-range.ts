// Which bytes of the image a download request asks for (RFC 9110 14.1-14.2, 13.1.5), decided
// before a byte is sent. Hand-written rather than Express's req.range() (range-parser): that one
// answers "unsatisfiable" for an invalid range such as `bytes=5-2`, which RFC 9110 says to
// ignore (a 200 with the whole image), and accepts a suffix of length 0 as the last byte.
//
// The answers:
// - `whole` (200): no Range; a Range that is not one valid `bytes=` range-spec (garbage, another
//   unit, `bytes=5-2`); several ranges (a badge asks for one, and a multipart/byteranges body is
//   not worth its code: the whole image is always a correct answer); an If-Range that is not the
//   image's strong ETag (another MD5, a weak tag, an HTTP date: the image has no Last-Modified,
//   so no date can validate it; garbage);
// - `part` (206): one satisfiable range, clipped to the image's end;
// - `unsatisfiable` (416): one range that starts at or past the end, or a suffix of length 0.

export type ByteRange = { kind: "whole" } | { kind: "part"; first: number; last: number } | { kind: "unsatisfiable" };

/** A single byte-range-spec: `first-`, `first-last` or `-suffix` (RFC 9110 14.1.1), digits only. */
const SINGLE_RANGE = /^bytes=[ \t]*(?:(\d+)-(\d*)|-(\d+))[ \t]*$/i;

/** What `Range` and `If-Range` ask of an image of `size` bytes whose ETag is `etag`. */
export function requestedRange(range: string | undefined, ifRange: string | undefined, size: number, etag: string): ByteRange {
  if (range === undefined) return { kind: "whole" };
  // RFC 9110 13.1.5: a strong comparison; anything else (a date, a weak tag, garbage) fails.
  if (ifRange !== undefined && ifRange.trim() !== etag) return { kind: "whole" };
  const match = SINGLE_RANGE.exec(range);
  if (!match) return { kind: "whole" };
  const [, firstDigits, lastDigits, suffixDigits] = match;
  if (suffixDigits !== undefined) {
    const suffix = Number(suffixDigits);
    if (suffix === 0 || size === 0) return { kind: "unsatisfiable" };
    return { kind: "part", first: Math.max(0, size - suffix), last: size - 1 };
  }
  const first = Number(firstDigits);
  const last = lastDigits === "" ? Infinity : Number(lastDigits);
  if (last < first) return { kind: "whole" };
  if (first >= size) return { kind: "unsatisfiable" };
  return { kind: "part", first, last: Math.min(last, size - 1) };
}
