// Benchmarks resumable downloads (issue 23) against the in-process server (scripts/harness/sim-server.ts):
//
// 1. Bytes sent for one update of the whole slot (OTA_SLOT_BYTES = 1,966,080 bytes) whose first
//    download is cut at 90 % and which then completes: the simulated badge behind a fault proxy
//    that drops the first download at byte 1,769,472 (90 %), then Check for Update again. The
//    bytes are the download bodies the proxy forwarded. "Before" is the same badge behind a proxy
//    that also strips Range (the `range` fault `ignore`), so the server answers the resume with
//    the whole image: what every badge did before it resumed. Goal: at most the image + 64 KiB.
// 2. Download throughput with ranges vs without, same run: `--downloads` fetches each of the whole
//    image over the badge's HTTP client, in ABBA order, a plain GET (200) and one with
//    `Range: bytes=0-` and the image's If-Range (206, the same bytes): the median MiB/s of each.
// Usage: npx tsx scripts/bench/bench-resume.ts [--downloads 40] [--json]
import { performance } from "node:perf_hooks";
import { BadgeClient } from "../../badge-sim/network/badge-client.ts";
import type { Fault } from "../../badge-sim/network/fault-proxy/faults.ts";
import { startFaultProxy } from "../../badge-sim/network/fault-proxy/proxy.ts";
import { createVirtualBadge } from "../../badge-sim/virtual-badge/virtual-badge.ts";
import { BADGE_PATHS, imageEtag, md5Hex, OTA_SLOT_BYTES } from "../../firmware/index.ts";
import { startSimServer, type SimServer } from "../harness/sim-server.ts";
import { benchArgs, positiveInt, writeReport } from "./bench-cli.ts";
import { commandLine, cpusAndNode, loadAverage, log, median, MiB, round } from "./bench-common.ts";

const CHECKPOINT_SLACK = 64 * 1024;
const CUT_AT = Math.floor(OTA_SLOT_BYTES * 0.9);

/** One update cut at 90 % then completed: the download body bytes the proxy forwarded. */
async function cutThenComplete(sim: SimServer, md5: string, name: string, resumeFaults: Fault[]): Promise<number> {
  const device = await sim.addDevice(name);
  const proxy = await startFaultProxy({ target: sim.url, faults: [{ kind: "drop", atByte: CUT_AT, nth: 1 }, ...resumeFaults] });
  const badge = createVirtualBadge({ serverUrl: proxy.url, token: device.token, version: "1.4.0", battery: { volts: 4.1, charging: true } });
  try {
    await badge.runUntilState("awake.idle");
    badge.checkForUpdate();
    await badge.runUntil((b) => b.observations("report.cleared").length === 1 && b.state() === "awake.idle");
    badge.checkForUpdate();
    await badge.runUntil((b) => b.observations("report.cleared").length === 2);
    if (badge.runningVersion() !== "1.5.0" || md5Hex(badge.flash.slot(badge.runningSlot()!).subarray(0, OTA_SLOT_BYTES)) !== md5) {
      throw new Error(`${name}: the update did not install the release (runs ${badge.runningVersion()})`);
    }
    const downloads = new Set(proxy.log.flatMap((event) => (event.type === "request" && event.path.startsWith(BADGE_PATHS.download) ? [event.request] : [])));
    return proxy.log.reduce((sum, event) => sum + (event.type === "body" && downloads.has(event.request) ? event.bytes : 0), 0);
  } finally {
    badge.stop();
    await proxy.close();
  }
}

/** MiB/s of each download, alternating plain and ranged; the medians are compared (one slow download on a busy machine moves a total, not a median). */
async function throughput(sim: SimServer, md5: string, downloads: number): Promise<{ plain: number; ranged: number }> {
  const device = await sim.addDevice("throughput");
  const client = new BadgeClient({ baseUrl: sim.url });
  const rates: Record<"plain" | "ranged", number[]> = { plain: [], ranged: [] };
  for (let i = 0; i < downloads * 2; i++) {
    // ABBA order: neither kind always goes first
    const kind = ((i >> 1) ^ i) & 1 ? "ranged" : "plain";
    let received = 0;
    const started = performance.now();
    const result = await client.download(device.token, "/api/badge/ota/download?v=1.5.0", { onBody: (chunk) => (received += chunk.length) }, undefined, kind === "ranged" ? { from: 0, etag: imageEtag(md5) } : undefined);
    const seconds = (performance.now() - started) / 1000;
    if (result.status !== (kind === "ranged" ? 206 : 200) || received !== OTA_SLOT_BYTES) throw new Error(`${kind} download: HTTP ${result.status}, ${received} bytes`);
    rates[kind].push(received / MiB / seconds);
  }
  return { plain: median(rates.plain), ranged: median(rates.ranged) };
}

async function main(): Promise<void> {
  const values = benchArgs({ downloads: { type: "string", default: "40" } });
  const downloads = positiveInt("downloads", values.downloads);
  const loadBefore = loadAverage();
  const sim = await startSimServer();
  try {
    const release = await sim.publish({ version: "1.5.0", size: OTA_SLOT_BYTES });
    const resumed = await cutThenComplete(sim, release.md5, "resume", []);
    const restarted = await cutThenComplete(sim, release.md5, "no-resume", [{ kind: "range", mode: "ignore" }]);
    log(`cut at ${CUT_AT} then completed: ${resumed} bytes with resume, ${restarted} without`);
    const rates = await throughput(sim, release.md5, downloads);
    const report = {
      figure: "resume",
      image_bytes: OTA_SLOT_BYTES,
      cut_at: CUT_AT,
      bytes_sent: { with_resume: resumed, without_resume: restarted, with_resume_x_image: round(resumed / OTA_SLOT_BYTES, 3), without_resume_x_image: round(restarted / OTA_SLOT_BYTES, 3) },
      goal_bytes: OTA_SLOT_BYTES + CHECKPOINT_SLACK,
      pass: resumed <= OTA_SLOT_BYTES + CHECKPOINT_SLACK,
      throughput_mib_s: { whole: round(rates.plain, 1), range: round(rates.ranged, 1), ratio: round(rates.ranged / rates.plain, 3), downloads_each: downloads },
      load_before: loadBefore,
      load_after: loadAverage(),
      machine: cpusAndNode(),
      command: commandLine("bench-resume.ts"),
    };
    writeReport(report, values.json, (r) => [
      `| bytes sent for one ${OTA_SLOT_BYTES}-byte update cut at 90 % then completed | with resume ${r.bytes_sent.with_resume} (**${r.bytes_sent.with_resume_x_image}x** the image); without (Range ignored) ${r.bytes_sent.without_resume} (${r.bytes_sent.without_resume_x_image}x) | at most the image + 64 KiB (${r.goal_bytes}) | \`${r.command}\` |`,
      `| download throughput, whole image with Range: bytes=0- (206) vs without (200), median of ${downloads} each in ABBA order, one client | ${r.throughput_mib_s.range} vs ${r.throughput_mib_s.whole} MiB/s: **${r.throughput_mib_s.ratio}x** | within noise of 1x | \`${r.command}\` |`,
      `load average before ${r.load_before.join(" ")}, after ${r.load_after.join(" ")}`,
    ]);
  } finally {
    await sim.close();
  }
}

await main();
