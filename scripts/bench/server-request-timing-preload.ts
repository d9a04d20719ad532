// Loaded into a spawned server (`node --import tsx --import THIS dist/serve.js`) by
// bench-sim-fleet.ts: times its badge requests (server-request-timing.ts) and, when the process
// exits, writes the samples as JSON to the file named by BADGEBENCH_BENCH_REQUEST_TIMINGS; on
// SIGUSR2 it writes the downloads served since the last one beside it (downloadsFileOf).
import fs from "node:fs";
import { downloadsFileOf, timeServerRequests, TIMINGS_FILE_ENV } from "./server-request-timing.ts";

const file = process.env[TIMINGS_FILE_ENV];
if (file) {
  const timing = timeServerRequests();
  process.once("exit", () => fs.writeFileSync(file, JSON.stringify(timing.stop())));
  // Written to a new name and renamed, so the reader never sees half a file.
  process.on("SIGUSR2", () => {
    fs.writeFileSync(`${downloadsFileOf(file)}.tmp`, JSON.stringify(timing.takeDownloads()));
    fs.renameSync(`${downloadsFileOf(file)}.tmp`, downloadsFileOf(file));
  });
}
