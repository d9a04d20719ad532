// Non-volatile storage: string keys and values kept as bytes in the flash's NVS region, so what
// is stored survives reboots and brownouts and nothing else does. Every read decodes the
// bytes (there is no cache that a power cut could leave behind), every change is one atomic
// commit. Keys follow ESP-IDF's limit of 15 characters.
import type { Flash } from "./flash.ts";

const MAX_KEY_LENGTH = 15;

export class Nvs {
  #flash: Flash;

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

  #read(): Map<string, string> {
    const bytes = this.#flash.nvs;
    if (bytes.length === 0) return new Map();
    return new Map(JSON.parse(new TextDecoder().decode(bytes)) as Array<[string, string]>);
  }

  #write(entries: Map<string, string>): void {
    this.#flash.commitNvs(new TextEncoder().encode(JSON.stringify([...entries])));
  }
}
