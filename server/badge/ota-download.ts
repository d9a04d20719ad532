// GET /api/badge/ota/download?v= (SPEC 4.9). The file is the manifest entry's, never a name
// from the request; a badge may fetch only its own target release (the one a check would
// offer it). The image is streamed with Content-Length and no chunked framing (the badge sends
// HTTP/1.0). Range is ignored: a 200 with the whole image is the only answer, which a badge
// that asked for a range can tell from the status. Every fetch is recorded with the bytes
// handed to the connection and whether it completed or was cut.
import fs from "node:fs";
import { pipeline } from "node:stream/promises";
import type { Request, Response } from "express";
import type { Logger } from "pino";
import { newId } from "../ids.ts";
import { findRelease, targetFor, type ReleaseStore } from "../releases/release-store.ts";
import { finishFetch, insertFetch } from "../store/ota-store.ts";
import type { Db } from "../store/schema.ts";
import { BadgeError, deviceOf } from "./badge-http.ts";

const CHUNK_BYTES = 64 * 1024;

export function otaDownload(db: Db, releases: ReleaseStore, logger: Logger) {
  return async (req: Request, res: Response) => {
    const device = deviceOf(req);
    const version = req.query.v;
    if (typeof version !== "string" || version.length === 0) {
      throw new BadgeError(400, "malformed_request", "give the version to download once, as ?v=<version>");
    }
    const manifest = releases.read();
    const entry = findRelease(manifest, version);
    if (!entry) throw new BadgeError(404, "release_unknown", `no published release ${JSON.stringify(version.slice(0, 40))}`);
    if (targetFor(manifest, device.id)?.version !== entry.version) {
      throw new BadgeError(403, "not_offered", `release ${entry.version} is not offered to this badge; check for updates first`);
    }
    const file = releases.imagePath(entry);
    const handle = await fs.promises.open(file, "r");
    let bytesSent = 0;
    const fetchId = newId("fch");
    try {
      const { size } = await handle.stat();
      if (size !== entry.size) {
        throw new Error(`release image ${file} is ${size} bytes; the manifest says ${entry.size}`);
      }
      await insertFetch(db, {
        id: fetchId,
        device_id: device.id,
        version: entry.version,
        size: entry.size,
        bytes_sent: 0,
        outcome: "sending",
        started_at: new Date().toISOString(),
        ended_at: null,
      });
    } catch (error) {
      await handle.close();
      throw error;
    }
    res.writeHead(200, {
      "Content-Type": "application/octet-stream",
      "Content-Length": String(entry.size),
      "Cache-Control": "no-store",
    });
    const stream = handle.createReadStream({ highWaterMark: CHUNK_BYTES });
    stream.on("data", (chunk) => {
      bytesSent += chunk.length;
    });
    try {
      await pipeline(stream, res);
    } catch {
      // The badge went away or the link dropped: recorded as cut below.
    }
    const outcome = res.writableFinished ? "completed" : "cut";
    await finishFetch(db, fetchId, outcome, bytesSent, new Date().toISOString()).catch((err: unknown) =>
      logger.error({ err, fetchId }, "recording the end of a download failed"),
    );
  };
}
