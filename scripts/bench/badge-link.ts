// The link of bench-sim-fleet's badges when `--badge-link` is given: the benchmark runs again in a
// network namespace of its own (`unshare --net`, gone with the process, so nothing is left to
// tear down), whose TCP is set as a badge's link and a download server's host would be.
//
// Why: the fleet's served figure counts what the server handed to each download's connection,
// and a cut wastes what the kernels held beyond the cut. On the host's loopback that is the rest
// of the image: the server's send buffer starts at its 4 MiB maximum (it is sized from the MSS,
// 64 KiB on loopback) and each badge's receive buffer autotunes to megabytes, so the server
// handed the whole image over at once and a cut at a random byte wasted half an image. Inside:
// - `tcp_moderate_rcvbuf = 0`: a badge's receive buffer stays at the kernel's initial 128 KiB
//   (a window of at most 64 KiB), as lwIP's is fixed (TCP_WND, at most 65,535 bytes: no window
//   scaling);
// - `tcp_notsent_lowat = 16384`: the server's host keeps about 16 KiB of a connection's bytes
//   unsent (a write goes on while less is: one segment's worth more at most), the setting
//   server/README.md recommends for a server of downloads (Node cannot set TCP_NOTSENT_LOWAT on
//   one socket). Measured apart: the fixed receive buffers alone left the figure where it was;
//   the server's unsent bytes were the megabytes.
import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import { BenchUsageError } from "./bench-cli.ts";

/** Set in the rerun's environment. */
const RERUN_ENV = "BADGEBENCH_BENCH_BADGE_LINK";

/** The namespace's TCP settings, under /proc/sys. */
export const BADGE_LINK_SYSCTLS = { "net/ipv4/tcp_moderate_rcvbuf": "0", "net/ipv4/tcp_notsent_lowat": "16384" } as const;

const networkNamespace = (pid: number | "self") => fs.readlinkSync(`/proc/${pid}/ns/net`);

/** Whether this process is the benchmark rerun inside the badge link's namespace. */
export const inBadgeLink = () => process.env[RERUN_ENV] === "1";

/**
 * Runs this process's command again inside a network namespace of its own and resolves with its
 * exit code. Needs root (CAP_SYS_ADMIN) and util-linux's unshare.
 */
export function rerunInBadgeLink(): Promise<number> {
  if (process.getuid?.() !== 0) throw new BenchUsageError("--badge-link needs root: it runs the benchmark in a network namespace of its own (unshare --net)");
  const child = spawn("unshare", ["--net", "--", process.execPath, ...process.execArgv, ...process.argv.slice(1)], {
    stdio: "inherit",
    env: { ...process.env, [RERUN_ENV]: "1" },
  });
  // Ctrl-C reaches the rerun too (same process group): this process only waits for it.
  const ignore = () => undefined;
  process.on("SIGINT", ignore);
  return new Promise((resolve, reject) => {
    child.once("error", (error) => reject(new Error(`--badge-link: cannot run unshare: ${error.message}`)));
    child.once("exit", (code) => {
      process.off("SIGINT", ignore);
      resolve(code ?? 1);
    });
  });
}

/**
 * In the rerun: brings the namespace's loopback up and sets its TCP settings, after making sure
 * this process is not in its parent's namespace (unshare execs the rerun, so the parent is the
 * benchmark that started it, on the host: a stray RERUN_ENV must not change the host's settings).
 */
export function setUpBadgeLink(): void {
  if (networkNamespace("self") === networkNamespace(process.ppid)) {
    throw new Error(`${RERUN_ENV} is set but this process shares its parent's network namespace: refusing to change the host's TCP settings`);
  }
  execFileSync("ip", ["link", "set", "lo", "up"]);
  for (const [key, value] of Object.entries(BADGE_LINK_SYSCTLS)) fs.writeFileSync(`/proc/sys/${key}`, value);
}
