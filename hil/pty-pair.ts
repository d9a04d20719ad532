// Two linked pseudo-terminals made by socat, as symlinks in a temporary directory: a serial line
// with a host end and a device end, for a simulated badge (or a fake ROM loader) and the tests
// and benchmarks that drive it through the platform's serial binding.
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

export interface PtyPair {
  /** the end the host (flasher, console, CLI) opens */
  host: string;
  /** the end the badge, simulated or fake, sits on */
  device: string;
  /** stops socat and removes the links; safe to call more than once */
  close(): Promise<void>;
}

const READY_WITHIN_MS = 5000;

export async function openPtyPair(): Promise<PtyPair> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "badgebench-pty-"));
  const host = path.join(dir, "host");
  const device = path.join(dir, "device");
  const socat = spawn("socat", [`pty,raw,echo=0,link=${host}`, `pty,raw,echo=0,link=${device}`], { stdio: "ignore" });
  const spawnError = new Promise<Error>((resolve) => socat.once("error", resolve));
  const exited = new Promise<void>((resolve) => socat.once("close", () => resolve()));
  let closing: Promise<void> | null = null;
  const close = () =>
    (closing ??= (async () => {
      if (socat.exitCode === null && socat.signalCode === null && socat.pid !== undefined) socat.kill();
      await Promise.race([exited, spawnError]);
      fs.rmSync(dir, { recursive: true, force: true });
    })());
  for (let waited = 0; !(fs.existsSync(host) && fs.existsSync(device)); waited += 10) {
    const failed = await Promise.race([spawnError, sleep(10).then(() => null)]);
    if (failed || waited > READY_WITHIN_MS || socat.exitCode !== null) {
      await close();
      throw new Error(`socat did not make a pty pair within ${READY_WITHIN_MS / 1000} s${failed ? `: ${failed.message}` : ""}; is socat installed (apt-get install socat)?`);
    }
  }
  return { host, device, close };
}
