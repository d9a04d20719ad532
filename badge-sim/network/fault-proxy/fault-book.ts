// Which requests a fault strikes: by path, and by the `nth` and `times` of the requests that match.
import { BADGE_PATHS } from "../../../firmware/index.ts";
import type { Fault } from "./faults.ts";

/**
 * Which faults a request gets: each fault counts the requests that match its path. The proxy
 * consults it per request; the scenario report replays the same count to place its fault marks.
 */
export class FaultBook {
  private slots: Array<{ fault: Fault; matched: number }> = [];

  constructor(faults: Fault[]) {
    this.replace(faults);
  }

  replace(faults: Fault[]): void {
    this.slots = faults.map((fault) => ({ fault, matched: 0 }));
  }

  /** Adds faults beside the ones set; theirs count matching requests from now. */
  add(faults: Fault[]): void {
    this.slots.push(...faults.map((fault) => ({ fault, matched: 0 })));
  }

  select(target: string): Fault[] {
    const selected: Fault[] = [];
    for (const slot of this.slots) {
      const { fault } = slot;
      // a man in the middle who rewrote the offer's MD5 tampers with every download of it too
      if (fault.kind === "mitm" && fault.atByte !== undefined && pathMatches(BADGE_PATHS.download, target)) {
        selected.push({ kind: "corrupt", atByte: fault.atByte, xor: fault.xor ?? 0x01 });
      }
      if (!pathMatches(fault.path ?? (fault.kind === "mitm" ? BADGE_PATHS.check : BADGE_PATHS.download), target)) continue;
      slot.matched += 1;
      const first = slot.fault.nth ?? 1;
      const times = slot.fault.times ?? (slot.fault.nth === undefined ? Infinity : 1);
      if (slot.matched >= first && slot.matched < first + times) selected.push(slot.fault);
    }
    return selected;
  }
}

function pathMatches(pattern: string | RegExp, target: string): boolean {
  const path = originForm(target);
  if (typeof pattern !== "string") {
    pattern.lastIndex = 0;
    return pattern.test(path);
  }
  const query = path.indexOf("?");
  return (query === -1 ? path : path.slice(0, query)) === pattern;
}

/** A client that knows it talks to a proxy sends the absolute form, http://host/path?query. */
export function originForm(target: string): string {
  if (!/^https?:\/\//i.test(target) || !URL.canParse(target)) return target;
  const url = new URL(target);
  return `${url.pathname}${url.search}`;
}
