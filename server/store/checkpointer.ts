// WAL checkpoints off the request path. SQLite copies the write-ahead log back into the database
// file (a checkpoint) on the connection whose commit pushes the log past wal_autocheckpoint
// pages; better-sqlite3 runs it on the thread that called commit, so one request in every few
// stalled the whole server while pages were copied and fsynced (in the sync benchmark, commits
// took a third of the run). The server's connection keeps a high wal_autocheckpoint as a safety
// net only, and this worker thread, with a connection of its own, runs a PASSIVE checkpoint every
// CHECKPOINT_INTERVAL_MS: it never blocks a writer, and a commit is durable once the log holding
// it is synced (Store.logSynced under --sync full), which a checkpoint does not change.
import { createRequire } from "node:module";
import { Worker } from "node:worker_threads";

/** SQLite's `synchronous` for the serving connection and this worker's: `full` syncs the log at every commit. */
export type SyncMode = "full" | "normal";

export const CHECKPOINT_INTERVAL_MS = 200;
/** The serving connection's wal_autocheckpoint: only reached if the worker cannot keep up. */
export const FALLBACK_AUTOCHECKPOINT_PAGES = 10_000;

// Plain JavaScript, evaluated in the worker (no TypeScript loader there).
const WORKER_SOURCE = `
const { parentPort, workerData } = require("node:worker_threads");
const SQLite = require(workerData.driver);
const db = new SQLite(workerData.file);
db.pragma("busy_timeout = 5000");
db.pragma("synchronous = " + workerData.sync);
const timer = setInterval(() => {
  try {
    db.pragma("wal_checkpoint(PASSIVE)");
  } catch (error) {
    parentPort.postMessage({ error: String(error && error.message) });
  }
}, workerData.intervalMs);
parentPort.on("message", () => {
  clearInterval(timer);
  db.close();
  parentPort.close();
});
`;

export interface Checkpointer {
  stop(): Promise<void>;
}

export function startCheckpointer(file: string, sync: SyncMode, onError: (message: string) => void): Checkpointer {
  const driver = createRequire(import.meta.url).resolve("better-sqlite3");
  const worker = new Worker(WORKER_SOURCE, {
    eval: true,
    workerData: { file, driver, sync: sync.toUpperCase(), intervalMs: CHECKPOINT_INTERVAL_MS },
  });
  worker.on("message", (message: { error: string }) => onError(message.error));
  worker.on("error", (error) => onError(error.message));
  worker.unref();
  return {
    stop: () =>
      new Promise<void>((resolve) => {
        if (worker.threadId === -1) return resolve();
        worker.once("exit", () => resolve());
        worker.ref(); // the process waits for the worker's connection to close
        worker.postMessage("stop");
      }),
  };
}
