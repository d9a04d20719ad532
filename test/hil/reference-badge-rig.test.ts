// The rig against the reference badge in C (issue 15): `badgebench hil run` plays every shipped
// scenario on firmware/reference-badge's host build over a socat pty pair, exactly as on a real
// badge: the model oracle checks every console line, power cuts, unplugging and plugging in go
// through the MQTT relays on its battery and its USB power (Tasmota topics on the real Mosquitto,
// answered by starting or SIGKILLing the badge process and by its VBUS sense file), network
// faults through the fault proxy the badge's NVS points at (the range faults of the resume
// scenarios among them), and the revoked token through the rig's provision command.
// scripts/cli/reference-badge-rig.ts builds the bench; this test runs it as a user would and reads
// its JSON report.
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import mqtt from "mqtt";
import { describe, expect, it, onTestFinished } from "vitest";
import { loadScenario } from "../../badge-sim/runners/scenario.ts";
import { ProcessRelay, runReferenceRig, runsOf } from "../../scripts/cli/reference-badge-rig.ts";
import { ROOT } from "../server/cli-process.ts";

const BROKER = process.env.MQTT_URL ?? "mqtt://127.0.0.1:1883";
const SHIPPED = fs.readdirSync(path.join(ROOT, "fixtures/scenarios")).filter((file) => file.endsWith(".json")).length;

/** `scripts/cli/reference-badge-rig.ts ARGS --json` as a user runs it: its exit code and JSON report. */
async function runRig(args: string[]) {
  const child = spawn(process.execPath, ["--import", "tsx", "scripts/cli/reference-badge-rig.ts", ...args, "--json"], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const code = await new Promise<number | null>((resolve) => child.once("close", resolve));
  // on a failure, the scenarios that did not pass first: the whole report is long
  const notPassed = () => {
    try {
      return JSON.stringify(JSON.parse(stdout).results.filter((result: { outcome: string }) => result.outcome !== "passed")).slice(0, 4000);
    } catch {
      return stdout.slice(0, 4000);
    }
  };
  expect(code, `${stderr}\n${code === 0 ? "" : notPassed()}`).toBe(0);
  return JSON.parse(stdout);
}

// The badge's clock runs 10 times faster than the wall (`--clock-factor`, the rig file's
// clockFactor): the pending report's 60 s wait takes 6 s, a 256 KiB download at 64 KiB/s 0.4 s.
const CLOCK_FACTOR = "10";

describe("the rig against the reference badge", () => {
  it("passes every shipped scenario, the model checking each console line, power through the MQTT relays, faults from the proxy", { timeout: 600_000 }, async () => {
    const run = await runRig(["--clock-factor", CLOCK_FACTOR]);
    const failing = run.results.filter((result: { outcome: string }) => result.outcome === "failed" || result.outcome === "error");
    expect(failing, JSON.stringify(failing, null, 2).slice(0, 4000)).toEqual([]);
    expect(run).toMatchObject({ object: "reference_badge_rig", scenarios: SHIPPED, passed: SHIPPED, failed: 0, errors: 0, skipped: 0 });

    for (const result of run.results) {
      // every expectation of the file held, and the model allowed every console event
      const fields = result.checks.map((check: { field: string }) => check.field);
      expect(fields, result.name).toContain("model");
      expect(fields.length, result.name).toBeGreaterThan(1);
      expect(result.checks.every((check: { passed: boolean }) => check.passed), result.name).toBe(true);
    }
    // the six brownouts (one of them the resume after a power cut) each cut the power through MQTT
    // and the relays switched it back on; the revoked token's two provisionings (its token in, the
    // rig's back) each switched it off and on; each setup switched the badge on, and off first
    // unless it was a hil run's first (the rig leaves the badge off between hil runs)
    expect(run.runs).toBe(9);
    expect(run.setups).toBeGreaterThanOrEqual(run.runs);
    expect(run.relay.off).toBe(8 + run.setups - run.runs);
    expect(run.relay.on).toBe(8 + run.setups);
    // every cut landed where its scenario says: before the next install checkpoint, before the
    // download ended, before otadata was written; all at 10x (the proxy holds the download at
    // the end of a byte cut's window, the badge waits in the switch with --hold-switch)
    const cuts = run.results.flatMap((result: { name: string; checks: Array<{ field: string; passed: boolean; observed: string }> }) =>
      result.checks.filter((check) => check.field === "power.cut").map((check) => ({ name: result.name, ...check })),
    );
    expect(cuts.map((cut: { name: string }) => cut.name).sort()).toEqual([
      "a power cut during the download, resumed after the reboot",
      "brownout at 10 %",
      "brownout at 50 %",
      "brownout at 99 %",
      "brownout during the partition switch",
      "pending report delivered after a brownout",
    ]);
    expect(cuts.every((cut: { passed: boolean }) => cut.passed), JSON.stringify(cuts)).toBe(true);
    const factors = Object.fromEntries(run.results.map((result: { name: string; clock_factor: number }) => [result.name, result.clock_factor]));
    // every scenario at 10x: the proxy's hold and the switch hold let each cut land at any speed
    expect(Object.values(factors).every((factor) => factor === 10)).toBe(true);
    expect(Object.keys(factors)).toHaveLength(run.scenarios);
    const observed = (field: string) =>
      Object.fromEntries(
        run.results.map((result: { name: string; checks: Array<{ field: string; observed: unknown }> }) => [result.name, result.checks.find((check) => check.field === field)?.observed]),
      );
    const reports = observed("expect.report");
    expect(reports["brownout during the partition switch"]).toBe("err|1.5.0|power lost during the partition switch");
    expect(reports["connection dropped at byte 131072"]).toBe("err|1.5.0|download cut at 50% (128 of 256 KiB)");
    expect(reports["happy path"]).toBe("ok|1.5.0");
    expect(reports["pending report delivered after a brownout"]).toMatch(/^err\|1\.5\.0\|power lost during download after \d+% /);
    // asleep on its battery, woken by USB power, the report out at the boot that follows
    expect(observed("expect.states")["pending report delivered after a brownout"]).toEqual(expect.arrayContaining(["asleep", "wakingUp"]));
    expect(observed("expect.unprovisioned")["revoked token"]).toBe(true);
    // issue 23: the C badge resumes from its NVS checkpoint after a cut and after a power cut (each
    // scenario expects the "Resuming at ..." screen), starts over on a 200, refuses a 206 elsewhere
    const outcomes = Object.fromEntries(run.results.map((result: { name: string; outcome: string }) => [result.name, result.outcome]));
    for (const name of ["a download cut at 90 % resumes", "a power cut during the download, resumed after the reboot", "a proxy that ignores Range", "a resume answered at the wrong offset"]) {
      expect(outcomes[name], name).toBe("passed");
      expect(reports[name], name).toBe("ok|1.5.0");
    }
    // the scenarios after the revoked token ran on the rig's own token again
    const after = run.results.slice(run.results.findIndex((result: { name: string }) => result.name === "revoked token") + 1);
    expect(after.length).toBeGreaterThan(0);
    expect(after.every((result: { outcome: string }) => result.outcome === "passed")).toBe(true);
  });
});

describe("the rig's hil runs", () => {
  it("play together the scenarios on the same server, firmware keys and switch hold, each scenario's place kept", () => {
    const shipped = (file: string) => ({ ...loadScenario(path.join(ROOT, "fixtures/scenarios", file)), file });
    const scenarios = [
      shipped("happy-path.json"), // its release has notes: a server of its own
      shipped("connection-dropped-at-131072.json"),
      shipped("brownout-during-switch.json"), // the badge waits in the switch for the cut
      shipped("signature-unknown-key.json"), // firmware that trusts a key
      shipped("connection-dropped-at-262143.json"),
      shipped("brownout-10-percent.json"),
    ];
    const runs = runsOf(scenarios, 10);
    expect(runs.map((run) => run.scenarios.map(({ index, scenario }) => `${index} ${scenario.file}`))).toEqual([
      ["0 happy-path.json"],
      ["1 connection-dropped-at-131072.json", "4 connection-dropped-at-262143.json", "5 brownout-10-percent.json"],
      ["2 brownout-during-switch.json"],
      ["3 signature-unknown-key.json"],
    ]);
    expect(runs.map((run) => [run.bench.holdSwitch, run.bench.trustedKeys, run.bench.clockFactor])).toEqual([
      [false, [], 10],
      [false, [], 10],
      [true, [], 10],
      [false, ["old"], 10],
    ]);
  });
});

describe("the rig's provision command", () => {
  it("gives the badge its own token back after the revoked token, so the next scenario of the same hil run syncs with it", { timeout: 300_000 }, async () => {
    const revoked = JSON.parse(fs.readFileSync(path.join(ROOT, "fixtures/scenarios/revoked-token.json"), "utf8"));
    const next = {
      name: "a sync after the revoked token",
      description: "The same bench as the revoked token, played next in the same hil run: the badge has the rig's own token again.",
      badge: { ...revoked.badge, token: undefined },
      server: revoked.server,
      steps: [{ do: "sync" }],
      expect: { states: ["online.syncing", "awake.idle"], unprovisioned: false, runningVersion: "1.4.0" },
    };
    const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "after-revoked-")), "after-revoked-token.json");
    fs.writeFileSync(file, JSON.stringify(next));
    const run = await runRig(["fixtures/scenarios/revoked-token.json", file, "--clock-factor", CLOCK_FACTOR]);
    // one hil run played both on one bench, set up once
    expect(run).toMatchObject({ scenarios: 2, passed: 2, runs: 1, setups: 1 });
    expect(run.results.map((result: { name: string }) => result.name)).toEqual(["revoked token", "a sync after the revoked token"]);
  });
});

describe("the process relay (Tasmota topics)", () => {
  it("runs the process while either relay is on, kills it when the last goes off, and writes the USB relay's state to the VBUS file", async () => {
    const topic = `reference-badge-test-${process.pid}`;
    const usbTopic = `${topic}-usb`;
    const bench = fs.mkdtempSync(path.join(os.tmpdir(), "process-relay-"));
    const [usbFile, supplyFile] = [path.join(bench, "usb.txt"), path.join(bench, "supply.txt")];
    const relay = await ProcessRelay.connect({ brokerUrl: BROKER, topic, usbTopic, usbFile, supplyFile, start: () => spawn("sleep", ["60"], { stdio: "ignore" }) });
    const client = await mqtt.connectAsync(BROKER, { reconnectPeriod: 0 });
    try {
      const answers: string[] = [];
      client.on("message", (received, payload) => answers.push(`${received === `stat/${topic}/POWER` ? "battery" : "usb"} ${payload.toString()}`));
      await client.subscribeAsync([`stat/${topic}/POWER`, `stat/${usbTopic}/POWER`], { qos: 1 });
      const ask = async (which: string, payload: string) => {
        const count = answers.length;
        await client.publishAsync(`cmnd/${which}/POWER`, payload, { qos: 1 });
        // a hang's bound, not a speed: the answer comes in milliseconds on an idle machine
        await expect.poll(() => answers.length, { timeout: 60_000 }).toBe(count + 1);
        return answers.at(-1);
      };
      const usb = () => fs.readFileSync(usbFile, "utf8").trim();
      expect(await ask(topic, "")).toBe("battery OFF");
      expect(usb()).toBe("none");
      expect(await ask(topic, "ON")).toBe("battery ON");
      expect(relay.isOn).toBe(true);
      expect(await ask(topic, "on")).toBe("battery ON"); // already on: nothing starts twice
      // USB power plugged in and pulled while the battery runs the badge: it only sees its VBUS change
      expect(await ask(usbTopic, "ON")).toBe("usb ON");
      expect(usb()).toBe("charging");
      expect(await ask(topic, "OFF")).toBe("battery OFF");
      expect(relay.isOn).toBe(true); // on USB power alone
      expect(await ask(usbTopic, "OFF")).toBe("usb OFF");
      expect(relay.isOn).toBe(false); // the last relay off: a power cut
      expect(usb()).toBe("none");
      // the setup command's supply: USB power that runs the badge without charging it
      fs.writeFileSync(supplyFile, "3950 external\n");
      expect(await ask(usbTopic, "ON")).toBe("usb ON");
      expect(relay.isOn).toBe(true);
      expect(usb()).toBe("external");
      expect(relay.switched).toEqual({ on: 2, off: 1 });
    } finally {
      await client.endAsync();
      await relay.close();
    }
  });
});

describe("a rig that cannot start", () => {
  it("fails and removes the temporary work directory it made", async () => {
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "rig-tmpdir-"));
    onTestFinished(() => fs.rmSync(tmp, { recursive: true, force: true }));
    const before = process.env.TMPDIR;
    process.env.TMPDIR = tmp;
    try {
      // no broker listens on port 1: the relay cannot connect, after the work directory was made
      await expect(runReferenceRig({ files: [path.join(ROOT, "fixtures/scenarios/happy-path.json")], brokerUrl: "mqtt://127.0.0.1:1" })).rejects.toThrow(/ECONNREFUSED/);
    } finally {
      if (before === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = before;
    }
    expect(fs.readdirSync(tmp).filter((name) => name.startsWith("reference-badge-rig-"))).toEqual([]);
  });
});
