// The server's own time per badge request, from its headers parsed to its last byte handed to
// the socket (node:http's diagnostics channels), for the fleet benchmark (bench-sim-fleet.ts):
// in the benchmark's process when the server runs there, or in each server process it spawns,
// through server-request-timing-preload.ts, which hands the samples back in a file.
import diagnostics from "node:diagnostics_channel";
import type { IncomingMessage, ServerResponse } from "node:http";
import { performance } from "node:perf_hooks";
import { BADGE_PATHS } from "../../firmware/index.ts";

const SERVER_TIMED_PATHS = { check: BADGE_PATHS.check, sync: BADGE_PATHS.sync } as const;
export type ServerTimed = keyof typeof SERVER_TIMED_PATHS;
/**
 * Per request, by kind: [when it started, epoch ms; how long it took, wall ms]. Beside them, the
 * image downloads as this server served them (ServedDownloads): the most at once (a download
 * counts from its 200 or 206 head to its connection's close) and the body bytes it handed to
 * their connections.
 */
export type ServerSamples = Record<ServerTimed, Array<[number, number]>>;
export interface ServedDownloads {
  peakInFlight: number;
  bodyBytes: number;
}

/** Times this process's server's requests to the SERVER_TIMED_PATHS until stop() is called. */
export function timeServerRequests(): { stop(): ServerSamples; takeDownloads(): ServedDownloads } {
  // The kind is read at the start: Express rewrites request.url while routing (a mounted router sees its own part).
  const started = new WeakMap<IncomingMessage, { at: number; kind: ServerTimed }>();
  const samples: ServerSamples = { check: [], sync: [] };
  let downloads: ServedDownloads = { peakInFlight: 0, bodyBytes: 0 };
  let inFlight = 0;
  const onStart = (message: unknown) => {
    const { request, response } = message as { request: IncomingMessage; response: ServerResponse };
    if (request.url?.startsWith(`${BADGE_PATHS.download}?`)) countDownload(response);
    const kind = (Object.keys(SERVER_TIMED_PATHS) as ServerTimed[]).find((k) => request.url === SERVER_TIMED_PATHS[k]);
    if (kind) started.set(request, { at: performance.now(), kind });
  };
  const onFinish = (message: unknown) => {
    const timing = started.get((message as { request: IncomingMessage }).request);
    if (timing) samples[timing.kind].push([performance.timeOrigin + timing.at, performance.now() - timing.at]);
  };
  // The route writes the image's head with writeHead and its body with write, its last slice
  // with end (ota-download.ts): this response's own three methods are wrapped, nothing else.
  const countDownload = (response: ServerResponse) => {
    const { writeHead, write, end } = response;
    let image = false;
    response.writeHead = function (this: ServerResponse, ...args: Parameters<ServerResponse["writeHead"]>) {
      // A badge that left while its fetch was being recorded closed the response already: it is
      // not in flight, and its close, gone by, would never take it off the count.
      if (!image && (args[0] === 200 || args[0] === 206) && !response.closed) {
        image = true;
        downloads.peakInFlight = Math.max(downloads.peakInFlight, ++inFlight);
        response.once("close", () => inFlight--);
      }
      return writeHead.apply(this, args);
    } as ServerResponse["writeHead"];
    response.write = function (this: ServerResponse, chunk: unknown, ...rest: unknown[]) {
      if (image && chunk instanceof Uint8Array) downloads.bodyBytes += chunk.length;
      return (write as (...a: unknown[]) => boolean).call(this, chunk, ...rest);
    } as ServerResponse["write"];
    response.end = function (this: ServerResponse, chunk?: unknown, ...rest: unknown[]) {
      if (image && chunk instanceof Uint8Array) downloads.bodyBytes += chunk.length;
      return (end as (...a: unknown[]) => ServerResponse).call(this, chunk, ...rest);
    } as ServerResponse["end"];
  };
  diagnostics.subscribe("http.server.request.start", onStart);
  diagnostics.subscribe("http.server.response.finish", onFinish);
  return {
    /** the downloads since the last call (or the start), and counting afresh from now */
    takeDownloads() {
      const taken = downloads;
      downloads = { peakInFlight: inFlight, bodyBytes: 0 };
      return taken;
    },
    // Epoch ms, so that samples from other processes compare with moments taken here.
    stop() {
      diagnostics.unsubscribe("http.server.request.start", onStart);
      diagnostics.unsubscribe("http.server.response.finish", onFinish);
      return samples;
    },
  };
}

/** The environment variable naming the file a spawned server's preload writes its samples to. */
export const TIMINGS_FILE_ENV = "BADGEBENCH_BENCH_REQUEST_TIMINGS";
/** A spawned server's preload writes takeDownloads() to this file on SIGUSR2 (bench-sim-fleet.ts, between fleets). */
export const downloadsFileOf = (timingsFile: string) => `${timingsFile}.downloads`;
