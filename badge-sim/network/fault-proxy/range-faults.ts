// The `range` fault (issue 23): what a proxy between badge and server does to a resume, played
// by rewriting the request head the badge sent, so that the server itself gives the answer a
// badge must survive:
// - `ignore`: Range and If-Range are stripped, as a proxy that does not know them does; the
//   server answers 200 with the whole image (the "115 %" trap for a badge that appends);
// - `shift`: the first byte asked for moves by `shiftBytes` (default -4096), so the server's 206
//   starts where the badge did not ask (a proxy or cache that mixes up ranges);
// - `unsatisfiable`: the range asked for starts past any image, so the server answers 416.
// A request without Range passes unchanged.
import type { FaultOf } from "./faults.ts";

const DEFAULT_SHIFT_BYTES = -4096;
/** Past the end of any image that fits the slot. */
const PAST_ANY_IMAGE = 1_000_000_000;

/** The request head with the range faults applied, and a sentence per fault that acted. */
export function rewriteRange(head: Buffer, faults: Array<FaultOf<"range">>): { head: Buffer; applied: Array<{ fault: FaultOf<"range">; detail: string }> } {
  const text = head.toString("latin1");
  const lines = text.split("\r\n");
  const rangeAt = lines.findIndex((line) => /^range:/i.test(line));
  if (faults.length === 0 || rangeAt === -1) return { head, applied: [] };
  const applied: Array<{ fault: FaultOf<"range">; detail: string }> = [];
  let out = lines;
  for (const fault of faults) {
    const range = out.find((line) => /^range:/i.test(line));
    if (range === undefined) break;
    const first = /^range:\s*bytes=(\d+)-/i.exec(range);
    switch (fault.mode) {
      case "ignore":
        out = out.filter((line) => !/^(range|if-range):/i.test(line));
        applied.push({ fault, detail: `stripped ${JSON.stringify(range)} and If-Range` });
        break;
      case "shift": {
        if (!first) break;
        const moved = Math.max(0, Number(first[1]) + (fault.shiftBytes ?? DEFAULT_SHIFT_BYTES));
        out = out.map((line) => (line === range ? `Range: bytes=${moved}-` : line));
        applied.push({ fault, detail: `asked the server for bytes=${moved}- instead of bytes=${first[1]}-` });
        break;
      }
      case "unsatisfiable":
        out = out.map((line) => (line === range ? `Range: bytes=${PAST_ANY_IMAGE}-` : line));
        applied.push({ fault, detail: `asked the server for bytes=${PAST_ANY_IMAGE}- instead of ${JSON.stringify(range)}` });
        break;
    }
  }
  return { head: Buffer.from(out.join("\r\n"), "latin1"), applied };
}
