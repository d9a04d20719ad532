// The MD5 a download computes over the bytes it writes to the inactive slot (the firmware hashes
// each buffer as it writes it), kept as hash-wasm's state so that a checkpoint can save it to NVS
// and a resume can load it again (issue 23).
//
// Every simulated badge of a thread downloads the same few images, and hashing 1.9 MB again for
// each was, after the fetch itself, most of a simulated update's wall time (issue 25). So a step
// of whole slot pages is remembered: a buffer that is exactly a shared page (the flash write
// answers which: slot-pages.ts compared the bytes as it wrote them) takes the hash from a state
// reached before to the state that page gave then, without hashing it again. It is the same state byte for byte: MD5's state after some
// bytes depends on its state before them and the bytes, nothing else. A buffer that is no shared
// page (a private page, a short last buffer) or a resume's loaded state is hashed as it comes.
//
// One hash-wasm hasher serves every SlotMd5 of the thread, loaded with the state it works on
// before each use: instantiating one per download was a tenth of a millisecond of every update,
// and a download hashes only between two of its awaits, never across one.
import { createMD5, type IHasher } from "hash-wasm";

/** A state the hash reached. */
interface Reached {
  /** hash-wasm's `save()` of the state */
  state: Uint8Array;
  /** the states remembered from here, by the shared page hashed next; none for a state off the remembered paths */
  steps: Map<number, Reached> | null;
  /**
   * The step last taken from here (`lastPage` 0: none), looked at before `steps`: the next
   * download of the same image takes it again, and reads this object only, not the map, for
   * each of its 480 pages (between two of the server's turns little of it is in the CPU's
   * caches; issue 25).
   */
  lastPage: number;
  lastNext: Reached | null;
  /** the digest of the bytes hashed up to here, once asked */
  digest?: string;
  /** `state` in base64, once asked */
  base64?: string;
}

/** Steps remembered; forgotten all at once beyond this many (about 40 full slots of pages). */
const MAX_STEPS = 20_000;
let stepsRemembered = 0;
/** The state of no bytes hashed: where every remembered path starts. */
let initial: Reached | null = null;

let sharedHasher: Promise<IHasher> | null = null;
/** the state the shared hasher holds now, if it is one of these objects (loading it again is then skipped) */
let hasherHolds: Reached | null = null;

/** A state reached, with steps remembered from it (`remembered`) or none. */
function reached(state: Uint8Array, remembered: boolean): Reached {
  return { state, steps: remembered ? new Map() : null, lastPage: 0, lastNext: null };
}

export class SlotMd5 {
  readonly #hasher: IHasher;
  #at: Reached;

  private constructor(hasher: IHasher, at: Reached) {
    this.#hasher = hasher;
    this.#at = at;
  }

  static async create(): Promise<SlotMd5> {
    const hasher = await (sharedHasher ??= createMD5());
    return new SlotMd5(hasher, SlotMd5.#initial(hasher));
  }

  /** Starts over: no bytes hashed. */
  init(): void {
    this.#at = SlotMd5.#initial(this.#hasher);
  }

  /** Hashes `bytes`, just written to the slot; `page`: the shared page they are, as Flash.writeSlot answered. */
  update(bytes: Uint8Array, page: number | undefined): void {
    const from = this.#at;
    if (page !== undefined && from.lastPage === page) {
      this.#at = from.lastNext!;
      return;
    }
    const remember = page !== undefined && from.steps !== null;
    const known = remember ? from.steps!.get(page) : undefined;
    if (known) {
      from.lastPage = page!;
      from.lastNext = known;
      this.#at = known;
      return;
    }
    this.#load(from);
    this.#hasher.update(bytes);
    const next = reached(this.#hasher.save(), remember);
    hasherHolds = next;
    if (remember) {
      if (stepsRemembered >= MAX_STEPS) {
        // paths from the old initial state stay with the downloads on them, and go with them
        initial = null;
        stepsRemembered = 0;
      }
      from.steps!.set(page!, next);
      from.lastPage = page!;
      from.lastNext = next;
      stepsRemembered += 1;
    }
    this.#at = next;
  }

  /** The state, for a checkpoint in NVS. */
  save(): Uint8Array {
    return this.#at.state.slice();
  }

  /** The state in base64, as a checkpoint records it in NVS (written out once for a state every badge on the path reaches). */
  saveBase64(): string {
    const { state } = this.#at;
    return (this.#at.base64 ??= Buffer.from(state.buffer, state.byteOffset, state.byteLength).toString("base64"));
  }

  /** A checkpoint's state: hashing goes on from there. */
  load(state: Uint8Array): void {
    this.#at = reached(state.slice(), false);
  }

  /** The MD5 of everything hashed, as hex. */
  digest(): string {
    const at = this.#at;
    if (at.digest === undefined) {
      this.#load(at);
      at.digest = this.#hasher.digest("hex");
      // digesting ends the hasher's state: it holds none of ours now
      hasherHolds = null;
    }
    return at.digest;
  }

  #load(reached: Reached): void {
    if (hasherHolds !== reached) this.#hasher.load(reached.state);
    hasherHolds = reached;
  }

  static #initial(hasher: IHasher): Reached {
    if (!initial) {
      hasher.init();
      initial = reached(hasher.save(), true);
      hasherHolds = initial;
    }
    return initial;
  }
}
