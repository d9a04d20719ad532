// A worker thread of the fleet runner (fleet.ts): boots each badge of its shard at its moment,
// drives it as its wearer would, times its requests, and says how each ended.
//
// A badge exists only from its boot until it is at rest, then it is powered off and dropped, so
// 10,000 badges are not alive at once: at most `maxLiveBadges` are; a badge whose moment has
// come waits for one to finish, and the start lag says so. Their flash slots share the pages
// every badge of the thread holds alike (the factory image, the release; hardware/slot-pages.ts),
// so a live badge costs its few pages written differently, not two 1.9 MiB slots.
import { once } from "node:events";
import os from "node:os";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { setImmediate as yieldToIo, setTimeout as sleep } from "node:timers/promises";
import { parentPort, workerData } from "node:worker_threads";
import type { BadgeClient, CheckAnswer, DownloadHead, DownloadResult, SyncAnswer } from "../network/badge-client.ts";
import { loopDelayOf, type BadgeResult, type FleetBadge, type RequestKind, type Shard, type WorkerMessage } from "./fleet.ts";
import { seededRandom } from "./seeded-random.ts";
import { createVirtualBadge, type VirtualBadge } from "../virtual-badge/virtual-badge.ts";

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
  /** draws which downloads the link cuts, and where */
  random: () => number;
}

/** What a badge's last requests got, as its client returned them, and the downloads its link cut. */
interface Exchanges {
  check: CheckAnswer | null;
  sync: SyncAnswer | null;
  download: DownloadResult | null;
  cuts: number;
  /** image bytes its downloads received, all of them */
  receivedBytes: number;
}

/** Thrown out of a download's body handler where the fleet's link drops it; never leaves timeRequests. */
class LinkCut extends Error {}

const post = (message: WorkerMessage) => parentPort!.postMessage(message);

async function runShard(shard: Shard): Promise<void> {
  // On Linux the nice value is the calling thread's, so this thread's alone; elsewhere it is the
  // whole process's (a server running in it too), so it is left as it is.
  if (shard.threadNice !== 0 && process.platform === "linux") os.setPriority(shard.threadNice);
  const began = performance.now();
  const run: ShardRun = {
    shard,
    samples: { check: [], sync: [], downloadHead: [], download: [] },
    downloads: new Int32Array(shard.downloads),
    elapsed: () => performance.now() - began,
    random: seededRandom(shard.link.seed),
  };
  const results: Array<[number, BadgeResult]> = [];
  const startLag: number[] = [];
  let live = 0;
  let slotFreed: (() => void) | null = null;

  const loopDelay = monitorEventLoopDelay({ resolution: 10 });
  loopDelay.enable();
  const report = () => post({ type: "progress", started: startLag.length, finished: results.length, live });
  const reporter = setInterval(report, shard.sampleMs);

  const runOne = async ({ index, spec, serverUrl, pressAt }: Shard["badges"][number]) => {
    results.push([index, await runBadge(run, spec, serverUrl, pressAt)]);
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
 *
 * A badge whose update the link broke (a cut, a stall, no answer, a 503 from the download cap)
 * comes back as the real one would, up to `comeback.max` times: once its NVS says it may (the
 * server's `S` after the report it sent, and a 503's Retry-After, both kept by the model), it
 * wakes and checks again, resuming from its checkpoint. The model has no timer wake-up from deep
 * sleep (badge-sim/README.md, Decisions), so the fleet presses the button for it. The wait runs
 * on the badge's simulated clock, which costs no wall time; a 503's wait is waited in wall time
 * too (times `busyWallScale`), since the downloads that filled the server's cap end in wall time.
 */
async function runBadge(run: ShardRun, spec: FleetBadge, serverUrl: string, pressAt: number | null): Promise<BadgeResult> {
  const asks = pressAt !== null;
  let badge: VirtualBadge | null = null;
  let comebacks = 0;
  let exchanges: Exchanges | null = null;
  const tail = () => ({ asked: asks, version: badge?.runningVersion() ?? null, comebacks, cutDownloads: exchanges?.cuts ?? 0, receivedBytes: exchanges?.receivedBytes ?? 0, badgeMs: badge?.clock.now() ?? 0 });
  try {
    badge = createVirtualBadge({
      serverUrl,
      token: spec.token,
      version: spec.version,
      battery: spec.battery,
      faults: { crashOnBoot: spec.crashOnBoot },
      network: { stallTimeoutMs: run.shard.stallTimeoutMs },
    });
    // The boot's sync starts after the constructor returns (the boot actor's result arrives as
    // a promise), so wrapping the client now still sees every request.
    exchanges = timeRequests(badge.client, run);
    await badge.runUntil(isUp);
    if (asks) {
      const wait = pressAt - run.elapsed();
      if (wait > 0) await sleep(wait);
      badge.checkForUpdate();
    }
    await badge.runUntilIdle();
    let gaveUp = false;
    while (asks && brokenByTheLink(badge, exchanges)) {
      if (comebacks === run.shard.comeback.max) {
        gaveUp = true;
        break;
      }
      comebacks++;
      // what the last try got says nothing of the next one, which may not reach a download
      exchanges.download = null;
      await comeBack(badge, run.shard.comeback.busyWallScale);
    }
    const result: BadgeResult = { ...outcomeOf(badge, spec, asks, exchanges, gaveUp ? comebacks : null), gaveUp, ...tail() };
    badge.stop();
    return result;
  } catch (error) {
    // A crashed badge may still have work under way: its flash is left to the garbage collector.
    badge?.stop();
    return { outcome: "crashed", reason: error instanceof Error ? error.message : String(error), gaveUp: false, ...tail() };
  }
}

const isUp = (badge: VirtualBadge) => ["awake.idle", "unprovisioned", "bricked"].includes(badge.state());

/**
 * Whether the badge's last try at the update ended for a reason of the link or of the server's
 * load, after which the real badge tries again: its check got no usable answer, or its download
 * was cut, stalled, unreachable, or refused with a 5xx (the cap's 503), a 408 or a 429. An
 * answer it cannot use (an MD5 that does not match, a 403, an image that crashes) would only
 * come again, and a badge that runs the offer is done.
 */
function brokenByTheLink(badge: VirtualBadge, exchanges: Exchanges): boolean {
  if (["bricked", "unprovisioned"].includes(badge.state())) return false;
  const check = exchanges.check;
  if (check?.kind === "failed") return true;
  if (check?.kind !== "offer" || badge.runningVersion() === check.offer.version) return false;
  const download = exchanges.download;
  if (download === null) return false;
  return (download.status !== null && (download.status >= 500 || TRANSIENT_REFUSALS.includes(download.status))) || ["cut", "stalled", "unreachable"].includes(download.ending);
}

/** 4xx answers that say "not now" rather than "not this": a request that took too long to arrive, too many requests. */
const TRANSIENT_REFUSALS = [408, 429];

/**
 * The badge asleep after a broken update, woken once its NVS says it may contact the server
 * again (the later of the `S` it was told and a 503's wait), and its update checked for again.
 */
async function comeBack(badge: VirtualBadge, busyWallScale: number): Promise<void> {
  const now = badge.clock.now();
  const busyMs = Math.max(0, badge.storage.serverWaitUntil() - now);
  // contactAfter is on the badge's wall clock (its RTC plus the offset the last sync set)
  const contactMs = Math.max(0, badge.storage.contactAfter() - (now + badge.storage.clockOffsetMs()));
  if (busyMs > 0 && busyWallScale > 0) await sleep(busyMs * busyWallScale);
  await badge.advance(Math.max(busyMs, contactMs));
  if (badge.state() === "asleep") badge.pressButton();
  await badge.runUntil(isUp);
  badge.checkForUpdate();
  await badge.runUntilIdle();
}

/**
 * Wraps the client's three requests on this one instance to time them; the calls, their
 * arguments and answers are passed through unchanged, but for what the fleet's link does to a
 * download (`shard.link`): it strips Range when the fleet does not resume, and it drops
 * `cutShare` of the image downloads at a random byte of the body, which the badge sees as a
 * connection that closed (ending `cut`) and the server as a client gone. A download is timed to
 * its status line (the server's latency) and to its end (the whole image, the badge's own flash
 * writes included).
 */
function timeRequests(client: BadgeClient, { samples, downloads, shard, random }: ShardRun): Exchanges {
  const exchanges: Exchanges = { check: null, sync: null, download: null, cuts: 0, receivedBytes: 0 };
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
  client.download = async (token, path, handlers, signal, range) => {
    const started = performance.now();
    const inFlight = Atomics.add(downloads, 0, 1) + 1;
    for (let most = Atomics.load(downloads, 1); most < inFlight; most = Atomics.load(downloads, 1)) {
      if (Atomics.compareExchange(downloads, 1, most, inFlight) === most) break;
    }
    const cuts = random() < shard.link.cutShare;
    let head: DownloadHead | null = null;
    let cutAt: number | null = null;
    let received = 0;
    try {
      const linkHandlers = {
        onHead: (seen: DownloadHead) => {
          samples.downloadHead.push(performance.now() - started);
          head = seen;
          if (cuts && (seen.status === 200 || seen.status === 206) && seen.contentLength !== null) cutAt = Math.floor(random() * seen.contentLength);
          handlers.onHead?.(seen);
        },
        onBody: (chunk: Uint8Array) => {
          if (cutAt !== null && received + chunk.length > cutAt) {
            if (cutAt > received) handlers.onBody(chunk.subarray(0, cutAt - received));
            received = cutAt;
            throw new LinkCut();
          }
          handlers.onBody(chunk);
          received += chunk.length;
        },
      };
      exchanges.download = await download.call(client, token, path, linkHandlers, signal, shard.link.resume ? range : undefined).catch((error: unknown) => {
        if (!(error instanceof LinkCut)) throw error;
        exchanges.cuts++;
        const { status, contentLength } = head!;
        return { status, contentLength, bytes: received, retryAfterS: null, ending: "cut", refusal: null, error: "the fleet's link dropped the connection" } satisfies DownloadResult;
      });
      exchanges.receivedBytes += exchanges.download.bytes;
      return exchanges.download;
    } finally {
      Atomics.sub(downloads, 0, 1);
      samples.download.push(performance.now() - started);
    }
  };
  return exchanges;
}

function outcomeOf(badge: VirtualBadge, spec: FleetBadge, asks: boolean, exchanges: Exchanges, comebacks: number | null): Pick<BadgeResult, "outcome" | "reason"> {
  if (badge.observations("token.cleared").length > 0) return { outcome: "unauthorized", reason: null };
  if (badge.state() === "bricked") return { outcome: "bricked", reason: null };
  if (spec.token === null) return { outcome: "unprovisioned", reason: null };
  // Failures it came back from do not count against a badge that runs the offer in the end.
  const last = exchanges.check;
  if (asks && last?.kind === "offer" && badge.runningVersion() === last.offer.version) return { outcome: "updated", reason: null };
  if (comebacks !== null) return { outcome: "update failed", reason: `gave up after ${comebacks} comebacks: ${lastNotice(badge) ?? "no notice"}` };
  const failure = badge.observations("report.stored").findLast((entry) => entry.detail.startsWith("err|"));
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
