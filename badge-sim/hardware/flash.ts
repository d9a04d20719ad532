// The badge's SPI flash as real bytes: two OTA app slots (ota_0, ota_1, OTA_SLOT_BYTES each, as
// copy-on-write pages that share what other badges of this thread hold too: slot-pages.ts), the otadata partition (hardware/otadata.ts) and the NVS region
// (hardware/nvs.ts; held as the entries its last commit wrote, each entry's text as written).
// It behaves like NOR flash where that matters to an update: erase sets bytes to 0xFF in 4 KiB sectors, a write can only clear bits, a write the power dies in is
// partial, and the slot the chip runs from cannot be erased or written (esp_ota_begin refuses
// it with ESP_ERR_OTA_PARTITION_CONFLICT). Every erase and write the badge makes is logged with
// its simulated time, so "the running slot was never written" is a question the log answers. Operations take
// simulated time and drain the battery; none runs without power.
import { OTA_SLOT_BYTES } from "../../firmware/index.ts";
import type { VirtualClock } from "./virtual-clock.ts";
import type { Battery, PowerMoment } from "./battery.ts";
import { OTADATA_COPIES, OTADATA_ENTRY_BYTES, type SlotName } from "./otadata.ts";
import { PAGE_BYTES, SlotPages } from "./slot-pages.ts";

export type FlashRegion = SlotName | "otadata" | "nvs";

export interface FlashOperation {
  /** simulated ms */
  t: number;
  region: FlashRegion;
  op: "erase" | "write";
  offset: number;
  /** bytes actually erased or written: less than asked when the power died part way */
  length: number;
}

/** Simulated durations, roughly those of a 4 MB ESP32 module's SPI flash. */
export interface FlashTiming {
  erasePer64KiBMs: number;
  writePer4KiBMs: number;
  readPerMiBMs: number;
  nvsCommitMs: number;
  otadataEraseMs: number;
}

export const DEFAULT_FLASH_TIMING: FlashTiming = { erasePer64KiBMs: 150, writePer4KiBMs: 12, readPerMiBMs: 100, nvsCommitMs: 5, otadataEraseMs: 45 };

/** What a write without power was doing, written out once per region: a download writes 480 times. */
const WRITING: Record<FlashRegion, string> = { ota_0: "writing ota_0", ota_1: "writing ota_1", otadata: "writing otadata", nvs: "writing NVS" };

/** A slot page (slot-pages.ts) is one erase sector. */
export const SECTOR_BYTES = PAGE_BYTES;
const MiB = 1024 * 1024;

/** Erasing or writing the slot the chip runs from. */
export class PartitionConflictError extends Error {
  override name = "PartitionConflictError";
}

export class Flash {
  readonly log: FlashOperation[] = [];
  #timing: FlashTiming;
  #clock: VirtualClock;
  #battery: Battery;
  #slots: Record<SlotName, SlotPages> = { ota_0: new SlotPages(), ota_1: new SlotPages() };
  #otadata = new Uint8Array(OTADATA_COPIES * OTADATA_ENTRY_BYTES).fill(0xff);
  #nvs: readonly string[] = [];
  #nvsCommits = 0;
  #running: SlotName | null = null;
  /** replaced, never changed, as listeners come and go: an operation is heard by those there when it happened (as EventEmitter does) */
  #listeners: ReadonlyArray<(operation: FlashOperation) => void> = [];

  constructor(deps: { clock: VirtualClock; battery: Battery; timing?: Partial<FlashTiming> }) {
    this.#clock = deps.clock;
    this.#battery = deps.battery;
    this.#timing = { ...DEFAULT_FLASH_TIMING, ...deps.timing };
  }

  onOperation(listener: (operation: FlashOperation) => void): () => void {
    this.#listeners = [...this.#listeners, listener];
    return () => {
      this.#listeners = this.#listeners.filter((other) => other !== listener);
    };
  }

  /** A copy of the slot's bytes, all OTA_SLOT_BYTES of them (reading it takes no simulated time). */
  slot(name: SlotName): Uint8Array {
    return this.peekSlot(name, 0, OTA_SLOT_BYTES);
  }

  /** A copy of some of a slot's bytes without taking simulated time (the bootloader's look at an image's headers). */
  peekSlot(name: SlotName, offset: number, length: number): Uint8Array {
    return this.#slots[name].read(offset, length);
  }

  /** Pages of the slot held as this badge's own copy: written differently from every badge around it. */
  ownPages(name: SlotName): number {
    return this.#slots[name].ownPageCount();
  }

  /** Reads like the chip does: takes simulated time. */
  readSlot(name: SlotName, offset: number, length: number): Uint8Array {
    this.timeSlotRead(name, length);
    return this.#slots[name].read(offset, length);
  }

  /** The simulated time and power of reading `length` bytes of a slot, for a reader that knows them already. */
  timeSlotRead(name: SlotName, length: number): void {
    this.#battery.requirePower(`reading ${name}`);
    this.#clock.advance((length / MiB) * this.#timing.readPerMiBMs);
  }

  /** The first `length` bytes of a slot as a fingerprint (SlotPages.fingerprint); null when they are its own. */
  slotFingerprint(name: SlotName, length: number): string | null {
    return this.#slots[name].fingerprint(length);
  }

  get otadata(): Uint8Array {
    return this.#otadata.slice();
  }

  /** The NVS region as its last commit wrote it: each entry's text (none before the first commit). */
  get nvs(): readonly string[] {
    return this.#nvs;
  }

  /** How many NVS commits the flash has taken: while it is the same, so is the NVS region. */
  get nvsCommits(): number {
    return this.#nvsCommits;
  }

  get runningSlot(): SlotName | null {
    return this.#running;
  }

  /** The bootloader maps the slot it started; from then on it is off limits to erase and write. */
  setRunningSlot(slot: SlotName | null): void {
    this.#running = slot;
  }

  writesTo(region: FlashRegion): FlashOperation[] {
    return this.log.filter((operation) => operation.region === region);
  }

  /** Erases whole 4 KiB sectors from `from` (a sector boundary; a resumed download's checkpoint) until `bytes` are covered. */
  eraseSlot(name: SlotName, bytes: number, from = 0): void {
    this.#checkSlotAccess(name, from, bytes - from);
    const length = Math.min(OTA_SLOT_BYTES, Math.ceil(bytes / SECTOR_BYTES) * SECTOR_BYTES) - from;
    this.#battery.requirePower(`erasing ${name}`);
    this.#slots[name].erase(from, length);
    this.#clock.advance((length / (64 * 1024)) * this.#timing.erasePer64KiBMs);
    this.#record(name, "erase", from, length);
  }

  /**
   * NOR programming: bits only go from 1 to 0, so a write over unerased bytes gives their AND.
   * Answers the number of the shared page (SlotPages) the bytes now are, when they are a whole
   * page written onto erased flash that other slots of this thread hold too.
   */
  writeSlot(name: SlotName, offset: number, data: Uint8Array, moment?: PowerMoment): number | undefined {
    this.#checkSlotAccess(name, offset, data.length);
    const length = this.#lengthWritten(name, data, moment);
    const sharedPage = this.#slots[name].program(offset, length === data.length ? data : data.subarray(0, length));
    this.#programmed(name, offset, data, length);
    return sharedPage;
  }

  eraseOtadataCopy(copy: number): void {
    this.#battery.requirePower("erasing otadata");
    this.#otadata.fill(0xff, copy * OTADATA_ENTRY_BYTES, (copy + 1) * OTADATA_ENTRY_BYTES);
    this.#clock.advance(this.#timing.otadataEraseMs);
    this.#record("otadata", "erase", copy * OTADATA_ENTRY_BYTES, OTADATA_ENTRY_BYTES);
  }

  writeOtadataCopy(copy: number, entry: Uint8Array, moment?: PowerMoment): void {
    const offset = copy * OTADATA_ENTRY_BYTES;
    const length = this.#lengthWritten("otadata", entry, moment);
    for (let i = 0; i < length; i++) this.#otadata[offset + i]! &= entry[i]!;
    this.#programmed("otadata", offset, entry, length);
  }

  /**
   * NVS commits replace the region at once (ESP-IDF's NVS discards a torn entry on the next
   * mount): these entries' texts, which the flash keeps as given (strings do not change in place;
   * the caller hands over an array it no longer changes). `written`: the bytes the commit wrote,
   * the changed entry's text in UTF-8 (ESP-IDF's NVS appends the entry it changes), as logged.
   */
  commitNvs(entries: readonly string[], written: number): void {
    this.#battery.requirePower(WRITING.nvs);
    this.#nvs = entries;
    this.#nvsCommits += 1;
    this.#clock.advance(this.#timing.nvsCommitMs);
    this.#record("nvs", "write", 0, written);
  }

  /**
   * What `idf.py flash` does over USB: the app into a slot and a blank otadata, so that slot
   * boots. The bench does this, not the badge, so it takes no simulated time and is not logged.
   */
  flashOverUsb(name: SlotName, image: Uint8Array): void {
    if (image.length > OTA_SLOT_BYTES) throw new RangeError(`image of ${image.length} bytes does not fit the ${OTA_SLOT_BYTES}-byte slot`);
    const slot = this.#slots[name];
    slot.erase(0, OTA_SLOT_BYTES);
    slot.program(0, image);
    this.#otadata.fill(0xff);
  }

  #checkSlotAccess(name: SlotName, offset: number, length: number): void {
    if (name === this.#running) throw new PartitionConflictError(`${name} is the running slot; it cannot be erased or written`);
    if (offset < 0 || offset + length > OTA_SLOT_BYTES) {
      throw new RangeError(`${name}: bytes ${offset}..${offset + length} are outside the ${OTA_SLOT_BYTES}-byte slot`);
    }
  }

  /**
   * A write of `data` the power may cut short: how many of its bytes get programmed. The caller
   * programs them, then calls #programmed.
   */
  #lengthWritten(region: FlashRegion, data: Uint8Array, moment: PowerMoment | undefined): number {
    this.#battery.requirePower(WRITING[region]);
    return (moment === undefined ? null : this.#battery.powerFailsWithin(moment)) ?? data.length;
  }

  /** The time and power of programming `length` bytes of `data` at `offset`; the power dies here when it did not last the whole write. */
  #programmed(region: FlashRegion, offset: number, data: Uint8Array, length: number): void {
    this.#clock.advance((length / SECTOR_BYTES) * this.#timing.writePer4KiBMs);
    this.#battery.drain("perMiBWritten", length / MiB);
    this.#record(region, "write", offset, length);
    if (length < data.length) this.#battery.cutPower(`writing ${region} at offset ${offset + length}`);
  }

  #record(region: FlashRegion, op: FlashOperation["op"], offset: number, length: number): void {
    const operation = { t: this.#clock.now(), region, op, offset, length };
    this.log.push(operation);
    // indexed: a for-of made an iterator result per listener for each of a download's 480 writes
    const listeners = this.#listeners;
    for (let i = 0; i < listeners.length; i++) listeners[i]!(operation);
  }
}
