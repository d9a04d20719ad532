// GET /api/badge/ota/download?v= (SPEC 4.9). The file is the manifest entry's, never a name
// from the request; a badge may fetch only its own target release (the one a check would
// offer it). The image is sent with Content-Length and no chunked framing (the badge sends
// HTTP/1.0), in slices of one shared in-memory copy. Range is ignored: a 200 with the whole
// image is the only answer, which a badge that asked for a range can tell from the status.
// Every fetch is recorded with the bytes handed to the connection and whether it completed.
import type { Request, Response } from "express";
import type { Logger } from "pino";
import { quote } from "../../firmware/index.ts";
import { newId } from "../ids.ts";
import { findRelease, targetFor, type ReleaseStore } from "../releases/release-store.ts";
import { finishFetch, insertFetch } from "../store/ota-store.ts";
import type { WriteBatcher } from "../store/write-batcher.ts";
import { BadgeError, deviceOf } from "./badge-http.ts";

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
 * Writes the image slice by slice, the next one once the connection took the last and its turn
 * came (no stream in between: each slice is a view of the shared copy, written straight to the
 * response); resolves when the connection closes, with whether every byte was handed over.
 */
function sendImage(res: Response, image: Buffer, sent: { bytes: number }): Promise<boolean> {
  return new Promise((resolve) => {
    let offset = 0;
    const writeMore = () => {
      // The badge may have gone while this download waited for its turn.
      if (res.destroyed) return;
      while (offset < image.length) {
        const slice = image.subarray(offset, offset + SLICE_BYTES);
        offset += slice.length;
        sent.bytes += slice.length;
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

export function otaDownload(writes: WriteBatcher, releases: ReleaseStore, logger: Logger) {
  return async (req: Request, res: Response) => {
    const device = deviceOf(req);
    const version = req.query.v;
    if (typeof version !== "string" || version.length === 0) {
      throw new BadgeError(400, "malformed_request", "give the version to download once, as ?v=<version>");
    }
    const manifest = await releases.read();
    const entry = findRelease(manifest, version);
    if (!entry) throw new BadgeError(404, "release_unknown", `no published release ${quote(version, 40)}`);
    if (targetFor(manifest, device.id)?.version !== entry.version) {
      throw new BadgeError(403, "not_offered", `release ${entry.version} is not offered to this badge; check for updates first`);
    }
    const image = await releases.imageBytes(entry);
    const fetchId = newId("fch");
    const startedAt = new Date().toISOString();
    await writes.run((trx) =>
      insertFetch(trx, {
        id: fetchId,
        device_id: device.id,
        version: entry.version,
        size: entry.size,
        bytes_sent: 0,
        outcome: "sending",
        started_at: startedAt,
        ended_at: null,
      }),
    );
    res.writeHead(200, {
      "Content-Type": "application/octet-stream",
      "Content-Length": String(entry.size),
      "Cache-Control": "no-store",
    });
    const sent = { bytes: 0 };
    // "completed" means every byte was handed to the connection; otherwise the badge went away
    // or the link dropped. The kernel may still hold the tail when the link drops, which only the
    // badge's `ota=` report can tell.
    const outcome = (await sendImage(res, image, sent)) ? "completed" : "cut";
    const endedAt = new Date().toISOString();
    await writes
      .run((trx) => finishFetch(trx, fetchId, outcome, sent.bytes, endedAt))
      .catch((err: unknown) => logger.error({ err, fetchId }, "recording the end of a download failed"));
  };
}
