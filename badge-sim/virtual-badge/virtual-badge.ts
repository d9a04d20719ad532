// A whole simulated badge: virtual hardware (battery, flash, radio) on a simulated clock, the
// badge machine running on it with its effects (badge-effects.ts), the HTTP/1.0 client, and an
// observation log of everything that changed (observation-log.ts). Tests and the scenario runner
// drive it like a wearer and an environment would (menu, card, power, time) and read what it
// observed.
//
// One run of the machine is one boot. A restart or a wake from deep sleep ends the run and
// starts the next; a brownout kills the run where it stands: its pending effects are dropped,
// the socket is closed, and the power comes back `brownoutOffMs` later with a fresh boot.
// Flash and NVS keep exactly what was written before the cut.
//
// This file: the badge put together, and its driver (the wearer, the world, time, the runs).
import { createActor } from "xstate";
import { buildAppImage, parseVersion } from "../../firmware/index.ts";
import { Battery, type BatteryEvent, type BatteryOptions, type BrownoutPoint } from "../hardware/battery.ts";
import { Flash, SECTOR_BYTES, type FlashOperation, type FlashRegion, type FlashTiming } from "../hardware/flash.ts";
import { Nvs } from "../hardware/nvs.ts";
import type { SlotName } from "../hardware/otadata.ts";
import { Radio, type RadioLink } from "../hardware/radio.ts";
import { VirtualClock } from "../hardware/virtual-clock.ts";
import { screenOf, statePath, type BadgeEvent, type BadgeSnapshot } from "../model/badge-machine.ts";
import { BadgeStorage, type QueuedTap } from "../model/badge-storage.ts";
import { BadgeClient, type SilentPeers } from "../network/badge-client.ts";
import { BadgeEffects, type BootCause, type Run } from "./badge-effects.ts";
import { batteryText, ObservationLog, type Observation, type ObservationKind } from "./observation-log.ts";

const DAY_MS = 24 * 3600_000;

/**
 * The observation details of whole-sector flash operations, by region and sector, written out
 * once for every badge of the thread: a download writes 480 sectors, the same ones on every
 * badge, and each detail is kept in its log.
 */
const sectorDetails: Partial<Record<FlashRegion, string[]>> = {};

/** A flash operation's observation detail: `ota_1 0x1f000 +4096`. */
function flashDetail(operation: FlashOperation): string {
  const { region, offset, length } = operation;
  if (length !== SECTOR_BYTES || offset % SECTOR_BYTES !== 0) return describeFlash(operation);
  const details = (sectorDetails[region] ??= []);
  return (details[offset / SECTOR_BYTES] ??= describeFlash(operation));
}

function describeFlash({ region, offset, length }: FlashOperation): string {
  return `${region} 0x${offset.toString(16)} +${length}`;
}

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
  /**
   * brownout: power failures at given points. crashOnBoot: versions whose image crashes as this
   * badge starts it, whatever the image holds (a defect of this badge's board the release meets,
   * as a staged rollout's failing share does; CRASH_ON_BOOT_MARKER crashes it on every badge).
   */
  faults?: { brownout?: BrownoutPoint | BrownoutPoint[]; crashOnBoot?: readonly string[] };
  /**
   * `silentPeers`: who can say that a connection will stay silent (the fault proxy in front of
   * the server); then a stall runs on the simulated clock instead of waiting the wall's timeout.
   */
  network?: { stallTimeoutMs?: number; wallStallTimeoutMs?: number; link?: Partial<RadioLink>; silentPeers?: SilentPeers };
  flashTiming?: Partial<FlashTiming>;
  /** the badge's wall clock when the simulation starts, unix ms (default: now); null: never set */
  rtcUnixMs?: number | null;
  /** how long the power stays off after a brownout, simulated ms (default 1000) */
  brownoutOffMs?: number;
  /** raw Ed25519 public keys the factory image trusts (at most 2): the badge then verifies signed releases */
  trustedKeys?: Uint8Array[];
}

/** Factory images by version and trusted keys: built once (its checksum and SHA-256 took a badge's start), copied into each flash. */
const factoryImages = new Map<string, Uint8Array>();

function factoryImage(version: string, trustedKeys: Uint8Array[] = []): Uint8Array {
  const key = [version, ...trustedKeys.map((publicKey) => Buffer.from(publicKey).toString("hex"))].join(" ");
  let image = factoryImages.get(key);
  if (!image) factoryImages.set(key, (image = buildAppImage({ version, trustedKeys })));
  return image;
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
  /** every observation, in order (`observation-log.ts`) */
  readonly log: Observation[];
  #observations: ObservationLog;
  #effects: BadgeEffects;
  #run: Run | null = null;
  #inFlight = new Set<Promise<unknown>>();
  #lastState = "";
  #lastScreen = "";
  /** the snapshot last noted: the inspector and the subscription both hand it over */
  #lastSnapshot: BadgeSnapshot | null = null;
  #broken: unknown = null;
  #brownoutOffMs: number;
  #stopped = false;
  #silentPeers: SilentPeers | undefined;
  #silenceSignal: Promise<void> | null = null;
  #silenced: (() => void) | null = null;
  #stopHearingSilence: (() => void) | null = null;

  constructor(options: VirtualBadgeOptions) {
    if (!parseVersion(options.version)) throw new TypeError(`version ${JSON.stringify(options.version)} must be three dotted numbers, like 1.4.0`);
    if (options.token !== null && (typeof options.token !== "string" || options.token === "")) throw new TypeError("token must be a non-empty string or null");
    const brownoutOffMs = options.brownoutOffMs ?? 1000;
    if (!(brownoutOffMs >= 0)) throw new TypeError(`brownoutOffMs ${brownoutOffMs} must be 0 or more simulated ms`);
    this.#brownoutOffMs = brownoutOffMs;
    this.clock = options.clock ?? new VirtualClock();
    this.client = new BadgeClient({
      baseUrl: options.serverUrl,
      stallTimeoutMs: options.network?.stallTimeoutMs,
      wallStallTimeoutMs: options.network?.wallStallTimeoutMs,
      clock: this.clock,
    });
    this.#silentPeers = options.network?.silentPeers;
    this.#stopHearingSilence =
      this.#silentPeers?.onSilence(() => {
        this.#silenced?.();
        this.#silenceSignal = null;
      }) ?? null;
    this.battery = new Battery(options.battery);
    this.flash = new Flash({ clock: this.clock, battery: this.battery, timing: options.flashTiming });
    this.radio = new Radio({ clock: this.clock, battery: this.battery, link: options.network?.link });
    this.storage = new BadgeStorage(new Nvs(this.flash));
    this.#observations = new ObservationLog(() => this.clock.now());
    this.log = this.#observations.entries;
    this.#effects = new BadgeEffects({
      clock: this.clock,
      battery: this.battery,
      flash: this.flash,
      radio: this.radio,
      storage: this.storage,
      client: this.client,
      log: this.#observations,
      crashOnBoot: options.faults?.crashOnBoot ?? [],
      track: (promise) => this.#track(promise),
      fail: (error) => {
        this.#broken ??= error;
      },
      progressed: () => {
        if (this.#run) this.#showScreen(screenOf(this.#run.actor.getSnapshot(), this.#effects.downloadedBytes));
      },
    });

    // The factory state: the app flashed over USB into ota_0 (blank otadata), NVS provisioned.
    this.flash.flashOverUsb("ota_0", factoryImage(options.version, options.trustedKeys));
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
      const network = this.#network();
      // waiting on silent peers only: simulated time may pass (the client's stall timeout runs on it)
      if (network === "silent") return;
      // the peer fell silent, and its last bytes are still on their way to the client: look again
      if (network === "draining") continue;
      const holds = until && this.#observations.when(() => until(this));
      try {
        await Promise.race([...this.#inFlight, ...(holds ? [holds.promise] : []), ...(this.#silentPeers ? [this.#silence()] : [])]);
      } finally {
        holds?.stop();
      }
      // The condition holds after the machine's step: done, without another turn of the event
      // loop (which ran whatever else the process had waiting, the server's work after its answer
      // included, inside the caller's wait).
      this.#throwIfBroken();
      if (until?.(this)) return;
    }
  }

  /** Whether every open connection of the client waits on a peer known to be silent, having read all it was sent. */
  #network(): "busy" | "draining" | "silent" {
    const open = this.client.openConnections();
    if (!this.#silentPeers || open.length === 0) return "busy";
    const silent = this.#silentPeers.silentConnections();
    let draining = false;
    for (const connection of open) {
      const peer = silent.find((candidate) => candidate.clientPort === connection.localPort);
      if (!peer) return "busy";
      if (connection.bytesRead < peer.bytesSent) draining = true;
    }
    return draining ? "draining" : "silent";
  }

  /** Resolves when a peer next falls silent. */
  #silence(): Promise<void> {
    this.#silenceSignal ??= new Promise((resolve) => (this.#silenced = resolve));
    return this.#silenceSignal;
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
    this.#stopHearingSilence?.();
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
    return this.#effects.running?.version ?? null;
  }

  runningSlot(): SlotName | null {
    return this.#effects.running?.slot ?? null;
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
    return this.#observations.of(kind);
  }

  /** Calls `listener` with every observation as it is logged (a serial console prints them); returns the unsubscribe. */
  onObservation(listener: (observation: Observation) => void): () => void {
    return this.#observations.onObservation(listener);
  }

  // --- runs ----------------------------------------------------------------------------------

  #start(cause: BootCause): void {
    const run = { alive: true, cause } as Run;
    run.actor = createActor(this.#effects.machine(), {
      clock: this.clock,
      input: { battery: this.battery.reading() },
      // Every microstep, so states passed through without stopping (`awake.opportunity`) are observed too.
      inspect: (event) => {
        if (event.type === "@xstate.microstep" && event.actorRef === run.actor) this.#noteSnapshot(run, event.snapshot as BadgeSnapshot);
      },
    });
    // before it starts: its first actor (boot) and entry actions run from start()
    this.#effects.bind(run);
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
    // the inspector's last microstep and the subscription hear the same snapshot: note it once
    if (!run.alive || snapshot === this.#lastSnapshot) return;
    this.#lastSnapshot = snapshot;
    const state = statePath(snapshot.value);
    if (state !== this.#lastState) this.#observe("state", state);
    this.#lastState = state;
    this.#showScreen(screenOf(snapshot, this.#effects.downloadedBytes));
  }

  /**
   * Sends `event` to the run, the machine first told the bytes the download has written (it
   * hears them only now, not at every percent: an unplug's notice says where the download was).
   */
  #send(event: BadgeEvent): void {
    const run = this.#run;
    if (!run) return;
    const bytes = this.#effects.downloadedBytes;
    if (bytes !== null && run.actor.getSnapshot().context.received !== bytes) run.actor.send({ type: "download.progress", bytes });
    run.actor.send(event);
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
      this.#send({ type, battery: reading });
    }
  }

  #onFlash(operation: FlashOperation): void {
    if (operation.region === "nvs") return;
    this.#observe(operation.op === "erase" ? "flash.erase" : "flash.write", flashDetail(operation));
  }

  #input(description: string, event: BadgeEvent): void {
    this.#observe("input", description);
    this.#send(event);
  }

  #observe(kind: ObservationKind, detail: string): void {
    this.#observations.observe(kind, detail);
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
}
