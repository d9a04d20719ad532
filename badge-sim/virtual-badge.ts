// A whole simulated badge: virtual hardware (battery, flash, radio) on a simulated clock, the
// badge machine running on it with its effects supplied here, the HTTP/1.0 client, and an
// observation log of everything that changed. Tests and the scenario runner drive it like a
// wearer and an environment would (menu, card, power, time) and read what it observed.
//
// One run of the machine is one boot. A restart or a wake from deep sleep ends the run and
// starts the next; a brownout kills the run where it stands: its pending effects are dropped,
// the socket is closed, and the power comes back `brownoutOffMs` later with a fresh boot.
// Flash and NVS keep exactly what was written before the cut.
import { createHash } from "node:crypto";
import { createActor, fromCallback, fromPromise, type Actor } from "xstate";
import { buildAppImage, containsBytes, CRASH_ON_BOOT_MARKER, parseVersion } from "../firmware/index.ts";
import { BadgeClient, type BadgeStatus, type CheckAnswer, type Offer, type SyncAnswer } from "./badge-client.ts";
import { badgeMachine, progressText, screenOf, statePath, type BadgeEvent, type BadgeSnapshot, type BootResult } from "./badge-machine.ts";
import { BadgeStorage, CHECKPOINT_BYTES, type InstallRecord, type QueuedTap } from "./badge-storage.ts";
import { Battery, PowerLostError, type BatteryEvent, type BatteryOptions, type BrownoutPoint } from "./hardware/battery.ts";
import { loadBootImage } from "./hardware/bootloader.ts";
import { Flash, type FlashOperation, type FlashTiming } from "./hardware/flash.ts";
import { Nvs } from "./hardware/nvs.ts";
import { nextEntry, otherSlot, type SlotName } from "./hardware/otadata.ts";
import { Radio, RadioOffError, type RadioLink } from "./hardware/radio.ts";
import { VirtualClock } from "./virtual-clock.ts";

/** ROM bootloader, second stage and app start, before the image is verified. */
export const BOOT_MS = 300;
/** The badge reads the download into a buffer this size and writes it to flash a buffer at a time. */
export const DOWNLOAD_BUFFER_BYTES = 4096;
/** The server takes at most 100 taps per sync. */
export const MAX_TAPS_PER_SYNC = 100;
const DAY_MS = 24 * 3600_000;

export interface VirtualBadgeOptions {
  /** where the badge endpoints are: the server, or a fault proxy in front of it */
  serverUrl: string;
  /** the device token in NVS; null for a badge that was never provisioned */
  token: string | null;
  /** the version of the image flashed into ota_0 */
  version: string;
  /** the display string sent as `fw` (default: the version) */
  display?: string;
  battery: BatteryOptions;
  clock?: VirtualClock;
  faults?: { brownout?: BrownoutPoint | BrownoutPoint[] };
  network?: { stallTimeoutMs?: number; link?: Partial<RadioLink> };
  flashTiming?: Partial<FlashTiming>;
  /** the badge's wall clock when the simulation starts, unix ms (default: now); null: never set */
  rtcUnixMs?: number | null;
  /** how long the power stays off after a brownout, simulated ms (default 1000) */
  brownoutOffMs?: number;
}

export type ObservationKind =
  | "input"
  | "state"
  | "screen"
  | "power"
  | "boot"
  | "request"
  | "answer"
  | "report.stored"
  | "report.sent"
  | "report.cleared"
  | "tap.queued"
  | "tap.sent"
  | "tap.cleared"
  | "token.cleared"
  | "flash.erase"
  | "flash.write"
  | "download"
  | "battery";

export interface Observation {
  /** simulated ms */
  t: number;
  kind: ObservationKind;
  detail: string;
}

type BootCause = "power-on" | "restart" | "wake" | "brownout";

/** One boot's worth of machine: when the power dies it is dead, and its effects do nothing. */
interface Run {
  actor: Actor<typeof badgeMachine>;
  alive: boolean;
  cause: BootCause;
}

export function createVirtualBadge(options: VirtualBadgeOptions): VirtualBadge {
  return new VirtualBadge(options);
}

export class VirtualBadge {
  readonly clock: VirtualClock;
  readonly battery: Battery;
  readonly flash: Flash;
  readonly radio: Radio;
  readonly storage: BadgeStorage;
  readonly client: BadgeClient;
  readonly log: Observation[] = [];
  #run: Run | null = null;
  #running: { slot: SlotName; version: string } | null = null;
  #inFlight = new Set<Promise<unknown>>();
  #lastState = "";
  #lastScreen = "";
  #broken: unknown = null;
  #brownoutOffMs: number;
  #stopped = false;
  #observed: { promise: Promise<void>; resolve: () => void } | null = null;
  #listeners = new Set<(observation: Observation) => void>();

  constructor(options: VirtualBadgeOptions) {
    if (!parseVersion(options.version)) throw new TypeError(`version ${JSON.stringify(options.version)} must be three dotted numbers, like 1.4.0`);
    if (options.token !== null && (typeof options.token !== "string" || options.token === "")) throw new TypeError("token must be a non-empty string or null");
    const brownoutOffMs = options.brownoutOffMs ?? 1000;
    if (!(brownoutOffMs >= 0)) throw new TypeError(`brownoutOffMs ${brownoutOffMs} must be 0 or more simulated ms`);
    this.#brownoutOffMs = brownoutOffMs;
    this.clock = options.clock ?? new VirtualClock();
    this.client = new BadgeClient({ baseUrl: options.serverUrl, stallTimeoutMs: options.network?.stallTimeoutMs });
    this.battery = new Battery(options.battery);
    this.flash = new Flash({ clock: this.clock, battery: this.battery, timing: options.flashTiming });
    this.radio = new Radio({ clock: this.clock, battery: this.battery, link: options.network?.link });
    this.storage = new BadgeStorage(new Nvs(this.flash));

    // The factory state: the app flashed over USB into ota_0 (blank otadata), NVS provisioned.
    this.flash.flashOverUsb("ota_0", buildAppImage({ version: options.version }));
    if (options.token !== null) this.storage.setToken(options.token);
    this.storage.setDisplay(options.version, options.display ?? options.version);
    const rtc = options.rtcUnixMs === undefined ? Date.now() : options.rtcUnixMs;
    if (rtc !== null) this.storage.setClockOffsetMs(rtc - this.clock.now());
    for (const point of [options.faults?.brownout ?? []].flat()) this.battery.brownoutAt(point);

    this.flash.onOperation((operation) => this.#onFlash(operation));
    this.battery.onEvent((event) => this.#onBattery(event));
    this.#observe("battery", batteryText(this.battery.reading()));
    this.#start("power-on");
  }

  // --- what a wearer and the world do -------------------------------------------------------

  /** The wearer picks Tools > Check for Update (ignored unless the screen is on). */
  checkForUpdate(): void {
    this.#input("menu Tools > Check for Update", { type: "menu.checkForUpdate" });
  }

  /** The wearer picks Tools > Sync now (ignored unless the screen is on). */
  syncNow(): void {
    this.#input("menu Tools > Sync now", { type: "menu.syncNow" });
  }

  pressButton(): void {
    this.#input("button", { type: "button.press" });
  }

  tapCard(uid: string): void {
    if (!/^[0-9A-F]{8,20}$/.test(uid)) throw new TypeError(`card UID ${JSON.stringify(uid)} must be 8 to 20 uppercase hex digits`);
    this.#input(`card ${uid}`, { type: "card.tap", uid });
  }

  plugIn(options: { charging?: boolean } = {}): void {
    this.#observe("input", `plug in${options.charging === false ? " (not charging)" : ""}`);
    this.battery.plugIn(options.charging ?? true);
  }

  unplug(): void {
    this.#observe("input", "unplug");
    this.battery.unplug();
  }

  // --- time ----------------------------------------------------------------------------------

  /**
   * Lets the badge finish what it is doing now (real I/O included) without moving to later
   * timers. With `until`, returns as soon as it holds, even while a download is under way.
   */
  async settle(until?: (badge: VirtualBadge) => boolean): Promise<void> {
    for (;;) {
      await new Promise<void>((resolve) => setImmediate(resolve));
      this.#throwIfBroken();
      if (until?.(this) || this.#inFlight.size === 0) return;
      await Promise.race(until ? [...this.#inFlight, this.#nextObservation()] : this.#inFlight);
    }
  }

  /** Moves simulated time forward by `ms`, running everything that falls due on the way. */
  async advance(ms: number): Promise<void> {
    const until = this.clock.now() + ms;
    await this.settle();
    for (let due = this.clock.nextDueAt(); due !== undefined && due <= until; due = this.clock.nextDueAt()) {
      this.clock.advanceTo(due);
      await this.settle();
    }
    this.clock.advanceTo(until);
    await this.settle();
  }

  /** Runs timer by timer until `done` holds; throws when the badge goes idle or `withinMs` passes first. */
  async runUntil(done: (badge: VirtualBadge) => boolean, options: { withinMs?: number } = {}): Promise<void> {
    const limit = this.clock.now() + (options.withinMs ?? DAY_MS);
    await this.settle(done);
    while (!done(this)) {
      const due = this.clock.nextDueAt();
      if (due === undefined) throw new Error(`the badge went idle in state ${this.state()} before the condition held`);
      if (due > limit) throw new Error(`the condition did not hold within ${options.withinMs ?? DAY_MS} simulated ms (state ${this.state()})`);
      this.clock.advanceTo(due);
      await this.settle(done);
    }
  }

  runUntilState(path: string, options?: { withinMs?: number }): Promise<void> {
    return this.runUntil((badge) => badge.state() === path, options);
  }

  runUntilAsleep(options?: { withinMs?: number }): Promise<void> {
    return this.runUntilState("asleep", options);
  }

  /** Runs until nothing will happen without an outside event (asleep, bricked, powered off for good). */
  async runUntilIdle(options: { withinMs?: number } = {}): Promise<void> {
    const limit = this.clock.now() + (options.withinMs ?? DAY_MS);
    await this.settle();
    for (let due = this.clock.nextDueAt(); due !== undefined; due = this.clock.nextDueAt()) {
      if (due > limit) throw new Error(`the badge was still busy after ${options.withinMs ?? DAY_MS} simulated ms (state ${this.state()})`);
      this.clock.advanceTo(due);
      await this.settle();
    }
  }

  /**
   * esp_restart() (the console's `reboot`): the run ends where it stands, its timers and sockets
   * with it, and the badge boots again from what flash and NVS hold. Without power, nothing runs
   * to restart.
   */
  restart(): void {
    if (this.#stopped || !this.#run) return;
    this.#end();
    this.#start("restart");
  }

  /** Powers the badge off for good: no more runs, timers or sockets. */
  stop(): void {
    this.#stopped = true;
    this.#end();
  }

  // --- what can be observed ------------------------------------------------------------------

  /** The machine's state as a dotted path (`online.downloading`), or `off` without power. */
  state(): string {
    return this.#run ? statePath(this.#run.actor.getSnapshot().value) : "off";
  }

  screen(): string {
    return this.#lastScreen;
  }

  /** The version of the image the chip last started, from the image's own app descriptor. */
  runningVersion(): string | null {
    return this.#running?.version ?? null;
  }

  runningSlot(): SlotName | null {
    return this.#running?.slot ?? null;
  }

  pendingReport(): string | null {
    return this.storage.pendingReport();
  }

  queuedTaps(): QueuedTap[] {
    return this.storage.taps();
  }

  token(): string | null {
    return this.storage.token();
  }

  observations(kind: ObservationKind): Observation[] {
    return this.log.filter((entry) => entry.kind === kind);
  }

  /** Calls `listener` with every observation as it is logged (a serial console prints them); returns the unsubscribe. */
  onObservation(listener: (observation: Observation) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  // --- runs ----------------------------------------------------------------------------------

  #start(cause: BootCause): void {
    const run = { alive: true, cause } as Run;
    run.actor = createActor(this.#machineFor(run), {
      clock: this.clock,
      input: { battery: this.battery.reading() },
      // Every microstep, so states passed through without stopping (`awake.opportunity`) are observed too.
      inspect: (event) => {
        if (event.type === "@xstate.microstep" && event.actorRef === run.actor) this.#noteSnapshot(run, event.snapshot as BadgeSnapshot);
      },
    });
    this.#run = run;
    this.#noteSnapshot(run, run.actor.getSnapshot());
    run.actor.subscribe({
      next: (snapshot) => {
        this.#noteSnapshot(run, snapshot);
        if (run.alive && snapshot.status === "done") {
          this.#end();
          this.#start(statePath(snapshot.value) === "wakingUp" ? "wake" : "restart");
        }
      },
      error: (error) => {
        this.#broken ??= error;
      },
    });
    run.actor.start();
  }

  /** Ends the current run (stopping its actor cancels its timers and closes its sockets). */
  #end(): void {
    const run = this.#run;
    if (!run) return;
    run.alive = false;
    this.#run = null;
    this.flash.setRunningSlot(null);
    // Not from inside the actor's own processing, which may be what brought us here.
    queueMicrotask(() => run.actor.stop());
  }

  #noteSnapshot(run: Run, snapshot: BadgeSnapshot): void {
    if (!run.alive) return;
    const state = statePath(snapshot.value);
    if (state !== this.#lastState) this.#observe("state", state);
    this.#lastState = state;
    this.#showScreen(screenOf(snapshot));
  }

  #onBattery(event: BatteryEvent): void {
    if (event.type === "power.lost") {
      this.#observe("power", `lost: ${event.why}`);
      this.#end();
      this.#observe("state", "off");
      this.#lastState = "off";
      this.#showScreen("");
      if (!this.#stopped) this.clock.setTimeout(() => this.battery.restorePower(), this.#brownoutOffMs);
    } else if (event.type === "power.restored") {
      this.#observe("power", "restored");
      if (!this.#stopped) this.#start("brownout");
    } else {
      const { reading, cause } = event;
      this.#observe("battery", batteryText(reading));
      const type = cause === "plugged" ? "power.plugged" : cause === "unplugged" ? "power.unplugged" : "battery.changed";
      this.#run?.actor.send({ type, battery: reading });
    }
  }

  #onFlash(operation: FlashOperation): void {
    if (operation.region === "nvs") return;
    this.#observe(operation.op === "erase" ? "flash.erase" : "flash.write", `${operation.region} 0x${operation.offset.toString(16)} +${operation.length}`);
  }

  #input(description: string, event: BadgeEvent): void {
    this.#observe("input", description);
    this.#run?.actor.send(event);
  }

  #observe(kind: ObservationKind, detail: string): void {
    const observation = { t: this.clock.now(), kind, detail };
    this.log.push(observation);
    for (const listener of this.#listeners) listener(observation);
    this.#observed?.resolve();
    this.#observed = null;
  }

  /** Resolves at the next observation, so a waiting `runUntil` can look again. */
  #nextObservation(): Promise<void> {
    if (!this.#observed) {
      let resolve!: () => void;
      const promise = new Promise<void>((done) => (resolve = done));
      this.#observed = { promise, resolve };
    }
    return this.#observed.promise;
  }

  #showScreen(text: string): void {
    if (text !== this.#lastScreen) this.#observe("screen", text);
    this.#lastScreen = text;
  }

  #throwIfBroken(): void {
    if (this.#broken !== null) throw new Error(`the badge simulation failed: ${String(this.#broken)}`, { cause: this.#broken });
  }

  /** Keeps `settle()` waiting for real I/O; the promise handed back is the one given. */
  #track<T>(promise: Promise<T>): Promise<T> {
    const settled: Promise<unknown> = promise.then(
      () => this.#inFlight.delete(settled),
      () => this.#inFlight.delete(settled),
    );
    this.#inFlight.add(settled);
    return promise;
  }

  /** Sends a request's bytes over the radio: null when it went, else why it could not. */
  #transmit(what: string): string | null {
    try {
      this.radio.request(what);
      return null;
    } catch (error) {
      if (error instanceof RadioOffError) return error.message;
      throw error;
    }
  }

  #unixMs(): number {
    return this.clock.now() + this.storage.clockOffsetMs();
  }

  #status(): BadgeStatus {
    const version = this.#running!.version;
    const { volts, charging } = this.battery.reading();
    return { version, display: this.storage.displayFor(version) ?? version, volts, charging };
  }

  // --- the machine's effects, for one run ----------------------------------------------------

  #machineFor(run: Run) {
    /** An effect of a dead run does nothing: the chip that would have done it has no power. */
    const live =
      <A extends unknown[]>(effect: (...args: A) => void) =>
      (...args: A) => {
        if (run.alive) effect(...args);
      };
    /** Work of a dead run never finishes: the chip that was doing it stopped. */
    const whilePowered = <T>(work: () => Promise<T>) =>
      this.#track(work()).catch((error: unknown) => {
        if (error instanceof PowerLostError || !run.alive) return new Promise<T>(() => {});
        throw error;
      });
    return badgeMachine.provide({
      actors: {
        boot: fromPromise(() => whilePowered(async () => this.#boot(run.cause))),
        check: fromPromise(({ signal }) => whilePowered(() => this.#check(signal))),
        sync: fromPromise(({ signal }) => whilePowered(() => this.#sync(signal))),
        download: fromCallback<BadgeEvent, Offer>(({ input, sendBack }) => {
          const controller = new AbortController();
          const send = (event: BadgeEvent) => {
            if (run.alive && !controller.signal.aborted) sendBack(event);
          };
          whilePowered(() => this.#download(input, send, controller.signal)).catch((error: unknown) => {
            this.#broken ??= error;
          });
          return () => controller.abort();
        }),
        switchBootSlot: fromPromise(({ input }) => whilePowered(async () => this.#switchBootSlot(input))),
      },
      actions: {
        storeReport: live((_, { report }: { report: string }) => {
          this.storage.storeReport(report);
          this.#observe("report.stored", report);
        }),
        forgetToken: live(() => {
          this.storage.clearToken();
          this.#observe("token.cleared", "the server refused the device token (401)");
        }),
        queueTap: live((_, { uid }: { uid: string }) => {
          const tap = this.storage.queueTap(uid, Math.floor(this.#unixMs() / 1000));
          this.#observe("tap.queued", `${tap.n}|${tap.uid}|${tap.unixS}`);
        }),
        applySync: live((_, { answer }: { answer: Extract<SyncAnswer, { kind: "synced" }> }) => this.#applySync(answer)),
        rememberCheck: live((_, { recheckAfterS }: { recheckAfterS: number | null }) => {
          this.storage.recordContactSuccess(this.#unixMs(), recheckAfterS);
        }),
        rememberContactFailure: live((_, { recheckAfterS }: { recheckAfterS: number | null }) => {
          this.storage.recordContactFailure(this.#unixMs(), recheckAfterS);
        }),
      },
    });
  }

  #boot(cause: BootCause): BootResult {
    this.clock.advance(BOOT_MS);
    const image = loadBootImage(this.flash);
    this.flash.setRunningSlot(image.slot);
    this.#running = { slot: image.slot, version: image.version };
    const fallback = image.rejected ? `; ${image.rejected.slot} rejected: ${image.rejected.problem}` : "";
    this.#observe("boot", `${image.slot} ${image.version} (${cause})${fallback}`);
    return {
      slot: image.slot,
      version: image.version,
      crashesOnBoot: containsBytes(image.image, new TextEncoder().encode(CRASH_ON_BOOT_MARKER)),
      provisioned: this.storage.token() !== null,
      install: this.storage.install(),
      pendingReport: this.storage.pendingReport(),
      contactDue: this.storage.isContactDue(this.#unixMs()),
    };
  }

  async #check(signal: AbortSignal): Promise<CheckAnswer> {
    const token = this.storage.token();
    if (token === null) return { kind: "unauthorized" };
    // measured before the radio's transmit burst pulls the cell down
    const status = this.#status();
    const radioOff = this.#transmit("update check");
    if (radioOff) return { kind: "failed", message: radioOff, recheckAfterS: null };
    this.#observe("request", "POST /api/badge/ota/check");
    const answer = await this.client.check(token, status, signal);
    this.#observe("answer", `check: ${describeCheck(answer)}`);
    return answer;
  }

  async #sync(signal: AbortSignal): Promise<SyncAnswer> {
    const token = this.storage.token();
    if (token === null) return { kind: "unauthorized" };
    const status = this.#status();
    const radioOff = this.#transmit("sync");
    if (radioOff) return { kind: "failed", message: radioOff, recheckAfterS: null };
    const report = this.storage.pendingReport();
    const taps = this.storage.taps().slice(0, MAX_TAPS_PER_SYNC);
    this.#observe("request", "POST /api/badge/sync");
    if (report !== null) this.#observe("report.sent", `ota=${report}`);
    for (const tap of taps) this.#observe("tap.sent", `${tap.n}|${tap.uid}|${tap.unixS}`);
    const answer = await this.client.sync(token, status, { report, taps }, signal);
    this.#observe("answer", `sync: ${answer.kind === "failed" ? answer.message : answer.kind}`);
    return answer;
  }

  #applySync(answer: Extract<SyncAnswer, { kind: "synced" }>): void {
    this.storage.setClockOffsetMs(answer.serverUnixS * 1000 - this.clock.now());
    if (answer.echoedReport !== null && answer.echoedReport === this.storage.pendingReport()) {
      this.storage.clearReport();
      this.#observe("report.cleared", answer.echoedReport);
    }
    this.storage.clearTaps(answer.taps.map((tap) => tap.n));
    for (const tap of answer.taps) this.#observe("tap.cleared", tap.accepted ? `${tap.n} accepted` : `${tap.n} rejected ${tap.reason}`);
    this.storage.recordContactSuccess(this.#unixMs(), answer.recheckAfterS);
  }

  /**
   * esp_ota_begin / esp_ota_write over an HTTP/1.0 download: the install is recorded in NVS
   * before the inactive slot is erased, every full buffer is written and hashed as it arrives,
   * and progress is recorded every CHECKPOINT_BYTES so a power cut can be reported precisely.
   */
  async #download(offer: Offer, send: (event: BadgeEvent) => void, signal: AbortSignal): Promise<void> {
    const fail = (reason: string, status: number | null = null) => send({ type: "download.failed", reason, status });
    const token = this.storage.token();
    if (token === null) return fail("no device token");
    const radioOff = this.#transmit("download");
    if (radioOff) return fail(radioOff);
    const slot = otherSlot(this.#running!.slot);
    const record: InstallRecord = { version: offer.version, display: offer.display, stage: "download", bytes: 0, total: offer.size };
    const md5 = createHash("md5");
    const buffer = new Uint8Array(DOWNLOAD_BUFFER_BYTES);
    let buffered = 0;
    let received = 0;
    let written = 0;
    let percent = -1;

    const writeBuffer = () => {
      const bytes = buffer.subarray(0, buffered);
      this.radio.receive(bytes.length);
      this.flash.writeSlot(slot, written, bytes, { activity: "download.write", offset: written, length: bytes.length, total: offer.size });
      md5.update(bytes);
      written += bytes.length;
      buffered = 0;
      if (written % CHECKPOINT_BYTES === 0) this.storage.saveInstall({ ...record, bytes: written });
      const now = Math.floor((written * 100) / offer.size);
      if (now !== percent) {
        this.#observe("download", `${written} of ${offer.size}`);
        send({ type: "download.progress", bytes: written });
      }
      percent = now;
    };

    this.#observe("request", `GET ${offer.path}`);
    const result = await this.client
      .download(
        token,
        offer.path,
        {
          onHead: (status, contentLength) => {
            if (status !== 200) return;
            if (contentLength !== null && contentLength !== offer.size) {
              throw new SizeProblem(`the server sends ${contentLength} bytes; the offer said ${offer.size}`);
            }
            this.storage.saveInstall(record);
            this.#observe("download", `0 of ${offer.size}`);
            this.flash.eraseSlot(slot, offer.size);
          },
          onBody: (chunk) => {
            if (received + chunk.length > offer.size) throw new SizeProblem(`the server sent more than the offered ${offer.size} bytes`);
            received += chunk.length;
            for (let at = 0; at < chunk.length; ) {
              const take = Math.min(chunk.length - at, DOWNLOAD_BUFFER_BYTES - buffered);
              buffer.set(chunk.subarray(at, at + take), buffered);
              buffered += take;
              at += take;
              if (buffered === DOWNLOAD_BUFFER_BYTES) writeBuffer();
            }
          },
        },
        signal,
      )
      .catch((error: unknown) => {
        if (!(error instanceof SizeProblem)) throw error;
        return error;
      });
    if (signal.aborted) return;
    if (result instanceof SizeProblem) return fail(result.message);
    this.#observe("answer", `download: HTTP ${result.status ?? "-"}, ${received} of ${offer.size} bytes, ${result.ending}`);
    if (result.status !== null && result.status !== 200) {
      return fail(`download refused: HTTP ${result.status}${result.refusal ? ` ${result.refusal}` : ""}`, result.status);
    }
    switch (result.ending) {
      case "complete":
        if (received < offer.size) return fail(`download cut at ${progressText(received, offer.size)}`);
        if (buffered > 0) writeBuffer();
        return send({ type: "download.finished", md5: md5.digest("hex") });
      case "stalled":
        this.clock.advance(this.client.stallTimeoutMs);
        return fail(`download stalled at ${progressText(received, offer.size)}: no data for ${this.client.stallTimeoutMs} ms`);
      case "unreachable":
        return fail(`server unreachable${result.error ? ` (${result.error})` : ""}`);
      default:
        return fail(`download cut at ${progressText(received, offer.size)}`);
    }
  }

  /** esp_ota_set_boot_partition: the new entry into the other otadata copy, then the restart. */
  #switchBootSlot(offer: Offer): void {
    const slot = otherSlot(this.#running!.slot);
    this.storage.saveInstall({ version: offer.version, display: offer.display, stage: "switch", bytes: offer.size, total: offer.size });
    this.storage.setDisplay(offer.version, offer.display);
    const { copy, entry } = nextEntry(this.flash.otadata, slot);
    this.flash.eraseOtadataCopy(copy);
    this.flash.writeOtadataCopy(copy, entry, { activity: "otadata.write", length: entry.length });
    if (this.battery.powerFailsWithin({ activity: "restart" }) !== null) this.battery.cutPower("before the restart into the new image");
  }
}

class SizeProblem extends Error {}

/** A `battery` observation's detail: `3.950 V, charging` (or `external power`, `battery`). */
export function batteryText(reading: { volts: number; externalPower: boolean; charging: boolean }): string {
  const source = reading.charging ? "charging" : reading.externalPower ? "external power" : "battery";
  return `${reading.volts.toFixed(3)} V, ${source}`;
}

function describeCheck(answer: CheckAnswer): string {
  switch (answer.kind) {
    case "offer":
      return `offer ${answer.offer.version} (${answer.offer.size} bytes, md5 ${answer.offer.md5})`;
    case "current":
      return `current (latest ${answer.latest})`;
    case "refused":
      return `refused ${answer.code}`;
    case "unauthorized":
      return "401 unauthorized";
    case "failed":
      return `failed: ${answer.message}`;
  }
}
