// The rig against the reference badge in C (issue 15): `badgebench hil run` plays every shipped
// scenario on firmware/reference-badge's host build over a socat pty pair, exactly as on a real
// badge: the model oracle checks every console line, power cuts go through the MQTT relay
// (Tasmota topics on the real Mosquitto, answered by starting or SIGKILLing the badge process),
// network faults through the fault proxy the badge's NVS points at. scripts/reference-badge-rig.ts
// builds the bench; this test runs it as a user would and reads its JSON report.
import { spawn } from "node:child_process";
import mqtt from "mqtt";
import { describe, expect, it } from "vitest";
import { ProcessRelay } from "../../scripts/reference-badge-rig.ts";
import { ROOT } from "../server/cli-process.ts";

const BROKER = process.env.MQTT_URL ?? "mqtt://127.0.0.1:1883";

/** The scenarios a rig cannot play, and why (the same reasons a real rig gives). */
const SKIPPED: Record<string, RegExp> = {
  "pending report delivered after a brownout": /unplugs USB power and runs on the battery alone, which a rig cannot do/,
  "revoked token": /revokes the badge's device token/,
};

describe("the rig against the reference badge", () => {
  it("passes every shipped scenario a rig can play, the model checking each console line, power cut by the MQTT relay, faults from the proxy", { timeout: 600_000 }, async () => {
    const child = spawn(process.execPath, ["--import", "tsx", "scripts/reference-badge-rig.ts", "--json"], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
    const code = await new Promise<number | null>((resolve) => child.once("close", resolve));
    expect(code, `${stderr}\n${stdout.slice(0, 4000)}`).toBe(0);
    const run = JSON.parse(stdout);
    const failing = run.results.filter((result: { outcome: string }) => result.outcome === "failed" || result.outcome === "error");
    expect(failing, JSON.stringify(failing, null, 2).slice(0, 4000)).toEqual([]);
    expect(run).toMatchObject({ object: "reference_badge_rig", scenarios: 20, passed: 18, failed: 0, errors: 0, skipped: 2 });

    for (const result of run.results) {
      if (result.outcome === "skipped") {
        expect(result.message, result.name).toMatch(SKIPPED[result.name]!);
        continue;
      }
      // every expectation of the file held, and the model allowed every console event
      const fields = result.checks.map((check: { field: string }) => check.field);
      expect(fields, result.name).toContain("model");
      expect(fields.length, result.name).toBeGreaterThan(1);
      expect(result.checks.every((check: { passed: boolean }) => check.passed), result.name).toBe(true);
    }
    // the four brownouts each cut the power through MQTT, and the relay switched it back on
    expect(run.relay.off).toBe(4);
    expect(run.relay.on).toBe(4);
    const reports = Object.fromEntries(
      run.results.map((result: { name: string; checks: Array<{ field: string; observed: unknown }> }) => [result.name, result.checks.find((check) => check.field === "expect.report")?.observed]),
    );
    expect(reports["brownout during the partition switch"]).toBe("err|1.5.0|power lost during the partition switch");
    expect(reports["connection dropped at byte 131072"]).toBe("err|1.5.0|download cut at 50% (128 of 256 KiB)");
    expect(reports["happy path"]).toBe("ok|1.5.0");
  });
});

describe("the process relay (Tasmota topics)", () => {
  it("starts the process on ON, kills it on OFF, and answers each command on stat/<topic>/POWER", async () => {
    const topic = `reference-badge-test-${process.pid}`;
    const relay = await ProcessRelay.connect(BROKER, topic, () => spawn("sleep", ["60"], { stdio: "ignore" }));
    const client = await mqtt.connectAsync(BROKER, { reconnectPeriod: 0 });
    try {
      const answers: string[] = [];
      client.on("message", (_, payload) => answers.push(payload.toString()));
      await client.subscribeAsync(`stat/${topic}/POWER`, { qos: 1 });
      const ask = async (payload: string, count: number) => {
        await client.publishAsync(`cmnd/${topic}/POWER`, payload, { qos: 1 });
        await expect.poll(() => answers.length, { timeout: 5000 }).toBe(count);
      };
      await ask("", 1);
      expect(answers.at(-1)).toBe("OFF");
      await ask("ON", 2);
      expect(answers.at(-1)).toBe("ON");
      expect(relay.isOn).toBe(true);
      await ask("on", 3); // already on: nothing starts twice
      await ask("OFF", 4);
      expect(answers.at(-1)).toBe("OFF");
      expect(relay.isOn).toBe(false);
      expect(relay.switched).toEqual({ on: 1, off: 1 });
    } finally {
      await client.endAsync();
      await relay.close();
    }
  });
});
