// Non-volatile storage: string keys and values kept as bytes in the flash's NVS region, so what
// is stored survives reboots and brownouts and nothing else does. Every read is of the bytes as
// committed: the decoded entries are kept only while the flash has taken no commit since they
// were decoded (a download commits its checkpoint 30 times, and each commit read the region
// again), so no value can outlive the bytes it came from. Every change is one atomic commit.
// Keys follow ESP-IDF's limit of 15 characters.
import type { Flash } from "./flash.ts";

const MAX_KEY_LENGTH = 15;

export class Nvs {
  #flash: Flash;
  /** the entries decoded at the flash's `nvsCommits`-th commit */
  #decoded: { commits: number; entries: Map<string, string> } | null = null;

  constructor(flash: Flash) {
    this.#flash = flash;
  }

  get(key: string): string | undefined {
    return this.#read().get(key);
  }

  set(key: string, value: string): void {
    if (key.length === 0 || key.length > MAX_KEY_LENGTH) throw new RangeError(`NVS key ${JSON.stringify(key)} must be 1 to ${MAX_KEY_LENGTH} characters`);
    const entries = this.#read();
    entries.set(key, value);
    this.#write(entries);
  }

  delete(key: string): void {
    const entries = this.#read();
    if (entries.delete(key)) this.#write(entries);
  }

  entries(): Map<string, string> {
    return this.#read();
  }

  /** The entries as committed, as a map of the caller's own. */
  #read(): Map<string, string> {
    const commits = this.#flash.nvsCommits;
    if (this.#decoded?.commits !== commits) {
      const bytes = this.#flash.nvs;
      const entries = bytes.length === 0 ? new Map<string, string>() : new Map(JSON.parse(new TextDecoder().decode(bytes)) as Array<[string, string]>);
      this.#decoded = { commits, entries };
    }
    return new Map(this.#decoded.entries);
  }

  #write(entries: Map<string, string>): void {
    this.#flash.commitNvs(new TextEncoder().encode(JSON.stringify([...entries])));
    // committed (a commit without power throws before it changes anything): these are the bytes now
    this.#decoded = { commits: this.#flash.nvsCommits, entries };
  }
}
