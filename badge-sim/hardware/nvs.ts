// Non-volatile storage: string keys and values kept in the flash's NVS region, so what is
// stored survives reboots and brownouts and nothing else does. Every read is of the region as
// committed: the decoded entries are kept only while the flash has taken no commit since they
// were decoded, so no value can outlive the commit it came from. Every change is one atomic
// commit of the whole region. Keys follow ESP-IDF's limit of 15 characters.
//
// Each entry is its key, a NUL, and its value, as an ESP-IDF NVS entry holds a NUL-terminated key
// before its data. A download commits its checkpoint twice every 64 KiB, and writing the whole
// region out again each time (every value escaped again as JSON) was a tenth of a simulated
// update's model cost (issue 25): an entry's text is kept from the commit that wrote it, so a
// commit writes out only the entry it changes and hands the flash the others as they were.
import type { Flash } from "./flash.ts";

const MAX_KEY_LENGTH = 15;
/** Ends an entry's key; a value may hold anything after it. */
const KEY_END = "\0";

/** The committed entries and each one's text in the region, by key. */
interface Decoded {
  /** the flash's `nvsCommits` when these were read or written */
  commits: number;
  entries: Map<string, string>;
  /** each entry's text in the region */
  texts: Map<string, string>;
}

export class Nvs {
  #flash: Flash;
  #decoded: Decoded | null = null;

  constructor(flash: Flash) {
    this.#flash = flash;
  }

  get(key: string): string | undefined {
    return this.#read().entries.get(key);
  }

  set(key: string, value: string): void {
    if (key.length === 0 || key.length > MAX_KEY_LENGTH || key.includes(KEY_END)) {
      throw new RangeError(`NVS key ${JSON.stringify(key)} must be 1 to ${MAX_KEY_LENGTH} characters, none of them NUL`);
    }
    const entry = `${key}${KEY_END}${value}`;
    const decoded = this.#read();
    const texts: string[] = [];
    decoded.texts.forEach((text, other) => texts.push(other === key ? entry : text));
    if (!decoded.texts.has(key)) texts.push(entry);
    this.#commit(texts, Buffer.byteLength(entry));
    decoded.entries.set(key, value);
    decoded.texts.set(key, entry);
  }

  delete(key: string): void {
    const decoded = this.#read();
    if (!decoded.entries.has(key)) return;
    const texts: string[] = [];
    decoded.texts.forEach((text, other) => {
      if (other !== key) texts.push(text);
    });
    this.#commit(texts, 0);
    decoded.entries.delete(key);
    decoded.texts.delete(key);
  }

  /** The entries as committed, as a map of the caller's own. */
  entries(): Map<string, string> {
    return new Map(this.#read().entries);
  }

  #read(): Decoded {
    const commits = this.#flash.nvsCommits;
    if (this.#decoded?.commits !== commits) {
      const texts = this.#flash.nvs;
      const list = texts.map((text): [string, string] => [text.slice(0, text.indexOf(KEY_END)), text.slice(text.indexOf(KEY_END) + 1)]);
      this.#decoded = { commits, entries: new Map(list), texts: new Map(list.map(([key], i) => [key, texts[i]!])) };
    }
    return this.#decoded;
  }

  /**
   * Commits the region made of these entries, the changed one's text `written` bytes long (0 for
   * a delete). A commit without power throws before it changes anything; once it returns, the
   * decoded entries (changed by the caller to match) are those of the region now committed.
   */
  #commit(texts: string[], written: number): void {
    this.#flash.commitNvs(texts, written);
    this.#decoded!.commits = this.#flash.nvsCommits;
  }
}
