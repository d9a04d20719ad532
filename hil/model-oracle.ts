// The model as oracle (issue 5 item 5): while a real (or serial-served simulated) badge runs a
// scenario, the badge statechart (badge-sim/model/badge-machine.ts) runs beside it, and every console
// event the badge prints is checked against what the chart allows; the first deviation fails the
// run with expected vs observed.
//
// Nothing here is a hand-written table of the badge's behaviour: which state may follow which,
// where a `progress` line may appear, which branch an MD5 result takes, all come from the
// machine's state nodes (their `on`, `always`, `after` and invoke `onDone` transitions, their
// invokes, their actions). What is written by hand is only how console events name the model's
// parts (CONSOLE_CONCEPTS): `progress` is the machine's `download.progress` event, `switch` is the
// `switchBootSlot` actor at work, `report.stored` is the `storeReport` action, and so on.
import type { AnyStateMachine, AnyStateNode, AnyTransitionDefinition } from "xstate";
import { badgeMachine } from "../badge-sim/model/badge-machine.ts";
import { formatConsoleEvent, parseConsoleLine, type ConsoleEvent, type ConsoleEventKind } from "../firmware/index.ts";
import type { Transcript } from "./transcript.ts";

/** What the badge did that the model does not allow. */
export interface Deviation {
  /** the badge's state (dotted path) before the event; `unknown` before the first state or boot */
  previous: string;
  /** the event as printed, without `@bb `: `state online.switching`, `progress bytes=65536 total=262144` */
  observed: string;
  /**
   * For a state change: the states the model allows next. For another event: where (or after
   * what) the model allows it.
   */
  allowed: string[];
  /** `after online.checking the model allows ...; the badge printed state online.switching` */
  message: string;
  /** `transition` for a state change the chart does not have; `event` for an event out of place */
  rule: "transition" | "event";
  /** the event (null for a malformed `@bb` line) */
  event: ConsoleEvent | null;
}

export interface ModelOracleOptions {
  /** the statechart to check against (default badgeMachine) */
  machine?: AnyStateMachine;
  /** the state the badge is known to be in when checking starts (default: unknown, taken from the first `state` or `boot`) */
  initial?: string;
}

/** The badge's state after a power loss, as the simulated badge prints it. */
export const OFF_STATE = "off";
const UNKNOWN = "unknown";

/**
 * How console events name the model's parts, for the event-level rules:
 * - `handles`: the event is the badge reporting a machine event, so it belongs where that event is handled;
 * - `invokes`: the event is the work of an invoked actor, so it belongs in the state invoking it;
 * - `action`: the event is an action's effect, so it belongs beside a transition (or entry) carrying it.
 */
const CONSOLE_CONCEPTS: Partial<Record<ConsoleEventKind, { handles: string } | { invokes: string } | { action: string }>> = {
  progress: { handles: "download.progress" },
  md5: { handles: "download.finished" },
  switch: { invokes: "switchBootSlot" },
  "report.sent": { invokes: "sync" },
  "report.cleared": { action: "applySync" },
  "report.stored": { action: "storeReport" },
  "token.cleared": { action: "forgetToken" },
  "tap.queued": { action: "queueTap" },
};
/** The guards of the `download.finished` branches an `md5 result=ok` may take (a badge holding release keys verifies next). */
const IMAGE_INTACT_GUARDS = ["isImageIntact", "isSignedImageIntact"];
const MD5_EVENT = (CONSOLE_CONCEPTS.md5 as { handles: string }).handles;

const pathOf = (node: AnyStateNode) => node.path.join(".");

type Action = unknown;
function actionType(action: Action): string | undefined {
  if (typeof action === "string") return action;
  if (action !== null && typeof action === "object" && "type" in action && typeof action.type === "string") return action.type;
  return undefined;
}
function guardType(transition: AnyTransitionDefinition): string | undefined {
  const guard = transition.guard;
  if (guard === undefined) return undefined;
  if (typeof guard === "string") return guard;
  if (typeof guard === "function") return guard.name;
  return (guard as { type: string }).type;
}

/** The machine's transition graph over its leaf states, as the console sees them. */
class ModelGraph {
  /** leaf state paths in document order */
  readonly leaves: string[] = [];
  readonly initial: string;
  readonly #nodes = new Map<string, AnyStateNode>();
  /** leaf -> the states one transition leads to (targets resolved to the leaves they enter) */
  readonly #direct = new Map<string, string[]>();
  /** leaves whose `always` can pass through them within one step, so the badge may not print them */
  readonly #transient = new Set<string>();
  readonly #allowedAfter = new Map<string, string[]>();

  constructor(machine: AnyStateMachine) {
    const visit = (node: AnyStateNode) => {
      if (node.path.length > 0) this.#nodes.set(pathOf(node), node);
      if (node.type === "atomic" || node.type === "final") this.leaves.push(pathOf(node));
      Object.values(node.states).forEach(visit);
    };
    visit(machine.root);
    this.initial = this.entryLeaves(machine.root)[0]!;
    for (const leaf of this.leaves) {
      const node = this.#nodes.get(leaf)!;
      if ((node.always ?? []).length > 0) this.#transient.add(leaf);
      const next: string[] = [];
      for (const transition of this.transitionsAt(leaf)) for (const target of transition.target ?? []) next.push(...this.entryLeaves(target));
      this.#direct.set(leaf, unique(next));
    }
  }

  has(path: string): boolean {
    return this.leaves.includes(path);
  }

  /** The leaves entering `node` leads to, following `initial` down (every region of a parallel one). */
  entryLeaves(node: AnyStateNode): string[] {
    if (node.type === "atomic" || node.type === "final") return [pathOf(node)];
    if (node.type === "parallel") return Object.values(node.states).flatMap((child) => this.entryLeaves(child));
    const initial = node.initial?.target ?? [];
    return initial.length > 0 ? initial.flatMap((child: AnyStateNode) => this.entryLeaves(child)) : [];
  }

  /** Every candidate transition that can fire in `leaf`: its own first, then its ancestors'. */
  transitionsAt(leaf: string): AnyTransitionDefinition[] {
    const found: AnyTransitionDefinition[] = [];
    for (let node: AnyStateNode | undefined = this.#nodes.get(leaf); node; node = node.parent) {
      for (const candidates of [...node.transitions.values(), node.always ?? []]) found.push(...candidates);
    }
    return found;
  }

  /** The leaves the state node at `leaf` and its ancestors make up: `online.downloading`, `online`. */
  ancestorsOf(leaf: string): AnyStateNode[] {
    const found: AnyStateNode[] = [];
    for (let node: AnyStateNode | undefined = this.#nodes.get(leaf); node && node.path.length > 0; node = node.parent) found.push(node);
    return found;
  }

  leavesUnder(node: AnyStateNode): string[] {
    const prefix = pathOf(node);
    return prefix === "" ? [...this.leaves] : this.leaves.filter((leaf) => leaf === prefix || leaf.startsWith(`${prefix}.`));
  }

  /**
   * The states the badge may print after `leaf`: each state a transition leads to, and where that
   * state is transient (an `always` moves on at once), the states it leads to, as the badge may
   * print both or only the last.
   */
  allowedAfter(leaf: string): string[] {
    let allowed = this.#allowedAfter.get(leaf);
    if (!allowed) {
      allowed = this.throughTransient(this.#direct.get(leaf) ?? []);
      this.#allowedAfter.set(leaf, allowed);
    }
    return allowed;
  }

  /** `states` and, after each transient one, where it leads, recursively. */
  throughTransient(states: string[]): string[] {
    const out: string[] = [];
    const add = (state: string) => {
      if (out.includes(state)) return;
      out.push(state);
      if (this.#transient.has(state)) (this.#direct.get(state) ?? []).forEach(add);
    };
    states.forEach(add);
    return out;
  }

  /** Leaves where `eventType` has a transition (own or an ancestor's). */
  handling(eventType: string): string[] {
    return this.leaves.filter((leaf) => this.ancestorsOf(leaf).some((node) => node.transitions.has(eventType)));
  }

  /** Leaves inside a state that invokes the actor `src`. */
  invoking(src: string): string[] {
    return this.leaves.filter((leaf) => this.ancestorsOf(leaf).some((node) => node.invoke.some((invoke) => invoke.src === src)));
  }

  /**
   * Where an action's effect may be printed: on either side of a transition that carries it (the
   * simulated badge prints it before the new state, firmware may print it after), and on either
   * side of entering a state whose entry carries it. `where` narrows the transitions by the leaf
   * they start from.
   */
  aroundAction(type: string, where: (leaf: string) => boolean = () => true): string[] {
    const found = new Set<string>();
    for (const leaf of this.leaves) {
      if (!where(leaf)) continue;
      for (const transition of this.transitionsAt(leaf)) {
        if (!transition.actions.some((action: Action) => actionType(action) === type)) continue;
        found.add(leaf);
        for (const target of transition.target ?? []) this.entryLeaves(target).forEach((entered) => found.add(entered));
      }
    }
    for (const node of this.#nodes.values()) {
      if (!node.entry.some((action: Action) => actionType(action) === type)) continue;
      const inside = this.leavesUnder(node);
      for (const leaf of this.leaves) {
        if (inside.includes(leaf) || (where(leaf) && (this.#direct.get(leaf) ?? []).some((next) => inside.includes(next)))) found.add(leaf);
      }
    }
    return this.leaves.filter((leaf) => found.has(leaf));
  }

  /** Where `download.finished` leads from `leaf` on the branches guarded by IMAGE_INTACT_GUARDS (`intact`) or the others. */
  md5Outcomes(leaf: string, intact: boolean): string[] {
    const branches = this.transitionsAt(leaf).filter((transition) => transition.eventType === MD5_EVENT);
    const taken = branches.filter((transition) => IMAGE_INTACT_GUARDS.includes(guardType(transition) ?? "") === intact);
    return this.throughTransient(unique(taken.flatMap((transition) => (transition.target ?? []).flatMap((target: AnyStateNode) => this.entryLeaves(target)))));
  }
}

function unique<T>(items: T[]): T[] {
  return [...new Set(items)];
}

/** `state online.checking`, `progress bytes=65536 total=262144` */
export function describeEvent(event: ConsoleEvent): string {
  if (event.kind === "state") return `state ${event.path}`;
  try {
    return formatConsoleEvent(event).replace(/^@bb /, "");
  } catch {
    return `${event.kind} ${JSON.stringify(event)}`;
  }
}

const graphs = new WeakMap<AnyStateMachine, ModelGraph>();
function graphOf(machine: AnyStateMachine): ModelGraph {
  let graph = graphs.get(machine);
  if (!graph) graphs.set(machine, (graph = new ModelGraph(machine)));
  return graph;
}

/**
 * Follows the badge's console events and checks each against the machine. The rules:
 * - `boot` (a reset or power loss) is allowed anywhere; the badge is then `booting`, and may print
 *   `state booting` (or go straight on to what booting leads to). `state off` is allowed anywhere
 *   too, and then only a boot (or `state booting`) may follow.
 * - `state B` after `state A`: the machine has a transition that can fire in A (written on A or an
 *   ancestor; `on`, `always`, `after`, invoke `onDone`) whose target is B, or a compound state whose
 *   initial descendants are B, or a transient state (`always`) that leads on to B.
 * - `progress` and `md5` only where the machine handles `download.progress`/`download.finished`;
 *   after `md5`, the next state must be where that branch goes (`ok`: an isImageIntact or isSignedImageIntact one).
 * - `progress` bytes never pass the total and never go back within one download.
 * - `switch` only in the state invoking `switchBootSlot`, after an `md5 result=ok` since the
 *   download began, to a slot other than the one the badge booted from.
 * - `report.sent` only in the state invoking `sync`; `report.cleared` only beside a transition
 *   carrying `applySync`, and only for the report sent in that sync.
 * - `report.stored`, `token.cleared` and `tap.queued` only beside a transition (or an entry)
 *   carrying `storeReport`, `forgetToken` or `queueTap`; `token.cleared request=R` only beside one
 *   leaving the state that invokes R.
 * - `screen`, `status` and `refused` are allowed anywhere.
 * After a deviation the oracle takes the badge's word for its state and goes on checking, so a
 * monitor can flag each one; a test run fails on the first (`firstDeviation`).
 */
export class ModelOracle {
  readonly #graph: ModelGraph;
  #state: string;
  /** after a boot: `state booting` may still come */
  #bootPending = false;
  #bootSlot: string | null = null;
  /** after an md5 line: where the model's branch goes */
  #md5Next: string[] | null = null;
  #md5Ok = false;
  #lastProgress = -1;
  #sentReport: string | null = null;
  readonly deviations: Deviation[] = [];

  constructor(options: ModelOracleOptions = {}) {
    this.#graph = graphOf(options.machine ?? badgeMachine);
    const initial = options.initial;
    if (initial !== undefined && initial !== OFF_STATE && !this.#graph.has(initial)) {
      throw new TypeError(`initial ${JSON.stringify(initial)} is not a state of the model; its states are ${this.#graph.leaves.join(", ")}`);
    }
    this.#state = initial ?? UNKNOWN;
  }

  /** The badge's state as followed so far (`unknown` before any state or boot). */
  get state(): string {
    return this.#state;
  }

  get firstDeviation(): Deviation | null {
    return this.deviations[0] ?? null;
  }

  /** The states the model allows the badge to print next, from where it is now. */
  allowedNext(): string[] {
    if (this.#md5Next) return this.#md5Next;
    if (this.#state === OFF_STATE) return [this.#graph.initial];
    const after = this.#state === UNKNOWN ? [] : this.#graph.allowedAfter(this.#state);
    return this.#bootPending ? unique([this.#graph.initial, ...after]) : after;
  }

  /** Checks one console event; returns the deviation it is, or null. */
  observe(event: ConsoleEvent): Deviation | null {
    const deviation = this.#check(event);
    if (deviation) this.deviations.push(deviation);
    return deviation;
  }

  #check(event: ConsoleEvent): Deviation | null {
    switch (event.kind) {
      case "boot":
        this.#enterRun(this.#graph.initial);
        this.#bootPending = true;
        this.#bootSlot = event.slot;
        return null;
      case "state":
        return this.#changeState(event);
      case "progress":
        return (
          this.#where(event, this.#placeOf("progress")) ??
          (event.bytes > event.total
            ? this.#eventDeviation(event, [`progress bytes=0..${event.total}`], `progress past the total`)
            : event.bytes < this.#lastProgress
              ? this.#eventDeviation(event, [`progress bytes=${this.#lastProgress}..${event.total}`], `progress going back from ${this.#lastProgress} bytes`)
              : ((this.#lastProgress = event.bytes), null))
        );
      case "md5": {
        const misplaced = this.#where(event, this.#placeOf("md5"));
        if (misplaced) return misplaced;
        this.#md5Ok = event.result === "ok";
        this.#md5Next = this.#graph.md5Outcomes(this.#state, this.#md5Ok);
        return null;
      }
      case "switch": {
        const misplaced = this.#where(event, this.#placeOf("switch"));
        if (misplaced) return misplaced;
        if (!this.#md5Ok) return this.#eventDeviation(event, ["md5 result=ok"], "switch only after md5 result=ok in this download");
        if (event.slot === this.#bootSlot) return this.#eventDeviation(event, [this.#bootSlot === "ota_0" ? "switch slot=ota_1" : "switch slot=ota_0"], `a switch to the slot it runs from (${event.slot})`);
        return null;
      }
      case "report.sent": {
        const misplaced = this.#where(event, this.#placeOf("report.sent"));
        if (!misplaced) this.#sentReport = event.report;
        return misplaced;
      }
      case "report.cleared": {
        const misplaced = this.#where(event, this.#placeOf("report.cleared"));
        if (misplaced) return misplaced;
        if (event.report !== this.#sentReport) {
          const sent = this.#sentReport === null ? "no report was sent in this sync" : `the sync sent ${this.#sentReport}`;
          return this.#eventDeviation(event, this.#sentReport === null ? [] : [`report.cleared report=${this.#sentReport}`], `report.cleared only for the report sent (${sent})`);
        }
        this.#sentReport = null;
        return null;
      }
      case "token.cleared": {
        // the 401 came on a request made by the actor of that name (check, sync, download)
        const from = new Set(this.#graph.invoking(event.request));
        return this.#where(event, this.#placeOf("token.cleared", (leaf) => from.has(leaf)));
      }
      case "report.stored":
      case "tap.queued": {
        return this.#where(event, this.#placeOf(event.kind));
      }
      case "screen":
      case "status":
      case "refused":
        return null;
    }
  }

  /** Where the machine puts the model part a console event kind names (CONSOLE_CONCEPTS). */
  #placeOf(kind: ConsoleEventKind, where?: (leaf: string) => boolean): string[] {
    const concept = CONSOLE_CONCEPTS[kind];
    if (!concept) return this.#graph.leaves;
    if ("handles" in concept) return this.#graph.handling(concept.handles);
    if ("invokes" in concept) return this.#graph.invoking(concept.invokes);
    return this.#graph.aroundAction(concept.action, where);
  }

  #enterRun(state: string): void {
    this.#state = state;
    this.#md5Next = null;
    this.#md5Ok = false;
    this.#lastProgress = -1;
    this.#sentReport = null;
  }

  #changeState(event: Extract<ConsoleEvent, { kind: "state" }>): Deviation | null {
    const next = event.path;
    const previous = this.#state;
    if (next === OFF_STATE) {
      this.#enterRun(OFF_STATE);
      this.#bootPending = false;
      return null;
    }
    if (previous === UNKNOWN) {
      this.#adopt(next);
      return null;
    }
    const allowed = this.allowedNext();
    if (this.#bootPending && next === this.#graph.initial) {
      this.#bootPending = false;
      this.#adopt(next);
      return null;
    }
    this.#bootPending = false;
    if (allowed.includes(next)) {
      this.#adopt(next);
      return null;
    }
    const unknown = this.#graph.has(next) ? "" : ` (the model has no state ${next})`;
    const options = allowed.length === 0 ? "nothing but a boot" : allowed.join(", ");
    const deviation: Deviation = {
      previous,
      observed: describeEvent(event),
      allowed: [...allowed],
      message: `after ${previous}${this.#md5Next ? ` and md5 ${this.#md5Ok ? "ok" : "mismatch"}` : ""} the model allows ${options}; the badge printed state ${next}${unknown}`,
      rule: "transition",
      event,
    };
    this.#adopt(next);
    return deviation;
  }

  #adopt(state: string): void {
    if (state !== this.#state) {
      // a new download, or a new sync: what the last one saw no longer counts
      if (this.#placeOf("md5").includes(state)) {
        this.#md5Ok = false;
        this.#lastProgress = -1;
      }
      if (this.#placeOf("report.sent").includes(state)) this.#sentReport = null;
    }
    this.#state = state;
    this.#md5Next = null;
  }

  /** A deviation unless the badge is in one of `states`. */
  #where(event: ConsoleEvent, states: string[]): Deviation | null {
    if (this.#state === UNKNOWN || states.includes(this.#state)) return null;
    return this.#eventDeviation(event, states, `${event.kind} only in ${states.join(", ") || "no state"}`);
  }

  #eventDeviation(event: ConsoleEvent, allowed: string[], rule: string): Deviation {
    const observed = describeEvent(event);
    return { previous: this.#state, observed, allowed, message: `in ${this.#state} the model allows ${rule}; the badge printed ${observed}`, rule: "event", event };
  }
}

/** One console line of a transcript: its 1-based number among the lines received, and its text. */
export interface ConsoleLine {
  line: number;
  text: string;
}

/** The lines the badge sent in a transcript, decoded as one UTF-8 stream (chunk boundaries do not matter). */
export function linesOf(transcript: Transcript): ConsoleLine[] {
  const decoder = new TextDecoder("utf-8");
  let text = "";
  for (const entry of transcript.entries) if (entry.kind === "received") text += decoder.decode(entry.bytes, { stream: true });
  text += decoder.decode();
  const lines = text.split("\n").map((line) => (line.endsWith("\r") ? line.slice(0, -1) : line));
  if (lines.at(-1) === "") lines.pop();
  return lines.map((line, index) => ({ line: index + 1, text: line }));
}

export interface OracleVerdict {
  /** the first deviation (a malformed `@bb` line counts as one), or null */
  deviation: Deviation | null;
  /** the console line it was on */
  at: ConsoleLine | null;
  /** console events checked, the deviating one included */
  events: number;
}

/** Plays a transcript's console events through a fresh oracle, stopping at the first deviation. */
export function checkTranscript(transcript: Transcript, options: ModelOracleOptions = {}): OracleVerdict {
  const oracle = new ModelOracle(options);
  let events = 0;
  for (const line of linesOf(transcript)) {
    const parsed = parseConsoleLine(line.text);
    if (parsed === null) continue;
    events++;
    if (!parsed.ok) {
      const deviation: Deviation = {
        previous: oracle.state,
        observed: line.text,
        allowed: [],
        message: `in ${oracle.state} the badge printed a malformed console line: ${parsed.message}`,
        rule: "event",
        event: null,
      };
      return { deviation, at: line, events };
    }
    const deviation = oracle.observe(parsed.event);
    if (deviation) return { deviation, at: line, events };
  }
  return { deviation: null, at: null, events };
}
