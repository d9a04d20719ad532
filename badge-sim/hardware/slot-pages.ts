// An OTA slot's bytes as copy-on-write pages of one erase sector (4 KiB), so that a fleet of
// thousands of simulated badges holding full-size images fits in memory. An erased page is
// `null` and costs nothing. A page whose bytes, once written to its end, equal a page already
// seen at the same offset in this thread (the release every badge downloads, the factory image
// every badge was flashed with) becomes that shared page. Only a page written differently (a
// torn write, a flipped bit, an image nobody else has) is the slot's own. A shared page is
// never written: programming it copies it first.
//
// Sharing is decided by comparing bytes, never by trusting where they came from, so a badge
// reads exactly what it wrote; and at most MAX_SHARED_PER_OFFSET pages are kept per offset, so
// the pool of a long fault sweep over many different images stays small.
import { OTA_SLOT_BYTES } from "../../firmware/index.ts";

export const PAGE_BYTES = 4096;
export const PAGES_PER_SLOT = Math.ceil(OTA_SLOT_BYTES / PAGE_BYTES);
const MAX_SHARED_PER_OFFSET = 8;

// The shared pages of this thread: never written once shared, each with its number (for
// fingerprints: two slots holding the same shared pages hold the same bytes). Kept flat, up to
// MAX_SHARED_PER_OFFSET places per page index side by side: a download looks up each of its 480
// pages between two of the server's turns, when little of this is in the CPU's caches, and a
// lookup then reads the index's run of places and the candidates' bytes, not a list of objects
// (issue 25).
const poolBytes = new Array<Uint8Array | null>(PAGES_PER_SLOT * MAX_SHARED_PER_OFFSET).fill(null);
/** the number of the shared page in each place (0 for an empty place) */
const poolIds = new Uint32Array(PAGES_PER_SLOT * MAX_SHARED_PER_OFFSET);
/** the first 4 bytes of the shared page in each place, little-endian: a page that differs there is passed over without reading the page */
const poolHeads = new Uint32Array(PAGES_PER_SLOT * MAX_SHARED_PER_OFFSET);
/** how many places of each page index are taken */
const poolCounts = new Uint8Array(PAGES_PER_SLOT);
let nextSharedId = 1;

function headOf(bytes: Uint8Array): number {
  return (bytes[0]! | (bytes[1]! << 8) | (bytes[2]! << 16) | (bytes[3]! << 24)) >>> 0;
}

/** The place of the shared page at `index` holding exactly `bytes`, or -1. */
function sharedEqual(index: number, bytes: Uint8Array): number {
  const first = index * MAX_SHARED_PER_OFFSET;
  const head = headOf(bytes);
  for (let place = first; place < first + poolCounts[index]!; place++) {
    if (poolHeads[place] === head && Buffer.compare(poolBytes[place]!, bytes) === 0) return place;
  }
  return -1;
}

/** The place of the shared page equal to `page`, which becomes one itself while there is room; -1 when it stays private. */
function share(index: number, page: Uint8Array): number {
  const same = sharedEqual(index, page);
  if (same !== -1 || poolCounts[index] === MAX_SHARED_PER_OFFSET) return same;
  const place = index * MAX_SHARED_PER_OFFSET + poolCounts[index]!++;
  poolBytes[place] = page;
  poolHeads[place] = headOf(page);
  poolIds[place] = nextSharedId++;
  return place;
}

export class SlotPages {
  readonly #pages: Array<Uint8Array | null> = new Array<Uint8Array | null>(PAGES_PER_SLOT).fill(null);
  /** 1 where the page is this slot's own copy, which it may program in place */
  readonly #own = new Uint8Array(PAGES_PER_SLOT);
  /** the shared page's number where the page is a shared one, else 0 */
  readonly #sharedIds = new Uint32Array(PAGES_PER_SLOT);

  /** Pages this slot holds a copy of its own (not erased, not shared). */
  ownPageCount(): number {
    return this.#own.reduce((sum, own) => sum + own, 0);
  }

  /** Sets whole pages back to erased (0xFF), from `offset` (a page boundary) for `length` bytes. */
  erase(offset: number, length: number): void {
    for (let index = offset / PAGE_BYTES; index < Math.ceil((offset + length) / PAGE_BYTES); index++) {
      this.#pages[index] = null;
      this.#own[index] = 0;
      this.#sharedIds[index] = 0;
    }
  }

  /**
   * NOR programming: each byte becomes its AND with the data. When `data` is one whole page
   * written onto erased flash, the number of the shared page it now is (its bytes are exactly
   * `data`), if it is one: the download's MD5 steps over shared pages by it (slot-md5.ts).
   */
  program(offset: number, data: Uint8Array): number | undefined {
    const onePage = data.length === PAGE_BYTES && offset % PAGE_BYTES === 0 && this.#pages[offset / PAGE_BYTES] === null;
    let at = 0;
    while (at < data.length) {
      const index = Math.floor((offset + at) / PAGE_BYTES);
      const inPage = (offset + at) % PAGE_BYTES;
      const take = Math.min(data.length - at, PAGE_BYTES - inPage);
      // A whole page programmed onto erased flash reads as the data itself: when another slot
      // holds that page already, take it without making a private copy first (a download's case).
      const shared = take === PAGE_BYTES && this.#pages[index] === null ? sharedEqual(index, take === data.length ? data : data.subarray(at, at + take)) : -1;
      if (shared !== -1) {
        this.#holdShared(index, shared);
        at += take;
        continue;
      }
      const page = this.#ownPage(index);
      for (let i = 0; i < take; i++) page[inPage + i]! &= data[at + i]!;
      at += take;
      // Written to its end: from here on the page is usually final (writes are sequential).
      if (inPage + take === PAGE_BYTES) this.#settle(index);
    }
    return onePage ? this.#sharedIds[offset / PAGE_BYTES] || undefined : undefined;
  }

  /**
   * What the first `length` bytes are made of, as the shared pages' numbers (0 for erased):
   * equal fingerprints mean equal bytes, so what was computed over one holds for the other.
   * Null when a page in the range is this slot's own, whose bytes nobody else is known to share.
   */
  fingerprint(length: number): string | null {
    const pages = Math.ceil(length / PAGE_BYTES);
    if (this.#own.subarray(0, pages).includes(1)) return null;
    // the numbers' own bytes as the key: exact, and written out natively (a boot asks for 480 of them)
    return `${length}:${Buffer.from(this.#sharedIds.buffer, 0, pages * Uint32Array.BYTES_PER_ELEMENT).toString("latin1")}`;
  }

  /** A copy of `length` bytes from `offset`. */
  read(offset: number, length: number): Uint8Array {
    const out = new Uint8Array(length).fill(0xff);
    let at = 0;
    while (at < length) {
      const index = Math.floor((offset + at) / PAGE_BYTES);
      const inPage = (offset + at) % PAGE_BYTES;
      const take = Math.min(length - at, PAGE_BYTES - inPage);
      const page = this.#pages[index];
      if (page) out.set(page.subarray(inPage, inPage + take), at);
      at += take;
    }
    return out;
  }

  #ownPage(index: number): Uint8Array {
    const page = this.#pages[index];
    if (page && this.#own[index]) return page;
    const copy = page ? page.slice() : new Uint8Array(PAGE_BYTES).fill(0xff);
    this.#pages[index] = copy;
    this.#own[index] = 1;
    this.#sharedIds[index] = 0;
    return copy;
  }

  #settle(index: number): void {
    const shared = share(index, this.#pages[index]!);
    if (shared !== -1) this.#holdShared(index, shared);
  }

  /** Holds the shared page in `place` (of the pool above) at `index`. */
  #holdShared(index: number, place: number): void {
    this.#pages[index] = poolBytes[place]!;
    this.#own[index] = 0;
    this.#sharedIds[index] = poolIds[place]!;
  }
}
