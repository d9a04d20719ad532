// `badgebench hil run` end to end, with the simulated badge standing in for the rig's real one:
// a real server (`badgebench serve`) on a data directory where the test published a release and
// registered the badge with `devices add`; `badgebench sim serial` serving the badge with that
// device's token on one end of a socat pty pair; a rig file whose `port` is the other end; and
// `badgebench hil run` playing scenario files through the rig, each one starting with `reboot`.
import { spawn, type ChildProcess } from "node:child_process";
import net from "node:net";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it, vi } from "vitest";
import { createVirtualBadge } from "../../badge-sim/virtual-badge/virtual-badge.ts";
import { SerialConsole } from "../../hil/serial-console.ts";
import { serveOnMockPort } from "../../hil/sim-serial-badge.ts";
import { junitProblems } from "../badge-sim/junit-schema.ts";
import { baseEnv, DEMO, killLeftoverServers, ROOT, run, serve, stop, storeIn, tempDirs, type Server } from "../server/cli-process.ts";
import { openPtyPair } from "../../hil/pty-pair.ts";

const SCRIPT = join(ROOT, "scripts/cli/badgebench.js");
const SCENARIOS = join(ROOT, "fixtures/scenarios");
const scratch = tempDirs("hil-run");
const SHIPPED = readdirSync(SCENARIOS).filter((file) => file.endsWith(".json")).length;
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});
afterAll(killLeftoverServers);

describe("the simulated badge's reboot", () => {
  it("restarts the badge from what its flash and NVS hold, with the ROM's reset banner", async () => {
    const served = serveOnMockPort(() =>
      createVirtualBadge({ serverUrl: "http://127.0.0.1:9", token: "dtk_test_reboot", version: "1.4.0", battery: { volts: 3.95, charging: true, externalPower: true } }),
    );
    const serial = await SerialConsole.open({ port: served.path, binding: served.binding });
    cleanups.push(async () => {
      await serial.close();
      await served.close();
    });
    expect(await serial.expectEvent("boot")).toMatchObject({ slot: "ota_0", version: "1.4.0", cause: "power-on" });
    await serial.send({ name: "reboot" });
    await serial.expect(/rst:0xc \(SW_CPU_RESET\)/);
    expect(await serial.expectEvent("boot")).toMatchObject({ slot: "ota_0", version: "1.4.0", cause: "restart" });
    await serial.send({ name: "status" });
    expect(await serial.expectEvent("status")).toMatchObject({ version: "1.4.0", token: true });
    expect(served.bridge.badge?.token()).toBe("dtk_test_reboot");
  });
});

/** A socat pty pair: `sim serial` serves the badge on `badgePath`, the rig's port is `hostPath`. */
async function ptyPair(): Promise<{ hostPath: string; badgePath: string }> {
  const pair = await openPtyPair();
  cleanups.push(pair.close);
  return { hostPath: pair.host, badgePath: pair.device };
}

/** `badgebench sim serial ...`, resolved once it says it serves the badge. */
async function simSerial(args: string[]): Promise<{ child: ChildProcess; stderr(): string; exited: Promise<number | null> }> {
  const child = spawn(process.execPath, [SCRIPT, "sim", "serial", ...args], { cwd: ROOT, env: baseEnv(), stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  child.stdout!.resume();
  const exited = new Promise<number | null>((resolve) => child.once("close", (code) => resolve(code)));
  cleanups.push(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    await exited;
  });
  await vi.waitFor(() => expect(stderr).toMatch(/^simulated badge 1\.4\.0 on /m), { timeout: 30_000, interval: 50 });
  return { child, stderr: () => stderr, exited };
}

/** A data directory with the demo school, `versions` published (1.4.0 then 1.5.0, as the shipped scenarios have them) and the rig's badge added; its server running. */
async function rigServer(versions = ["1.4.0", "1.5.0"]): Promise<{ dataDir: string; server: Server; token: string }> {
  const dataDir = await storeIn(scratch("data"));
  const env = baseEnv({ BADGE_DEV_WIFI_PASSWORD: "dev-wifi-for-tests" });
  expect((await run(["import", DEMO, "--data", dataDir])).code).toBe(0);
  for (const version of versions) {
    const image = join(scratch("image"), `badge-${version}.bin`);
    expect((await run(["--import", "tsx", "scripts/cli/make-test-image.ts", "--version", version, "--size", "256KiB", "--out", image], { program: [] })).code).toBe(0);
    expect((await run(["publish", image, version, "--mode", "test", "--data", dataDir], { env })).code).toBe(0);
  }
  const added = await run(["devices", "add", "--room", "R101", "--model", "esp32-badge", "--name", "rig badge", "--data", dataDir, "--json"]);
  expect(added.code, added.stderr).toBe(0);
  const server = await serve(["--data", dataDir]);
  cleanups.push(async () => void (await stop(server)));
  return { dataDir, server, token: JSON.parse(added.stdout).token };
}

const scenario = (name: string) => join(SCENARIOS, name);

describe("hil run on the simulated badge over a socat pty pair", () => {
  it("plays what the rig can, skips what needs another release, a revoked token or firmware that trusts release keys, and writes a JUnit report that validates", async () => {
    const { dataDir, server, token } = await rigServer();
    const { hostPath, badgePath } = await ptyPair();
    const badge = await simSerial(["--port", badgePath, "--server", server.url, "--token", token]);
    const work = scratch("work");
    const rig = join(work, "rig.json");
    writeFileSync(rig, JSON.stringify({ name: "sim-rig", port: hostPath, power: null, server: { url: `${server.url}/`, deviceToken: token, dataDir } }));
    const junit = join(work, "report.xml");
    const html = join(work, "report.html");
    const files = ["happy-path.json", "crash-on-boot.json", "refusal-no-release.json", "revoked-token.json", "signature-unknown-key.json"].map(scenario);

    // cwd: the transcripts go to ./var/transcripts
    const result = await run(["hil", "run", ...files, "--rig", rig, "--junit", junit, "--html", html, "--json"], { cwd: work, timeoutMs: 90_000 });
    expect(result.code, result.stderr).toBe(0);
    const body = JSON.parse(result.stdout);
    expect(body).toMatchObject({ object: "hil_run", scenarios: 5, passed: 1, failed: 0, errors: 0, skipped: 4 });
    const [happy, crash, noRelease, revoked, unknownKey] = body.results;
    expect(happy).toMatchObject({ name: "happy path", outcome: "passed", message: null });
    // every expectation of the file, and the model's verdict on every console event
    expect(happy.checks.map((c: { field: string }) => c.field).sort()).toEqual(
      ["expect.fleetState", "expect.report", "expect.runningVersion", "expect.screen", "expect.states", "model"].sort(),
    );
    expect(crash).toMatchObject({ outcome: "skipped", message: expect.stringContaining("offers 1.5.0; the scenario needs 1.5.0 (an image that crashes on boot) (publish it") });
    expect(noRelease).toMatchObject({ outcome: "skipped", message: expect.stringContaining("offers 1.5.0; the scenario needs no release") });
    expect(revoked).toMatchObject({ outcome: "skipped", message: expect.stringMatching(/revokes the badge.s device token, and rig\.json has no `provision` command/) });
    expect(unknownKey).toMatchObject({
      outcome: "skipped",
      message: expect.stringContaining("the scenario's badge trusts the release keys old (fixtures/signing-keys), and rig.json says the firmware trusts none (`trustedKeys`)"),
    });

    expect(junitProblems(junit)).toBeNull();
    const xml = readFileSync(junit, "utf8");
    expect(xml.match(/<skipped/g)).toHaveLength(4);
    expect(xml).toContain("badgebench scenarios on rig sim-rig");

    // The HTML report draws the serial badge's run from its console events as it does a virtual one's.
    const page = readFileSync(html, "utf8");
    expect(page).toContain("<title>PASS: badgebench scenarios on rig sim-rig</title>");
    const charts = JSON.parse(/<script type="application\/json" id="chart-data">(.*?)<\/script>/s.exec(page)![1]!);
    expect(charts[0].download.at(-2)).toEqual([expect.any(Number), 256 * 1024]);
    expect(charts[0].download.at(-1)).toEqual([expect.any(Number), null]);

    // The badge went over the serial line: the session's transcript starts with the reboot it was sent.
    const transcripts = readdirSync(join(work, "var/transcripts"));
    expect(transcripts).toEqual([expect.stringMatching(/-1-happy-path\.txt$/)]);
    const transcript = readFileSync(join(work, "var/transcripts", transcripts[0]!), "utf8");
    expect(transcript).toMatch(/^\+\d+\.\d{3} > reboot\\n$/m);
    expect(transcript).toContain("@bb boot slot=ota_1 version=1.5.0 cause=restart");

    // The badge now runs 1.5.0 from ota_1: the next run's reboot restarts it there, and the
    // happy path (which starts at 1.4.0) is an error that says to flash it.
    const again = await run(["hil", "run", scenario("happy-path.json"), "--rig", rig, "--json"], { cwd: work, timeoutMs: 90_000 });
    expect(again.code).toBe(1);
    expect(JSON.parse(again.stdout).results[0]).toMatchObject({
      outcome: "error",
      message: "the badge runs 1.5.0; the scenario starts at 1.4.0 (flash it first: badgebench hil flash)",
    });
    const second = readdirSync(join(work, "var/transcripts")).find((name) => !transcripts.includes(name))!;
    expect(readFileSync(join(work, "var/transcripts", second), "utf8")).toContain("rst:0xc (SW_CPU_RESET)");

    badge.child.kill("SIGTERM");
    expect(await badge.exited).toBe(0);
  });

  it("plays the whole scenario directory on a farm of two simulated badges (--parallel): each set up as it starts, network faults skipped without a proxy, exit 0", async () => {
    // the fleet's history the scenarios name (published 1.4.0), then their release
    const { dataDir, server, token } = await rigServer(["1.4.0", "1.5.0"]);
    const badges = [];
    for (const name of ["sim-a", "sim-b"]) {
      const { hostPath, badgePath } = await ptyPair();
      await simSerial(["--port", badgePath, "--server", server.url, "--token", token]);
      // simulated badges play each scenario as a device of its own: the rig's token is only the template
      badges.push({ name, badge: "simulated", port: hostPath, power: null, deviceToken: token });
    }
    const work = scratch("work");
    const rig = join(work, "rig.json");
    writeFileSync(rig, JSON.stringify({ name: "sim-farm", badges, server: { url: `${server.url}/`, dataDir } }));
    const result = await run(["hil", "run", SCENARIOS, "--rig", rig, "--parallel", "--json"], { cwd: work, timeoutMs: 110_000, env: baseEnv({ BADGEBENCH_LOCK_DIR: scratch("locks") }) });
    const body = JSON.parse(result.stdout);
    const outcomes = Object.fromEntries(body.results.map((r: { file: string; outcome: string; message: string | null }) => [r.file.split("/").pop(), `${r.outcome}: ${r.message}`]));
    expect(body, JSON.stringify(outcomes, null, 1)).toMatchObject({ object: "hil_run", scenarios: SHIPPED, failed: 0, errors: 0 });
    expect(result.code).toBe(0);
    // both badges played, each result naming its own
    const played = body.results.filter((r: { outcome: string }) => r.outcome === "passed");
    expect(new Set(played.map((r: { badge: string }) => r.badge))).toEqual(new Set(["sim-a", "sim-b"]));
    // the happy path after the brownouts, which leave the badge on 1.5.0: each scenario is set up anew
    expect(outcomes["happy-path.json"]).toBe("passed: null");
    expect(outcomes["brownout-50-percent.json"]).toBe("passed: null");
    for (const file of ["connection-dropped-at-0.json", "corrupt-byte.json", "stalled-download.json", "signature-tampered-image.json"]) {
      expect(outcomes[file]).toMatch(/^skipped: the scenario has network faults, and rig\.json has no `proxy` for badge sim-(a|b): add one/);
    }
    // this server's 1.5.0 is not signed: the signature scenarios cannot be played against it
    expect(outcomes["signature-key-rotation.json"]).toMatch(/^skipped: .*offers 1\.5\.0; the scenario needs 1\.5\.0 signed by key 044a5388936f646e/);
    for (const r of body.results.filter((r: { outcome: string }) => r.outcome === "skipped")) expect(r.message).toMatch(/\S/);

    // a run where every scenario is skipped proved nothing: exit 5
    const skipped = await run(["hil", "run", scenario("corrupt-byte.json"), "--rig", rig, "--parallel", "--json"], { cwd: work });
    expect(JSON.parse(skipped.stdout)).toMatchObject({ scenarios: 1, skipped: 1 });
    expect(skipped.code).toBe(5);
  });

  it("skips, saying why, a scenario whose published list the server does not have", async () => {
    const { dataDir, server, token } = await rigServer(["1.5.0"]);
    const { hostPath, badgePath } = await ptyPair();
    await simSerial(["--port", badgePath, "--server", server.url, "--token", token]);
    const work = scratch("work");
    const rig = join(work, "rig.json");
    writeFileSync(rig, JSON.stringify({ name: "sim-rig", badge: "simulated", port: hostPath, power: null, server: { url: `${server.url}/`, deviceToken: token, dataDir } }));
    const result = await run(["hil", "run", scenario("low-battery-not-charging.json"), "--rig", rig, "--json"], { cwd: work, timeoutMs: 90_000 });
    expect(result.code, result.stderr).toBe(5);
    expect(JSON.parse(result.stdout).results[0]).toMatchObject({ outcome: "skipped", message: expect.stringContaining("has not published 1.4.0 (the scenario's published list)") });
  });

  it("plays the revoked token through the rig's provision command; one that fails errs with what it said, and the badge keeps its own token", async () => {
    const { dataDir, server, token } = await rigServer();
    const { hostPath, badgePath } = await ptyPair();
    await simSerial(["--port", badgePath, "--server", server.url, "--token", token]);
    const work = scratch("work");
    const rig = join(work, "rig.json");
    const provision = { command: ["sh", "-c", "echo cannot reach the badge >&2; exit 3", "provision", "{token}"] };
    writeFileSync(rig, JSON.stringify({ name: "sim-rig", port: hostPath, power: null, provision, server: { url: `${server.url}/`, deviceToken: token, dataDir } }));
    const result = await run(["hil", "run", scenario("revoked-token.json"), scenario("happy-path.json"), "--rig", rig, "--json"], { cwd: work, timeoutMs: 90_000 });
    expect(result.code).toBe(1);
    const [revoked, happy] = JSON.parse(result.stdout).results;
    expect(revoked).toMatchObject({ outcome: "error", message: "the provision command of rig.json (sh) exited 3:\ncannot reach the badge" });
    expect(happy).toMatchObject({ outcome: "passed" });
    // the scenario's own device was added beside the rig's and revoked; the rig's still works
    const devices = JSON.parse((await run(["devices", "list", "--data", dataDir, "--json"])).stdout).data;
    expect(devices).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ name: "revoked-token scenario", room: "R101", model: "esp32-badge", revoked_at: expect.any(String) }),
        expect.objectContaining({ name: "rig badge", revoked_at: null }),
      ]),
    );
  });

  it("exits 2 for a rig file it cannot use, 3 for a server it cannot reach, 5 for a directory without scenarios, in one line each", async () => {
    const dir = scratch("bad-input");
    // a port nothing listens on (fetch refuses well-known ones such as 9 outright)
    const closed = net.createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const down = `http://127.0.0.1:${(closed.address() as net.AddressInfo).port}/`;
    await new Promise((resolve) => closed.close(resolve));
    const write = (name: string, rig: Record<string, unknown>) => {
      writeFileSync(join(dir, name), JSON.stringify({ name: "sim-rig", port: "/dev/null", power: null, ...rig, server: { url: down, deviceToken: "dtk_test_abc", dataDir: ".", ...(rig.server as object) } }));
      return join(dir, name);
    };
    const empty = scratch("no-scenarios");
    const cases: Array<{ args: string[]; code: number; line: RegExp }> = [
      { args: [scenario("happy-path.json"), "--rig", write("gone.json", { port: join(dir, "ttyGONE") })], code: 2, line: /^badgebench: gone\.json: port \S+ttyGONE does not exist: plug the badge in/ },
      { args: [scenario("happy-path.json"), "--rig", write("extra.json", { relay: null })], code: 2, line: /^badgebench: extra\.json: not a valid rig file:\n {2}relay: unknown field \(a typo\? fixtures\/rigs\/README\.md lists the fields; remove it\)\n$/ },
      { args: [scenario("happy-path.json"), "--rig", write("live.json", { server: { deviceToken: "dtk_live_abc" } })], code: 2, line: /^badgebench: live\.json: server\.deviceToken is a live-mode token, and hil run works in test mode: add the rig's badge/ },
      { args: [scenario("happy-path.json"), "--rig", write("down.json", {})], code: 3, line: new RegExp(`^badgebench: cannot reach ${down} \\(connection refused\\): start the server`) },
      { args: [empty, "--rig", write("empty.json", {})], code: 5, line: /^badgebench: \S+no-scenarios\S* holds no \.json scenario files: nothing ran; name scenario files/ },
    ];
    for (const { args, code, line } of cases) {
      const result = await run(["hil", "run", ...args], { cwd: dir });
      expect({ code: result.code, stderr: result.stderr }).toMatchObject({ code, stderr: expect.stringMatching(line) });
      expect(result.stdout).toBe("");
      expect(result.stderr).not.toMatch(/\n\s+at /);
    }
    // nothing was started or written: no transcripts
    expect(readdirSync(dir).sort()).toEqual(["down.json", "empty.json", "extra.json", "gone.json", "live.json"]);
  });

  it("refuses a bad rig file, naming each bad field, exit 2 (scripts/cli/exit-codes.ts)", async () => {
    const dir = scratch("bad-rig");
    const rig = join(dir, "rig.json");
    writeFileSync(rig, JSON.stringify({ name: "sim-rig", port: 42, power: null, server: { url: "http://127.0.0.1:9", deviceToken: "not-a-token" } }));
    const result = await run(["hil", "run", scenario("happy-path.json"), "--rig", rig], { cwd: dir });
    expect(result.code).toBe(2);
    expect(result.stdout).toBe("");
    expect(result.stderr).toMatch(/^badgebench: rig\.json: not a valid rig file:\n/);
    expect(result.stderr).toMatch(/^ {2}port: expected a device path such as "\/dev\/ttyACM0"/m);
    expect(result.stderr).toMatch(/^ {2}server\.deviceToken: expected the badge's device token from `badgebench devices add`/m);
    expect(result.stderr).not.toMatch(/\n\s+at /);

    const json = await run(["hil", "run", scenario("happy-path.json"), "--rig", rig, "--json"], { cwd: dir });
    expect(json.code).toBe(2);
    expect(JSON.parse(json.stdout)).toEqual({ error: { code: "invalid_request", message: expect.stringContaining("server.deviceToken") } });
  });
});
