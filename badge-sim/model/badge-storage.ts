// What the badge firmware keeps in NVS, and so what survives a reboot or a brownout: the
// device token, the pending `ota=` report, the record of an install under way, the queue of
// card taps, when to contact the server next, the offset of its wall clock, and where a cut
// download resumes.
import type { Nvs } from "../hardware/nvs.ts";

/** An install under way: written before the download starts, so a power cut cannot hide it. */
export interface InstallRecord {
  version: string;
  display: string;
  stage: "download" | "switch";
  /** image bytes written at the last checkpoint (every CHECKPOINT_BYTES) */
  bytes: number;
  total: number;
}

/**
 * Where a cut download can resume (issue 23): the last checkpoint, the MD5 state of the bytes
 * before it (hash-wasm's saved state, base64; at a 64 KiB boundary it is MD5's four words and the
 * length, with an empty block buffer), and the offer it belongs to. It outlives the failed
 * attempt's report: the next download of the same offer asks for the rest.
 */
export interface ResumePoint {
  version: string;
  size: number;
  md5: string;
  bytes: number;
  md5State: string;
}

export interface QueuedTap {
  n: number;
  uid: string;
  unixS: number;
}

/** How often the download's progress is recorded: a report after a power cut is this precise. */
export const CHECKPOINT_BYTES = 64 * 1024;
/** The first retry after a failed contact; it doubles with every failure, up to the cap. */
export const FIRST_BACKOFF_MS = 60_000;
export const MAX_BACKOFF_MS = 3600_000;

const KEY = {
  token: "token",
  report: "ota.report",
  install: "ota.install",
  taps: "taps",
  nextTap: "tap.next",
  contactAfter: "contact.after",
  failures: "contact.fails",
  clockOffset: "clock.offset",
  display: "fw.display",
  resume: "ota.resume",
  serverWait: "srv.wait",
} as const;

export class BadgeStorage {
  readonly nvs: Nvs;

  constructor(nvs: Nvs) {
    this.nvs = nvs;
  }

  token(): string | null {
    return this.nvs.get(KEY.token) ?? null;
  }

  setToken(token: string): void {
    this.nvs.set(KEY.token, token);
  }

  clearToken(): void {
    this.nvs.delete(KEY.token);
  }

  pendingReport(): string | null {
    return this.nvs.get(KEY.report) ?? null;
  }

  /** Stores the outcome of an install; the install is then settled, so its record goes. */
  storeReport(report: string): void {
    this.nvs.set(KEY.report, report);
    this.nvs.delete(KEY.install);
  }

  clearReport(): void {
    this.nvs.delete(KEY.report);
  }

  install(): InstallRecord | null {
    const text = this.nvs.get(KEY.install);
    return text === undefined ? null : (JSON.parse(text) as InstallRecord);
  }

  saveInstall(record: InstallRecord): void {
    this.nvs.set(KEY.install, JSON.stringify(record));
  }

  resumePoint(): ResumePoint | null {
    const text = this.nvs.get(KEY.resume);
    return text === undefined ? null : (JSON.parse(text) as ResumePoint);
  }

  /** Written with the install record at every checkpoint. */
  saveResumePoint(point: ResumePoint): void {
    this.nvs.set(KEY.resume, JSON.stringify(point));
  }

  /**
   * The checkpoints of one download: each call makes a checkpoint's two NVS commits, the install
   * record at `bytes` and then the resume point, with the texts saveInstall and saveResumePoint
   * write. What stays the same over the download's 30 checkpoints is written out once (issue 25).
   */
  checkpointWriter(record: Omit<InstallRecord, "bytes">, point: Omit<ResumePoint, "bytes" | "md5State">): (bytes: number, md5State: string) => void {
    const { version, display, stage, total } = record;
    const installHead = `${JSON.stringify({ version, display, stage }).slice(0, -1)},"bytes":`;
    const installTail = `,"total":${total}}`;
    const resumeHead = `${JSON.stringify({ version: point.version, size: point.size, md5: point.md5 }).slice(0, -1)},"bytes":`;
    return (bytes, md5State) => {
      this.nvs.set(KEY.install, `${installHead}${bytes}${installTail}`);
      this.nvs.set(KEY.resume, `${resumeHead}${bytes},"md5State":${JSON.stringify(md5State)}}`);
    };
  }

  clearResumePoint(): void {
    this.nvs.delete(KEY.resume);
  }

  /** Until when (the RTC's ms, which runs through deep sleep and reboots) the server asked the badge not to download (a 503's Retry-After). */
  serverWaitUntil(): number {
    return Number(this.nvs.get(KEY.serverWait) ?? "0");
  }

  setServerWaitUntil(unixMs: number): void {
    this.nvs.set(KEY.serverWait, String(unixMs));
  }

  taps(): QueuedTap[] {
    const text = this.nvs.get(KEY.taps);
    return text === undefined ? [] : (JSON.parse(text) as QueuedTap[]);
  }

  queueTap(uid: string, unixS: number): QueuedTap {
    const n = Number(this.nvs.get(KEY.nextTap) ?? "1");
    const tap = { n, uid, unixS };
    this.nvs.set(KEY.taps, JSON.stringify([...this.taps(), tap]));
    this.nvs.set(KEY.nextTap, String(n + 1));
    return tap;
  }

  clearTaps(numbers: number[]): void {
    const answered = new Set(numbers);
    this.nvs.set(KEY.taps, JSON.stringify(this.taps().filter((tap) => !answered.has(tap.n))));
  }

  /** A pending report makes the cache stale: it goes at the next chance, backoff or not (SPEC 3.4 item 5). */
  isContactDue(nowUnixMs: number): boolean {
    return this.pendingReport() !== null || nowUnixMs >= this.contactAfter();
  }

  contactAfter(): number {
    return Number(this.nvs.get(KEY.contactAfter) ?? "0");
  }

  recordContactSuccess(nowUnixMs: number, recheckAfterS: number | null): void {
    this.nvs.set(KEY.contactAfter, String(nowUnixMs + (recheckAfterS ?? 0) * 1000));
    this.nvs.delete(KEY.failures);
  }

  /** Backs off 1, 2, 4 ... minutes up to an hour, or longer when the server asked (its `S`). */
  recordContactFailure(nowUnixMs: number, recheckAfterS: number | null): void {
    const failures = Number(this.nvs.get(KEY.failures) ?? "0") + 1;
    const backoff = Math.min(MAX_BACKOFF_MS, FIRST_BACKOFF_MS * 2 ** (failures - 1));
    this.nvs.set(KEY.failures, String(failures));
    this.nvs.set(KEY.contactAfter, String(nowUnixMs + Math.max(backoff, (recheckAfterS ?? 0) * 1000)));
  }

  /** The wall clock is simulated time plus this offset (0 until set: the badge thinks it is 1970). */
  clockOffsetMs(): number {
    return Number(this.nvs.get(KEY.clockOffset) ?? "0");
  }

  setClockOffsetMs(offset: number): void {
    this.nvs.set(KEY.clockOffset, String(Math.round(offset)));
  }

  /** The display string (the `B` line) of an installed version, kept per version: a switch can still fail. */
  displayFor(version: string): string | null {
    return this.#displays()[version] ?? null;
  }

  setDisplay(version: string, display: string): void {
    this.nvs.set(KEY.display, JSON.stringify({ ...this.#displays(), [version]: display }));
  }

  #displays(): Record<string, string> {
    return JSON.parse(this.nvs.get(KEY.display) ?? "{}") as Record<string, string>;
  }
}
