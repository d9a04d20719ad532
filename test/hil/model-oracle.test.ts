// The model as oracle (hil/model-oracle.ts): console events checked against badgeMachine.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { createMachine, type AnyStateNode } from "xstate";
import { badgeMachine } from "../../badge-sim/model/badge-machine.ts";
import { listTransitions } from "../../badge-sim/model/model-coverage.ts";
import type { ConsoleEvent } from "../../firmware/index.ts";
import { checkTranscript, ModelOracle, type Deviation } from "../../hil/model-oracle.ts";
import { Transcript } from "../../hil/transcript.ts";

const HAPPY = join(import.meta.dirname, "../../fixtures/transcripts/happy-update.txt");
const MD5 = "5d41402abc4b2a76b9719d911017c592";
const OTHER_MD5 = "7d793037a0760186574b0282f2f435e7";

const state = (path: string): ConsoleEvent => ({ kind: "state", path });
const boot = (cause: "power-on" | "restart" | "brownout" = "power-on", slot: "ota_0" | "ota_1" = "ota_0"): ConsoleEvent => ({ kind: "boot", slot, version: "1.4.0", cause });
const progress = (bytes: number, total = 262_144): ConsoleEvent => ({ kind: "progress", bytes, total });

/** Feeds `events` to a fresh oracle; the deviations, in order. */
function run(events: ConsoleEvent[], oracle = new ModelOracle()): Deviation[] {
  return events.map((event) => oracle.observe(event)).filter((deviation): deviation is Deviation => deviation !== null);
}

const UP_TO_DOWNLOAD: ConsoleEvent[] = [
  boot(),
  state("booting"),
  state("awake.opportunity"),
  state("online.syncing"),
  state("awake.idle"),
  state("online.checking"),
  state("online.offered"),
  state("online.downloading"),
  { kind: "screen", text: "Updating to 1.5.0\nDownloading 0% (0 of 256 KiB)" },
];

describe("ModelOracle", () => {
  it("passes the console events of a happy update (fixtures/transcripts/happy-update.txt)", () => {
    const verdict = checkTranscript(Transcript.parse(readFileSync(HAPPY, "utf8")));
    expect(verdict.deviation).toBeNull();
    expect(verdict.events).toBe(36);
  });

  it("passes a brownout mid-download, with or without the simulated badge's `state off`", () => {
    const after = (lostPower: ConsoleEvent[]) => [
      ...UP_TO_DOWNLOAD,
      progress(65_536),
      progress(131_072),
      ...lostPower,
      boot("brownout"),
      state("booting"),
      { kind: "report.stored", report: "err|1.5.0|power lost during download after 50% (128 of 256 KiB)" },
      state("awake.opportunity"),
      state("online.syncing"),
      { kind: "report.sent", report: "err|1.5.0|power lost during download after 50% (128 of 256 KiB)" },
      { kind: "report.cleared", report: "err|1.5.0|power lost during download after 50% (128 of 256 KiB)" },
      state("awake.idle"),
    ] satisfies ConsoleEvent[];
    expect(run(after([]))).toEqual([]);
    expect(run(after([state("off"), { kind: "screen", text: "" }]))).toEqual([]);
  });

  it("catches a badge that jumps from online.checking to online.switching, with what the model allows instead", () => {
    const oracle = new ModelOracle();
    const deviations = run([...UP_TO_DOWNLOAD.slice(0, 6), state("online.switching")], oracle);
    expect(deviations).toHaveLength(1);
    const [deviation] = deviations;
    expect(deviation).toMatchObject({ previous: "online.checking", observed: "state online.switching", rule: "transition" });
    // check done -> offered (transient: on to downloading, back to idle, or to updateFailed for a signature it will not take),
    // unauthorized -> unprovisioned, unplugged/failed -> idle
    expect(deviation!.allowed).toEqual(["awake.idle", "unprovisioned", "online.offered", "updateFailed", "online.downloading"]);
    expect(deviation!.message).toBe(
      "after online.checking the model allows awake.idle, unprovisioned, online.offered, updateFailed, online.downloading; the badge printed state online.switching",
    );
    expect(oracle.firstDeviation).toBe(deviation);
  });

  it("accepts a transient state printed or skipped (awake.opportunity, online.offered)", () => {
    expect(run([boot(), state("booting"), state("online.syncing"), state("awake.idle"), state("online.checking"), state("online.downloading")])).toEqual([]);
    expect(run([boot(), state("booting"), state("awake.opportunity"), state("awake.idle")])).toEqual([]);
  });

  it("catches a progress line while idle", () => {
    const [deviation, ...more] = run([boot(), state("booting"), state("awake.idle"), progress(65_536)]);
    expect(more).toEqual([]);
    expect(deviation).toMatchObject({ previous: "awake.idle", observed: "progress bytes=65536 total=262144", allowed: ["online.downloading"], rule: "event" });
    expect(deviation!.message).toBe("in awake.idle the model allows progress only in online.downloading; the badge printed progress bytes=65536 total=262144");
  });

  it("takes the md5 result's branch: ok leads to online.switching, a mismatch to updateFailed", () => {
    const md5 = (result: "ok" | "mismatch"): ConsoleEvent => ({ kind: "md5", result, got: result === "ok" ? MD5 : OTHER_MD5, want: MD5 });
    expect(run([...UP_TO_DOWNLOAD, progress(262_144), md5("ok"), state("online.switching"), { kind: "switch", slot: "ota_1" }, state("restarting")])).toEqual([]);
    expect(run([...UP_TO_DOWNLOAD, md5("mismatch"), state("updateFailed"), { kind: "report.stored", report: "err|1.5.0|MD5 mismatch" }, state("restarting")])).toEqual([]);
    const [wrongBranch] = run([...UP_TO_DOWNLOAD, md5("mismatch"), state("online.switching")]);
    expect(wrongBranch).toMatchObject({ previous: "online.downloading", allowed: ["updateFailed"] });
    expect(wrongBranch!.message).toMatch(/^after online\.downloading and md5 mismatch the model allows updateFailed;/);
  });

  it("wants an md5 ok before a switch, in online.switching only, to the other slot", () => {
    const [noMd5] = run([...UP_TO_DOWNLOAD, state("online.switching"), { kind: "switch", slot: "ota_1" }]);
    expect(noMd5).toMatchObject({ observed: "switch slot=ota_1", rule: "event" });
    expect(noMd5!.message).toMatch(/switch only after md5 result=ok/);
    const [idle] = run([boot(), state("booting"), state("awake.idle"), { kind: "switch", slot: "ota_1" }]);
    expect(idle).toMatchObject({ previous: "awake.idle", allowed: ["online.switching"] });
    const md5ok: ConsoleEvent = { kind: "md5", result: "ok", got: MD5, want: MD5 };
    const [sameSlot] = run([...UP_TO_DOWNLOAD, md5ok, state("online.switching"), { kind: "switch", slot: "ota_0" }]);
    expect(sameSlot!.message).toMatch(/a switch to the slot it runs from \(ota_0\)/);
  });

  it("places reports, token and tap events where the machine's actions and actors are", () => {
    const idle = [boot(), state("booting"), state("awake.idle")];
    expect(run([...idle, { kind: "report.sent", report: "ok|1.5.0" }])[0]).toMatchObject({ allowed: ["online.syncing"] });
    expect(run([...idle, { kind: "tap.queued", n: 1, uid: "04A1B2C3D0", at: 1_760_000_000 }])).toEqual([]);
    expect(run([boot(), state("booting"), state("bricked"), { kind: "tap.queued", n: 1, uid: "04A1B2C3D0", at: 1 }])).toHaveLength(1);
    // a 401 on check clears the token on the way to unprovisioned; not one on download while checking
    const checking = [...idle, state("online.checking")];
    expect(run([...checking, { kind: "token.cleared", request: "check" }, state("unprovisioned")])).toEqual([]);
    expect(run([...checking, { kind: "token.cleared", request: "download" }])).toHaveLength(1);
    const [cleared] = run([...idle, state("online.syncing"), { kind: "report.sent", report: "ok|1.5.0" }, { kind: "report.cleared", report: "ok|1.4.0" }]);
    expect(cleared!.message).toMatch(/report\.cleared only for the report sent \(the sync sent ok\|1\.5\.0\)/);
  });

  it("allows a boot or power loss anywhere, and only a boot after the run ends", () => {
    expect(run([...UP_TO_DOWNLOAD, state("off"), boot("power-on"), state("booting")])).toEqual([]);
    expect(run([boot(), state("booting"), state("awake.idle"), boot("restart"), state("booting")])).toEqual([]);
    const [ended] = run([...UP_TO_DOWNLOAD, state("updateFailed"), state("restarting"), state("awake.idle")]);
    expect(ended).toMatchObject({ previous: "restarting", allowed: [] });
    expect(ended!.message).toBe("after restarting the model allows nothing but a boot; the badge printed state awake.idle");
    const [unknown] = run([boot(), state("booting"), state("awake.dozing")]);
    expect(unknown!.message).toMatch(/the badge printed state awake\.dozing \(the model has no state awake\.dozing\)$/);
  });

  it("allows every transition listTransitions() lists, from every state it can fire in", () => {
    const nodeAt = (path: string): AnyStateNode => path.split(".").reduce<AnyStateNode>((node, key) => node.states[key]!, badgeMachine.root);
    const entered = (node: AnyStateNode): string => (node.type === "compound" ? entered(node.initial.target[0]!) : node.path.join("."));
    const leavesUnder = (node: AnyStateNode): string[] => (Object.keys(node.states).length === 0 ? [node.path.join(".")] : Object.values(node.states).flatMap(leavesUnder));
    let checked = 0;
    for (const transition of listTransitions()) {
      const sources = transition.source === "badge" ? leavesUnder(badgeMachine.root) : leavesUnder(nodeAt(transition.source));
      for (const source of sources) {
        for (const target of transition.targets) {
          const oracle = new ModelOracle({ initial: source });
          expect(oracle.observe(state(entered(nodeAt(target)))), `${transition.id} from ${source}`).toBeNull();
          checked++;
        }
      }
    }
    expect(checked).toBeGreaterThan(40);
  });

  it("reads the allowed transitions from the machine it is given", () => {
    const machine = createMachine({ id: "m", initial: "a", states: { a: { on: { go: "b" } }, b: { initial: "c", states: { c: { always: "d" }, d: {} } } } });
    expect(run([state("a"), state("b.c"), state("b.d")], new ModelOracle({ machine }))).toEqual([]);
    expect(run([state("a"), state("b.d")], new ModelOracle({ machine }))).toEqual([]);
    const [back] = run([state("b.d"), state("a")], new ModelOracle({ machine }));
    expect(back!.message).toBe("after b.d the model allows nothing but a boot; the badge printed state a");
    expect(() => new ModelOracle({ initial: "nowhere" })).toThrow(/not a state of the model/);
  });

  it("stops a transcript replayed through it at the first deviation", () => {
    const text = readFileSync(HAPPY, "utf8").replace("@bb state path=online.offered\\r\\n@bb state path=online.downloading\\r\\n", "@bb state path=online.switching\\r\\n");
    const verdict = checkTranscript(Transcript.parse(text));
    expect(verdict.deviation).toMatchObject({ previous: "online.checking", observed: "state online.switching" });
    expect(verdict.at?.text).toBe("@bb state path=online.switching");
    // the progress lines after it (in online.switching) would deviate too; the replay stopped first
    expect(verdict.events).toBe(11);
  });

  it("counts a malformed @bb line in a transcript as a deviation", () => {
    const text = readFileSync(HAPPY, "utf8").replace("@bb progress bytes=65536 total=262144", "@bb progress bytes=lots total=262144");
    const verdict = checkTranscript(Transcript.parse(text));
    expect(verdict.deviation?.message).toMatch(/^in online\.downloading the badge printed a malformed console line: .*bytes="lots" is not a whole number/);
    expect(verdict.deviation?.event).toBeNull();
  });
});
