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
import { createMD5, type IHasher } from "hash-wasm";

/** A state the hash reached: `id` names it in the steps remembered from it. */
interface Reached {
  id: number;
  /** hash-wasm's `save()` of the state */
  state: Uint8Array;
}

/** Steps remembered, by `<state id>:<shared page id>`; forgotten all at once beyond this many (about 40 full slots of pages). */
const MAX_STEPS = 20_000;
const steps = new Map<string, Reached>();
let nextId = 1;
/** The state of no bytes hashed: where every remembered path starts. */
let initial: Reached | null = null;

export class SlotMd5 {
  readonly #hasher: IHasher;
  /** the state reached while every buffer so far was a remembered step; null once the hasher alone holds it */
  #reached: Reached | null = null;
  /** the remembered state the hasher holds now (it is loaded only when a step must be hashed) */
  #hasherAt: Reached | null = null;

  private constructor(hasher: IHasher) {
    this.#hasher = hasher;
  }

  static async create(): Promise<SlotMd5> {
    return new SlotMd5(await createMD5());
  }

  /** Starts over: no bytes hashed. */
  init(): void {
    this.#hasher.init();
    initial ??= { id: nextId++, state: this.#hasher.save() };
    this.#reached = this.#hasherAt = initial;
  }

  /** Hashes `bytes`, just written to the slot; `page`: the shared page they are, as Flash.writeSlot answered. */
  update(bytes: Uint8Array, page: number | undefined): void {
    if (this.#reached === null || page === undefined) {
      this.#loadReached();
      this.#reached = null;
      this.#hasher.update(bytes);
      return;
    }
    const key = `${this.#reached.id}:${page}`;
    let next = steps.get(key);
    if (!next) {
      this.#loadReached();
      this.#hasher.update(bytes);
      next = { id: nextId++, state: this.#hasher.save() };
      if (steps.size >= MAX_STEPS) steps.clear();
      steps.set(key, next);
      this.#hasherAt = next;
    }
    this.#reached = next;
  }

  /** The state, for a checkpoint in NVS. */
  save(): Uint8Array {
    return this.#reached ? this.#reached.state.slice() : this.#hasher.save();
  }

  /** A checkpoint's state: hashing goes on from there. */
  load(state: Uint8Array): void {
    this.#hasher.load(state);
    this.#reached = this.#hasherAt = null;
  }

  /** The MD5 of everything hashed, as hex. */
  digest(): string {
    this.#loadReached();
    this.#reached = this.#hasherAt = null;
    return this.#hasher.digest("hex");
  }

  /** Puts the state reached into the hasher, unless it holds it already. */
  #loadReached(): void {
    if (this.#reached && this.#hasherAt !== this.#reached) this.#hasher.load(this.#reached.state);
    this.#hasherAt = this.#reached;
  }
}
