// The badge machine's effects, supplied to each run with `.provide()`: the boot (which image the
// bootloader starts, and what NVS says), the check and the sync over the radio, the download
// into the inactive slot (esp_ota_begin / esp_ota_write), the otadata switch, and the actions
// that keep NVS. Each effect works on the virtual hardware and writes what it did to the log.
import { fromCallback, fromPromise, type Actor, type ActorSystem } from "xstate";
import { BADGE_PATHS, formatTap, imageEtag, keyIdOf, MAX_TAPS, parseContentRange, verifyImage, type BadgeStatus } from "../../firmware/index.ts";
import { loadBootImage } from "../hardware/bootloader.ts";
import { PowerLostError, type Battery } from "../hardware/battery.ts";
import type { Flash } from "../hardware/flash.ts";
import { nextEntry, otherSlot, type SlotName } from "../hardware/otadata.ts";
import { RadioOffError, type Radio } from "../hardware/radio.ts";
import { SlotMd5 } from "../hardware/slot-md5.ts";
import type { VirtualClock } from "../hardware/virtual-clock.ts";
import { badgeMachine, progressText, type BadgeEvent, type BootResult } from "../model/badge-machine.ts";
import { CHECKPOINT_BYTES, type BadgeStorage, type InstallRecord, type ResumePoint } from "../model/badge-storage.ts";
import type { BadgeClient, CheckAnswer, DownloadResult, Offer, SyncAnswer } from "../network/badge-client.ts";
import { describeCheck, type ObservationLog } from "./observation-log.ts";

/** ROM bootloader, second stage and app start, before the image is verified. */
export const BOOT_MS = 300;
/** The badge reads the download into a buffer this size and writes it to flash a buffer at a time. */
export const DOWNLOAD_BUFFER_BYTES = 4096;

export type BootCause = "power-on" | "restart" | "wake" | "brownout";

/**
 * Why a download's signal aborts: the machine left `downloading` (its work is over, or it is cut
 * off). Made once: abort() without a reason makes a DOMException, stack and all, at the end of
 * every download, finished ones included.
 */
const DOWNLOAD_LEFT = new Error("the machine left online.downloading");

/** One boot's worth of machine: when the power dies it is dead, and its effects do nothing. */
export interface Run {
  actor: Actor<typeof badgeMachine>;
  alive: boolean;
  cause: BootCause;
}

/** What the effects work on: the badge's hardware, client and log, and how it waits for them. */
export interface EffectTarget {
  readonly clock: VirtualClock;
  readonly battery: Battery;
  readonly flash: Flash;
  readonly radio: Radio;
  readonly storage: BadgeStorage;
  readonly client: BadgeClient;
  readonly log: ObservationLog;
  /** versions that crash as this badge boots them (the per-badge fault, VirtualBadgeOptions.faults) */
  readonly crashOnBoot: readonly string[];
  /** Keeps `settle()` waiting for real I/O; the promise handed back is the one given. */
  track<T>(promise: Promise<T>): Promise<T>;
  /** The simulation itself failed: the badge's next `settle()` throws `error`. */
  fail(error: unknown): void;
  /** The download's written bytes (`BadgeEffects.downloadedBytes`) reached another whole percent: the screen shows it. */
  progressed(): void;
}

/** Any run's actor system (xstate exports only the generic type). */
type AnyActorSystem = ActorSystem<any>;

export class BadgeEffects {
  /** the image the chip last started, from its own app descriptor (set at every boot) */
  running: { slot: SlotName; version: string } | null = null;
  /** the release keys the running image trusts, by key id (firmware compiles them in; a test image carries them) */
  trustedKeys = new Map<string, Uint8Array>();
  /**
   * The image bytes the download under way has written (null: none under way). The screen's
   * progress reads it: a machine event per percent (`download.progress`) cost about a quarter of
   * a simulated update's wall time (issue 25), so the machine hears the bytes only when an event
   * of the world might need them (the virtual badge sends `download.progress` before it).
   */
  downloadedBytes: number | null = null;

  constructor(private readonly badge: EffectTarget) {}

  /** which badge's effects and which run each actor system is: an actor, invoked or not, and an action know their system */
  static readonly #bound = new WeakMap<AnyActorSystem, { effects: BadgeEffects; run: Run }>();
  static #machine: ReturnType<typeof BadgeEffects.provide> | null = null;

  /**
   * The badge machine, its actors and actions doing their work on the badge whose run it is. One
   * machine serves every run of every badge of the thread (each boot's actor is `bind`-ed to its
   * badge and run): providing the implementations builds the whole statechart again, which cost
   * about a millisecond per boot, and 0.4 ms of each fault sweep case's 10 for its fresh badge.
   */
  machine() {
    return (BadgeEffects.#machine ??= BadgeEffects.provide());
  }

  /** The run `run.actor` is, of this badge: the effects of its actors and actions are that run's. */
  bind(run: Run): void {
    BadgeEffects.#bound.set(run.actor.system, { effects: this, run });
  }

  private static provide() {
    const boundTo = (system: AnyActorSystem) => BadgeEffects.#bound.get(system)!;
    /** An effect of a dead run does nothing: the chip that would have done it has no power. */
    const live =
      <P>(effect: (effects: BadgeEffects, params: P) => void) =>
      ({ system }: { system: AnyActorSystem }, params: P) => {
        const { effects, run } = boundTo(system);
        if (run.alive) effect(effects, params);
      };
    /** Work of a dead run never finishes: the chip that was doing it stopped. */
    const whilePowered = <T>(system: AnyActorSystem, work: (effects: BadgeEffects, run: Run) => Promise<T>) => {
      const { effects, run } = boundTo(system);
      return effects.badge.track(work(effects, run)).catch((error: unknown) => {
        if (error instanceof PowerLostError || !run.alive) return new Promise<T>(() => {});
        throw error;
      });
    };
    return badgeMachine.provide({
      actors: {
        boot: fromPromise(({ system }) => whilePowered(system, async (effects, run) => effects.boot(run.cause))),
        check: fromPromise(({ signal, system }) => whilePowered(system, (effects) => effects.check(signal))),
        sync: fromPromise(({ signal, system }) => whilePowered(system, (effects) => effects.sync(signal))),
        download: fromCallback<BadgeEvent, Offer>(({ input, sendBack, system }) => {
          const { effects, run } = boundTo(system);
          const controller = new AbortController();
          const send = (event: BadgeEvent) => {
            if (run.alive && !controller.signal.aborted) sendBack(event);
          };
          effects.downloadedBytes = 0;
          whilePowered(system, () => effects.download(input, send, controller.signal)).catch((error: unknown) => {
            effects.badge.fail(error);
          });
          return () => {
            controller.abort(DOWNLOAD_LEFT);
            effects.downloadedBytes = null;
          };
        }),
        switchBootSlot: fromPromise(({ input, system }) => whilePowered(system, async (effects) => effects.switchBootSlot(input))),
        verifySignature: fromPromise(({ input, system }) => whilePowered(system, async (effects) => effects.verifySignature(input))),
      },
      actions: {
        storeReport: live((effects, { report }: { report: string }) => {
          effects.badge.storage.storeReport(report);
          effects.badge.log.observe("report.stored", report);
        }),
        forgetToken: live((effects) => {
          effects.badge.storage.clearToken();
          effects.badge.log.observe("token.cleared", "the server refused the device token (401)");
        }),
        queueTap: live((effects, { uid }: { uid: string }) => {
          const tap = effects.badge.storage.queueTap(uid, Math.floor(effects.unixMs() / 1000));
          effects.badge.log.observe("tap.queued", `${tap.n}|${tap.uid}|${tap.unixS}`);
        }),
        applySync: live((effects, { answer }: { answer: Extract<SyncAnswer, { kind: "synced" }> }) => effects.applySync(answer)),
        rememberCheck: live((effects, { recheckAfterS }: { recheckAfterS: number | null }) => {
          effects.badge.storage.recordContactSuccess(effects.unixMs(), recheckAfterS);
        }),
        rememberContactFailure: live((effects, { recheckAfterS }: { recheckAfterS: number | null }) => {
          effects.badge.storage.recordContactFailure(effects.unixMs(), recheckAfterS);
        }),
      },
    });
  }

  private boot(cause: BootCause): BootResult {
    this.badge.clock.advance(BOOT_MS);
    const image = loadBootImage(this.badge.flash);
    this.badge.flash.setRunningSlot(image.slot);
    this.running = { slot: image.slot, version: image.version };
    this.trustedKeys = new Map(image.trustedKeys.map((key) => [keyIdOf(key), key]));
    const fallback = image.rejected ? `; ${image.rejected.slot} rejected: ${image.rejected.problem}` : "";
    this.badge.log.observe("boot", `${image.slot} ${image.version} (${cause})${fallback}`);
    return {
      slot: image.slot,
      version: image.version,
      crashesOnBoot: image.crashesOnBoot || this.badge.crashOnBoot.includes(image.version),
      provisioned: this.badge.storage.token() !== null,
      install: this.badge.storage.install(),
      pendingReport: this.badge.storage.pendingReport(),
      contactDue: this.badge.storage.isContactDue(this.unixMs()),
      trustedKeyIds: [...this.trustedKeys.keys()],
    };
  }

  private async check(signal: AbortSignal): Promise<CheckAnswer> {
    const token = this.badge.storage.token();
    if (token === null) return { kind: "unauthorized" };
    // A 503 said when to come back (issue 23): never sooner, whoever presses Check for Update.
    // Kept on the RTC's clock, not the wall clock the next sync may set back or forth.
    const waitS = Math.ceil((this.badge.storage.serverWaitUntil() - this.badge.clock.now()) / 1000);
    if (waitS > 0) return { kind: "failed", message: `the server is busy; it asked to wait ${waitS} s more`, recheckAfterS: waitS };
    // measured before the radio's transmit burst pulls the cell down
    const status = this.status();
    const radioOff = this.transmit("update check");
    if (radioOff) return { kind: "failed", message: radioOff, recheckAfterS: null };
    this.badge.log.observe("request", `POST ${BADGE_PATHS.check}`);
    const answer = await this.badge.client.check(token, status, signal, this.trustedKeys.size > 0);
    this.badge.log.observe("answer", `check: ${describeCheck(answer)}`);
    return answer;
  }

  private async sync(signal: AbortSignal): Promise<SyncAnswer> {
    const token = this.badge.storage.token();
    if (token === null) return { kind: "unauthorized" };
    const status = this.status();
    const radioOff = this.transmit("sync");
    if (radioOff) return { kind: "failed", message: radioOff, recheckAfterS: null };
    const report = this.badge.storage.pendingReport();
    const taps = this.badge.storage.taps().slice(0, MAX_TAPS);
    this.badge.log.observe("request", `POST ${BADGE_PATHS.sync}`);
    if (report !== null) this.badge.log.observe("report.sent", `ota=${report}`);
    for (const tap of taps) this.badge.log.observe("tap.sent", formatTap(tap.n, tap.uid, tap.unixS));
    const answer = await this.badge.client.sync(token, status, { report, taps }, signal);
    this.badge.log.observe("answer", `sync: ${answer.kind === "failed" ? answer.message : answer.kind}`);
    return answer;
  }

  private applySync(answer: Extract<SyncAnswer, { kind: "synced" }>): void {
    this.badge.storage.setClockOffsetMs(answer.serverUnixS * 1000 - this.badge.clock.now());
    if (answer.echoedReport !== null && answer.echoedReport === this.badge.storage.pendingReport()) {
      this.badge.storage.clearReport();
      this.badge.log.observe("report.cleared", answer.echoedReport);
    }
    this.badge.storage.clearTaps(answer.taps.map((tap) => tap.n));
    for (const tap of answer.taps) this.badge.log.observe("tap.cleared", tap.accepted ? `${tap.n} accepted` : `${tap.n} rejected ${tap.reason}`);
    this.badge.storage.recordContactSuccess(this.unixMs(), answer.recheckAfterS);
  }

  /**
   * esp_ota_begin / esp_ota_write over an HTTP/1.0 download: the install is recorded in NVS
   * before the inactive slot is erased, every full buffer is written and hashed as it arrives,
   * and every CHECKPOINT_BYTES the progress and the MD5 state are recorded, with the offer they
   * belong to (issue 23). A download of the same offer that finds a checkpoint asks for the rest
   * (`Range: bytes=<checkpoint>-`, `If-Range: "<md5>"`) and hashes on from the saved state; a 200
   * starts over from byte 0 (overwriting, never appending), a 416 starts over at once, a 206 at
   * another offset or of another total is refused and the checkpoint dropped, a 503 keeps the
   * checkpoint and the badge waits what the server asked.
   */
  private async download(offer: Offer, send: (event: BadgeEvent) => void, signal: AbortSignal): Promise<void> {
    const fail = (reason: string, status: number | null = null) => send({ type: "download.failed", reason, status });
    const token = this.badge.storage.token();
    if (token === null) return fail("no device token");
    const radioOff = this.transmit("download");
    if (radioOff) return fail(radioOff);
    let resume = this.badge.storage.resumePoint();
    if (resume && !(resume.version === offer.version && resume.size === offer.size && resume.md5 === offer.md5)) {
      this.badge.log.observe("download", `checkpoint of ${resume.version} dropped: the offer changed`);
      this.badge.storage.clearResumePoint();
      resume = null;
    }
    let attempt = await this.fetchImage(token, offer, resume, send, signal);
    if (attempt.kind === "unsatisfiable") {
      const reason = `the server cannot resume at ${resume!.bytes} (HTTP 416): starting over from byte 0`;
      this.badge.log.observe("download", reason);
      this.downloadedBytes = 0;
      send({ type: "download.restarted", reason });
      attempt = await this.fetchImage(token, offer, null, send, signal);
    }
    if (signal.aborted) return;
    if (attempt.kind !== "exchanged") return fail(attempt.kind === "unsatisfiable" ? "download refused: HTTP 416" : attempt.reason, attempt.kind === "refused" ? attempt.status : null);
    const { result, received, lastByteAt, finish } = attempt;
    this.badge.log.observe("answer", `download: HTTP ${result.status ?? "-"}, ${received} of ${offer.size} bytes, ${result.ending}`);
    if (result.status === 503 && result.retryAfterS !== null) {
      this.badge.storage.setServerWaitUntil(this.badge.clock.now() + result.retryAfterS * 1000);
      return send({ type: "download.busy", retryAfterS: result.retryAfterS });
    }
    if (result.status !== null && result.status !== 200 && result.status !== 206) {
      return fail(`download refused: HTTP ${result.status}${result.refusal ? ` ${result.refusal}` : ""}`, result.status);
    }
    switch (result.ending) {
      case "complete":
        if (received < offer.size) return fail(`download cut at ${progressText(received, offer.size)}`);
        return send({ type: "download.finished", md5: finish() });
      case "stalled":
        // found on the simulated clock, the silence has passed already; found on the wall's (a
        // real peer gone silent), the badge waited that long all the same
        this.badge.clock.advanceTo(lastByteAt + this.badge.client.stallTimeoutMs);
        return fail(`download stalled at ${progressText(received, offer.size)}: no data for ${this.badge.client.stallTimeoutMs} ms`);
      case "unreachable":
        return fail(`server unreachable${result.error ? ` (${result.error})` : ""}`);
      default:
        return fail(`download cut at ${progressText(received, offer.size)}`);
    }
  }

  /** One GET of the image into the inactive slot: from byte 0, or from `resume` when it is given. */
  private async fetchImage(token: string, offer: Offer, resume: ResumePoint | null, send: (event: BadgeEvent) => void, signal: AbortSignal): Promise<ImageFetch> {
    const slot = otherSlot(this.running!.slot);
    const { storage, flash, log } = this.badge;
    const record: InstallRecord = { version: offer.version, display: offer.display, stage: "download", bytes: 0, total: offer.size };
    const md5 = await SlotMd5.create();
    const buffer = new Uint8Array(DOWNLOAD_BUFFER_BYTES);
    let buffered = 0;
    let written = 0;
    let percent = -1;
    /** when the last byte came (simulated ms): a stall is the stall timeout of silence after it */
    let lastByteAt = this.badge.clock.now();

    const checkpoint = storage.checkpointWriter(record, offer);
    /** what each write is, as the battery is asked about it (one object for the download's 480 writes) */
    const moment = { activity: "download.write" as const, offset: 0, length: 0, total: offer.size };
    /** One esp_ota_write of a buffer's worth (`bytes`: the buffer, or a full buffer's worth of the chunk as it came). */
    const writeBuffer = (bytes: Uint8Array) => {
      this.badge.radio.receive(bytes.length);
      moment.offset = written;
      moment.length = bytes.length;
      const sharedPage = flash.writeSlot(slot, written, bytes, moment);
      md5.update(bytes, sharedPage);
      written += bytes.length;
      buffered = 0;
      if (written % CHECKPOINT_BYTES === 0) checkpoint(written, md5.saveBase64());
      const now = Math.floor((written * 100) / offer.size);
      if (now !== percent) {
        log.observe("download", `${written} of ${offer.size}`);
        this.downloadedBytes = written;
        this.badge.progressed();
      }
      percent = now;
    };
    /** The head of an image answer: where the body's first byte goes, and the slot made ready for it. */
    const startAt = (status: number, contentLength: number | null, contentRange: string | null) => {
      if (status === 206) {
        const range = parseContentRange(contentRange);
        if (!resume || !range || range.first !== resume.bytes || range.last !== offer.size - 1 || range.total !== offer.size) {
          storage.clearResumePoint();
          throw new ImageProblem(`resume refused: the server sent ${contentRange ? `bytes ${JSON.stringify(contentRange)}` : "a part without Content-Range"}; the badge asked for bytes ${resume?.bytes ?? 0}- of ${offer.size}`, 206);
        }
        md5.load(Buffer.from(resume.md5State, "base64"));
        written = resume.bytes;
        storage.saveInstall({ ...record, bytes: written });
        log.observe("download", `resuming at ${written} of ${offer.size}`);
        flash.eraseSlot(slot, offer.size, written);
        lastByteAt = this.badge.clock.now();
        this.downloadedBytes = written;
        return send({ type: "download.resumed", bytes: written });
      }
      if (contentLength !== null && contentLength !== offer.size) throw new ImageProblem(`the server sends ${contentLength} bytes; the offer said ${offer.size}`);
      if (resume) {
        storage.clearResumePoint();
        const reason = `the server sent the whole image instead of bytes ${resume.bytes}-: starting over from byte 0`;
        log.observe("download", reason);
        this.downloadedBytes = 0;
        send({ type: "download.restarted", reason });
      }
      md5.init();
      storage.saveInstall(record);
      log.observe("download", `0 of ${offer.size}`);
      flash.eraseSlot(slot, offer.size);
      lastByteAt = this.badge.clock.now();
    };

    log.observe("request", `GET ${offer.path}${resume ? ` Range: bytes=${resume.bytes}-` : ""}`);
    const result = await this.badge.client
      .download(
        token,
        offer.path,
        {
          onHead: ({ status, contentLength, contentRange }) => {
            if (status === 200 || status === 206) startAt(status, contentLength, contentRange);
          },
          onBody: (chunk) => {
            if (written + buffered + chunk.length > offer.size) throw new ImageProblem(`the server sent more than the offered ${offer.size} bytes`);
            for (let at = 0; at < chunk.length; ) {
              // A full buffer's worth in the chunk with nothing buffered is written as it came: the
              // same bytes the copy into the buffer would hold.
              if (buffered === 0 && chunk.length - at >= DOWNLOAD_BUFFER_BYTES) {
                // a plain view: Buffer's subarray builds a Buffer, 480 times a download
                writeBuffer(new Uint8Array(chunk.buffer, chunk.byteOffset + at, DOWNLOAD_BUFFER_BYTES));
                at += DOWNLOAD_BUFFER_BYTES;
                continue;
              }
              const take = Math.min(chunk.length - at, DOWNLOAD_BUFFER_BYTES - buffered);
              buffer.set(chunk.subarray(at, at + take), buffered);
              buffered += take;
              at += take;
              if (buffered === DOWNLOAD_BUFFER_BYTES) writeBuffer(buffer);
            }
            lastByteAt = this.badge.clock.now();
          },
        },
        signal,
        resume ? { from: resume.bytes, etag: imageEtag(offer.md5) } : undefined,
      )
      .catch((error: unknown) => {
        if (!(error instanceof ImageProblem)) throw error;
        return error;
      });
    if (result instanceof ImageProblem) return { kind: "refused", reason: result.message, status: result.status };
    if (result.status === 416 && resume) {
      log.observe("answer", `download: HTTP 416, the server cannot resume at ${resume.bytes}`);
      storage.clearResumePoint();
      return { kind: "unsatisfiable" };
    }
    const finish = () => {
      if (buffered > 0) writeBuffer(buffer.subarray(0, buffered));
      // The last checkpoint belongs to an image now whole: the next download starts from 0.
      storage.clearResumePoint();
      return md5.digest();
    };
    return { kind: "exchanged", result, received: written + buffered, lastByteAt, finish };
  }

  /**
   * crypto_sign_verify_detached over the whole image as written to the inactive slot (firmware
   * maps the partition, esp_partition_mmap): null when the offer's signature holds, else why not.
   */
  private verifySignature(offer: Offer): string | null {
    const { keyId, signature } = offer.signature!;
    const image = this.badge.flash.readSlot(otherSlot(this.running!.slot), 0, offer.size);
    const verified = verifyImage(image, signature, this.trustedKeys.get(keyId)!);
    this.badge.log.observe("signature", `${verified ? "verified" : "does not verify"}: key ${keyId} over ${offer.size} bytes`);
    return verified ? null : `the signature by key ${keyId} does not verify over the ${offer.size}-byte image`;
  }

  /** esp_ota_set_boot_partition: the new entry into the other otadata copy, then the restart. */
  private switchBootSlot(offer: Offer): void {
    const slot = otherSlot(this.running!.slot);
    this.badge.storage.saveInstall({ version: offer.version, display: offer.display, stage: "switch", bytes: offer.size, total: offer.size });
    this.badge.storage.setDisplay(offer.version, offer.display);
    const { copy, entry } = nextEntry(this.badge.flash.otadata, slot);
    this.badge.flash.eraseOtadataCopy(copy);
    this.badge.flash.writeOtadataCopy(copy, entry, { activity: "otadata.write", length: entry.length });
    if (this.badge.battery.powerFailsWithin({ activity: "restart" }) !== null) this.badge.battery.cutPower("before the restart into the new image");
  }

  /** Sends a request's bytes over the radio: null when it went, else why it could not. */
  private transmit(what: string): string | null {
    try {
      this.badge.radio.request(what);
      return null;
    } catch (error) {
      if (error instanceof RadioOffError) return error.message;
      throw error;
    }
  }

  private unixMs(): number {
    return this.badge.clock.now() + this.badge.storage.clockOffsetMs();
  }

  private status(): BadgeStatus {
    const version = this.running!.version;
    const { volts, charging } = this.badge.battery.reading();
    return { version, display: this.badge.storage.displayFor(version) ?? version, volts, charging };
  }
}

/** The image answer cannot be used: its size, or a resume at the wrong place. */
class ImageProblem extends Error {
  constructor(
    message: string,
    readonly status: number | null = null,
  ) {
    super(message);
  }
}

/** How one GET of the image went (`lastByteAt`: when its last byte came, simulated ms). `finish` writes the last partial buffer and gives the MD5 of the whole slot. */
type ImageFetch =
  | { kind: "exchanged"; result: DownloadResult; received: number; lastByteAt: number; finish: () => string }
  | { kind: "refused"; reason: string; status: number | null }
  | { kind: "unsatisfiable" };
