// A worker thread of the fleet runner (fleet.ts): boots each badge of its shard at its moment,
// drives it as its wearer would, times its requests, and says how each ended.
//
// A badge exists only from its boot until it is at rest, then it is powered off and dropped, so
// 10,000 badges are not alive at once: at most `maxLiveBadges` are; a badge whose moment has
// come waits for one to finish, and the start lag says so. Their flash slots share the pages
// every badge of the thread holds alike (the factory image, the release; hardware/slot-pages.ts),
// so a live badge costs its few pages written differently, not two 1.9 MiB slots.
import { once } from "node:events";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { setImmediate as yieldToIo, setTimeout as sleep } from "node:timers/promises";
import { parentPort, workerData } from "node:worker_threads";
import type { BadgeClient, CheckAnswer, SyncAnswer } from "./badge-client.ts";
import { loopDelayOf, type BadgeResult, type FleetBadge, type RequestKind, type Shard, type WorkerMessage } from "./fleet.ts";
import { createVirtualBadge, type VirtualBadge } from "./virtual-badge.ts";

/** Badges started in one go when behind schedule; each start is about 5 ms of work. */
const STARTS_PER_TURN = 10;

/** What runBadge needs from the shard around it. */
interface ShardRun {
  shard: Shard;
  samples: Record<RequestKind, number[]>;
  /** [in flight, the most at once], across all the workers */
  downloads: Int32Array;
  /** wall ms since the fleet began */
  elapsed: () => number;
}

/** What a badge's requests got, as its client returned them. */
interface Exchanges {
  check: CheckAnswer | null;
  sync: SyncAnswer | null;
}

const post = (message: WorkerMessage) => parentPort!.postMessage(message);

async function runShard(shard: Shard): Promise<void> {
  const began = performance.now();
  const run: ShardRun = {
    shard,
    samples: { check: [], sync: [], downloadHead: [], download: [] },
    downloads: new Int32Array(shard.downloads),
    elapsed: () => performance.now() - began,
  };
  const results: Array<[number, BadgeResult]> = [];
  const startLag: number[] = [];
  let live = 0;
  let slotFreed: (() => void) | null = null;

  const loopDelay = monitorEventLoopDelay({ resolution: 10 });
  loopDelay.enable();
  const report = () => post({ type: "progress", started: startLag.length, finished: results.length, live });
  const reporter = setInterval(report, shard.sampleMs);

  const runOne = async ({ index, spec, pressAt }: Shard["badges"][number]) => {
    results.push([index, await runBadge(run, spec, pressAt)]);
    live--;
    slotFreed?.();
  };
  try {
    const running: Array<Promise<void>> = [];
    let startsSinceYield = 0;
    for (const badge of [...shard.badges].sort((a, b) => a.bootAt - b.bootAt)) {
      const wait = badge.bootAt - run.elapsed();
      if (wait > 0) {
        await sleep(wait);
        startsSinceYield = 0;
      } else if (++startsSinceYield >= STARTS_PER_TURN) {
        // Behind schedule: catch up a few badges at a time, serving the running ones' sockets between.
        await yieldToIo();
        startsSinceYield = 0;
      }
      while (live >= shard.maxLiveBadges) await new Promise<void>((resolve) => (slotFreed = resolve));
      startLag.push(Math.max(0, run.elapsed() - badge.bootAt));
      live++;
      running.push(runOne(badge));
    }
    await Promise.all(running);
  } finally {
    clearInterval(reporter);
    loopDelay.disable();
  }
  report();
  post({ type: "done", results, samples: run.samples, startLag, loopDelay: loopDelayOf(loopDelay) });
}

/**
 * One badge from boot to rest, then powered off for good so its memory can go. `pressAt` is
 * when its wearer presses Check for Update (fleet wall ms; 0: as soon as it is up), or null
 * when the wearer does not ask.
 */
async function runBadge(run: ShardRun, spec: FleetBadge, pressAt: number | null): Promise<BadgeResult> {
  const asks = pressAt !== null;
  let badge: VirtualBadge | null = null;
  try {
    badge = createVirtualBadge({
      serverUrl: run.shard.serverUrl,
      token: spec.token,
      version: spec.version,
      battery: spec.battery,
      network: { stallTimeoutMs: run.shard.stallTimeoutMs },
    });
    // The boot's sync starts after the constructor returns (the boot actor's result arrives as
    // a promise), so wrapping the client now still sees every request.
    const exchanges = timeRequests(badge.client, run);
    await badge.runUntil((b) => ["awake.idle", "unprovisioned", "bricked"].includes(b.state()));
    if (asks) {
      const wait = pressAt - run.elapsed();
      if (wait > 0) await sleep(wait);
      badge.checkForUpdate();
    }
    await badge.runUntilIdle();
    const result: BadgeResult = { ...outcomeOf(badge, spec, asks, exchanges), asked: asks, version: badge.runningVersion() };
    badge.stop();
    return result;
  } catch (error) {
    // A crashed badge may still have work under way: its flash is left to the garbage collector.
    badge?.stop();
    return { outcome: "crashed", reason: error instanceof Error ? error.message : String(error), asked: asks, version: badge?.runningVersion() ?? null };
  }
}

/**
 * Wraps the client's three requests on this one instance to time them; the calls, their
 * arguments and answers are passed through unchanged. A download is timed to its status line
 * (the server's latency) and to its end (the whole image, the badge's own flash writes included).
 */
function timeRequests(client: BadgeClient, { samples, downloads }: ShardRun): Exchanges {
  const exchanges: Exchanges = { check: null, sync: null };
  const { check, sync, download } = client;
  client.check = async (...args) => {
    const started = performance.now();
    exchanges.check = await check.apply(client, args);
    samples.check.push(performance.now() - started);
    return exchanges.check;
  };
  client.sync = async (...args) => {
    const started = performance.now();
    exchanges.sync = await sync.apply(client, args);
    samples.sync.push(performance.now() - started);
    return exchanges.sync;
  };
  client.download = async (token, path, handlers, signal) => {
    const started = performance.now();
    const inFlight = Atomics.add(downloads, 0, 1) + 1;
    for (let most = Atomics.load(downloads, 1); most < inFlight; most = Atomics.load(downloads, 1)) {
      if (Atomics.compareExchange(downloads, 1, most, inFlight) === most) break;
    }
    try {
      const timedHandlers = {
        onHead: (status: number, contentLength: number | null) => {
          samples.downloadHead.push(performance.now() - started);
          handlers.onHead?.(status, contentLength);
        },
        onBody: handlers.onBody,
      };
      return await download.call(client, token, path, timedHandlers, signal);
    } finally {
      Atomics.sub(downloads, 0, 1);
      samples.download.push(performance.now() - started);
    }
  };
  return exchanges;
}

function outcomeOf(badge: VirtualBadge, spec: FleetBadge, asks: boolean, exchanges: Exchanges): Pick<BadgeResult, "outcome" | "reason"> {
  if (badge.observations("token.cleared").length > 0) return { outcome: "unauthorized", reason: null };
  if (badge.state() === "bricked") return { outcome: "bricked", reason: null };
  if (spec.token === null) return { outcome: "unprovisioned", reason: null };
  const failure = badge.observations("report.stored").find((entry) => entry.detail.startsWith("err|"));
  if (failure) return { outcome: "update failed", reason: failure.detail.split("|").slice(2).join("|") };
  if (asks) {
    const answer = exchanges.check;
    if (answer === null) return { outcome: "no radio", reason: null };
    switch (answer.kind) {
      case "current":
        return { outcome: "current", reason: null };
      case "refused":
        return { outcome: "refused", reason: answer.code };
      case "failed":
        return { outcome: "check failed", reason: answer.message };
      case "unauthorized":
        return { outcome: "unauthorized", reason: null };
      case "offer":
        if (badge.runningVersion() === answer.offer.version) return { outcome: "updated", reason: null };
        return { outcome: "declined", reason: lastNotice(badge) };
    }
  }
  const answer = exchanges.sync;
  if (answer === null) return { outcome: "no radio", reason: null };
  if (answer.kind === "failed") return { outcome: "sync failed", reason: answer.message };
  return { outcome: "checked in", reason: null };
}

/** The last notice the badge showed under its title (why it would not install, for one). */
function lastNotice(badge: VirtualBadge): string | null {
  const notices = badge.observations("screen").flatMap((entry) => entry.detail.split("\n").slice(1, 2));
  return notices.at(-1) ?? null;
}

post({ type: "ready" });
await once(parentPort!, "message");
await runShard(workerData as Shard);
