// GET /api/badge/ota/download?v= (SPEC 4.9). The file is the manifest entry's, never a name
// from the request; a badge may fetch only its own target release (the one a check would
// offer it). The image is sent with Content-Length and no chunked framing (the badge sends
// HTTP/1.0), in slices of one shared in-memory copy. A single Range is honoured (byte-range.ts
// says which answer each request gets): 206 with exactly those bytes, sliced from the same copy,
// or 416; every answer says `Accept-Ranges: bytes` and carries the image's strong ETag, its MD5
// quoted, which a resuming badge sends back in If-Range. Over the cap of downloads in flight
// (services/load-shaping.ts) the answer is 503 with Retry-After. Every fetch is recorded with the
// bytes it serves, the bytes handed to the connection and whether it completed.
import type { Request, Response } from "express";
import type { Logger } from "pino";
import type { ReleaseStores } from "../releases/release-store.ts";
import type { DownloadGate } from "../services/load-shaping.ts";
import { endFetch, permitFetch, startFetch } from "../services/ota-fetches.ts";
import type { Clock, OpenRollout } from "../services/rollouts.ts";
import type { WriteBatcher } from "../store/write-batcher.ts";
import { BadgeError, deviceOf } from "./badge-http.ts";
import { imageEtag } from "../../firmware/index.ts";
import { requestedRange } from "./byte-range.ts";

const SLICE_BYTES = 64 * 1024;
/** The longest the downloads write in one turn of the event loop before other requests are read. */
const WRITE_TURN_MS = 2;

// Downloads whose connection took their last slice, waiting for their next one. They are served
// in turns (setImmediate) of at most WRITE_TURN_MS: a thousand downloads draining at once
// otherwise wrote for as long as that took inside one turn of the event loop, and every other
// request waited that long (a fleet's Check for Update waited for its group commit, which
// closes only when the loop comes round).
const waitingForSlice: (() => void)[] = [];
let turnScheduled = false;

function queueForSlice(writeMore: () => void): void {
  waitingForSlice.push(writeMore);
  if (!turnScheduled) {
    turnScheduled = true;
    setImmediate(writeTurn);
  }
}

function writeTurn(): void {
  const until = performance.now() + WRITE_TURN_MS;
  let served = 0;
  while (served < waitingForSlice.length && performance.now() < until) waitingForSlice[served++]!();
  waitingForSlice.splice(0, served);
  turnScheduled = waitingForSlice.length > 0;
  if (turnScheduled) setImmediate(writeTurn);
}

/**
 * Writes `body` slice by slice, the next one once the connection took the last and its turn
 * came (no stream in between: each slice is a view of the shared copy, written straight to the
 * response); resolves when the connection closes, with whether every byte was handed over.
 */
function sendBody(res: Response, body: Buffer, sent: { bytes: number }): Promise<boolean> {
  return new Promise((resolve) => {
    let offset = 0;
    const writeMore = () => {
      // The badge may have gone while this download waited for its turn.
      if (res.destroyed) return;
      while (offset < body.length) {
        const slice = body.subarray(offset, offset + SLICE_BYTES);
        offset += slice.length;
        sent.bytes += slice.length;
        // The last slice ends the response: end() queues it behind what the connection holds,
        // with no drain to wait for. (A first write that returned false on a reused keep-alive
        // connection got no drain at all: a one-slice image's response never ended, its fetch
        // was recorded cut and the connection held until the server's timeout, 58 s.)
        if (offset === body.length) {
          res.end(slice);
          return;
        }
        if (!res.write(slice)) {
          res.once("drain", () => queueForSlice(writeMore));
          return;
        }
      }
      res.end();
    };
    // The badge may have gone while the fetch was being recorded (a round trip to PostgreSQL):
    // the response closed already and will not say so again.
    if (res.closed) {
      resolve(false);
      return;
    }
    res.once("close", () => resolve(res.writableFinished));
    writeMore();
  });
}

interface Served {
  fetchId: string;
  outcome: "completed" | "cut";
  bytesSent: number;
}

export function otaDownload(openRollout: OpenRollout, writes: WriteBatcher, releases: ReleaseStores, gate: DownloadGate, logger: Logger, clock: Clock) {
  return async (req: Request, res: Response) => {
    const device = deviceOf(req);
    const version = req.query.v;
    if (typeof version !== "string" || version.length === 0) {
      throw new BadgeError(400, "malformed_request", "give the version to download once, as ?v=<version>");
    }
    if (!gate.enter()) {
      const retryAfterS = gate.retryAfterS(device.id);
      res.setHeader("Retry-After", String(retryAfterS));
      throw new BadgeError(503, "busy", `too many downloads in flight; resume after ${retryAfterS} s`, retryAfterS);
    }
    // The place is given back once the connection closed, before the end is recorded.
    let served: Served;
    try {
      served = await serve(req, res, version);
    } finally {
      gate.leave();
    }
    await endFetch(writes, served.fetchId, served.outcome, served.bytesSent, clock()).catch((err: unknown) =>
      logger.error({ err, fetchId: served.fetchId }, "recording the end of a download failed"),
    );
  };

  async function serve(req: Request, res: Response, version: string): Promise<Served> {
    const device = deviceOf(req);
    const permit = await permitFetch(openRollout, releases, device, version);
    if (permit.kind === "refused") throw new BadgeError(permit.status, permit.code, permit.message);
    const { entry, image } = permit;
    const etag = imageEtag(entry.md5);
    res.setHeader("Accept-Ranges", "bytes");
    res.setHeader("ETag", etag);
    const range = requestedRange(req.get("range"), req.get("if-range"), entry.size, etag);
    if (range.kind === "unsatisfiable") {
      res.setHeader("Content-Range", `bytes */${entry.size}`);
      throw new BadgeError(416, "range_unsatisfiable", `the image has ${entry.size} bytes; ask for a range that starts before its end`);
    }
    const [first, last] = range.kind === "part" ? [range.first, range.last] : [0, entry.size - 1];
    const fetchId = await startFetch(writes, device, entry, first, last, clock());
    res.writeHead(range.kind === "part" ? 206 : 200, {
      "Content-Type": "application/octet-stream",
      "Content-Length": String(last - first + 1),
      ...(range.kind === "part" ? { "Content-Range": `bytes ${first}-${last}/${entry.size}` } : {}),
      "Cache-Control": "no-store",
    });
    const sent = { bytes: 0 };
    // "completed" means every byte was handed to the connection; otherwise the badge went away
    // or the link dropped. The kernel may still hold the tail when the link drops, which only the
    // badge's `ota=` report can tell.
    const outcome = (await sendBody(res, image.subarray(first, last + 1), sent)) ? "completed" : "cut";
    return { fetchId, outcome, bytesSent: sent.bytes };
  }
}
