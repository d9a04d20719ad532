// The rig file format: the shipped example loads, and a bad file is refused with a message that
// names the file, the field and what was expected.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { loadRigFile, RigFileError } from "../../hil/rig-file.ts";
import { ROOT } from "../server/cli-process.ts";

const EXAMPLE = path.join(ROOT, "fixtures/rigs/example-rig.json");

const write = (json: unknown) => {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "rig-")), "bad-rig.json");
  fs.writeFileSync(file, typeof json === "string" ? json : JSON.stringify(json));
  return file;
};
const example = () => JSON.parse(fs.readFileSync(EXAMPLE, "utf8"));

describe("the example rig file", () => {
  it("loads, with the data directory resolved against the file", () => {
    const rig = loadRigFile(EXAMPLE);
    expect(rig).toMatchObject({
      name: "bench-1",
      port: { vid: "303a", pid: "1001" },
      baudRate: 115200,
      power: { broker: "mqtt://127.0.0.1:1883", topic: "badge-bench-1" },
      server: { url: "http://192.168.1.20:8080", dataDir: path.join(ROOT, "var") },
      proxy: { host: "0.0.0.0", port: 8090 },
      events: { broker: "mqtt://127.0.0.1:1883", publish: true },
    });
  });

  it("may leave out the optional fields, and say the rig has no relay", () => {
    const { name, server } = example();
    const rig = loadRigFile(write({ name, port: "/dev/ttyACM0", power: null, server: { url: server.url, deviceToken: server.deviceToken } }));
    expect(rig).toMatchObject({ name, port: "/dev/ttyACM0", baudRate: 115200, power: null });
    expect(rig.proxy).toBeUndefined();
    expect(rig.events).toBeUndefined();
    expect(rig.server.dataDir).toBeUndefined();
  });

  it("takes a USB power relay and a provision command, run in the rig file's directory", () => {
    const file = write({
      ...example(),
      usbPower: { broker: "mqtt://127.0.0.1:1883", topic: "badge-bench-1-usb" },
      provision: { command: ["./provision-badge.sh", "--token={token}"] },
    });
    const rig = loadRigFile(file);
    expect(rig.usbPower).toEqual({ broker: "mqtt://127.0.0.1:1883", topic: "badge-bench-1-usb" });
    expect(rig.provision).toEqual({ command: ["./provision-badge.sh", "--token={token}"], powerOff: false, timeoutMs: 120_000, cwd: path.dirname(file) });
    expect(loadRigFile(write({ ...example(), provision: { command: ["p", "{token}"], powerOff: true, timeoutMs: 5000 } })).provision).toMatchObject({ powerOff: true, timeoutMs: 5000 });
    expect(loadRigFile(write({ ...example(), usbPower: null })).usbPower).toBeNull();
  });

  it("says a real badge runs in real time unless the rig file gives its clock factor (the reference badge's --clock-factor)", () => {
    expect(loadRigFile(write(example())).clockFactor).toBe(1);
    expect(loadRigFile(write({ ...example(), clockFactor: 10 })).clockFactor).toBe(10);
  });

  it("takes USB ids in either case and a serial number", () => {
    expect(loadRigFile(write({ ...example(), port: { vid: "10C4", pid: "EA60" } })).port).toEqual({ vid: "10c4", pid: "ea60" });
    expect(loadRigFile(write({ ...example(), port: { serialNumber: "F4:12:FA:00:11:22" } })).port).toEqual({ serialNumber: "F4:12:FA:00:11:22" });
  });
});

describe("a bad rig file", () => {
  it.each([
    ["a rig id with a space", (r: any) => (r.name = "bench 1"), /^ {2}name: expected a rig id/m],
    ["a port of another shape", (r: any) => (r.port = { serial: "x" }), /^ {2}port: expected a device path/m],
    ["a product id of five digits", (r: any) => (r.port.pid = "10011"), /^ {2}port\.pid: expected 4 hex digits/m],
    ["a baud rate in words", (r: any) => (r.baudRate = "fast"), /^ {2}baudRate: expected a whole number/m],
    ["no power field", (r: any) => delete r.power, /^ {2}power: expected \{"broker".*or null/m],
    ["a relay on an http broker", (r: any) => (r.power.broker = "http://127.0.0.1:1883"), /^ {2}power\.broker: expected a broker URL/m],
    ["a relay topic with a slash", (r: any) => (r.power.topic = "bench/1"), /^ {2}power\.topic: expected 1 to 64 characters without \//m],
    ["a server URL with a path", (r: any) => (r.server.url = "http://192.168.1.20:8080/api"), /^ {2}server\.url: expected http:\/\/HOST:PORT/m],
    ["an API key for a device token", (r: any) => (r.server.deviceToken = "sk_test_abc"), /^ {2}server\.deviceToken: expected the badge's device token/m],
    ["no device token", (r: any) => delete r.server.deviceToken, /^ {2}server\.deviceToken: missing: expected string/m],
    ["a proxy port of 0", (r: any) => (r.proxy.port = 0), /^ {2}proxy\.port: /m],
    ["events published as a string", (r: any) => (r.events.publish = "yes"), /^ {2}events\.publish: .*expected boolean/m],
    ["an unknown field", (r: any) => (r.relay = "tasmota"), /^ {2}relay: unknown field/m],
    ["an unknown field in power", (r: any) => (r.power.index = 2), /^ {2}power\.index: unknown field/m],
    ["a USB relay as a string", (r: any) => (r.usbPower = "tasmota-2"), /^ {2}usbPower: expected \{"broker".*or null for a rig without a USB power relay/m],
    ["a USB relay topic with a wildcard", (r: any) => (r.usbPower = { broker: r.power.broker, topic: "usb+" }), /^ {2}usbPower\.topic: expected 1 to 64 characters/m],
    ["a USB relay without its broker", (r: any) => (r.usbPower = { topic: "usb" }), /^ {2}usbPower\.broker: missing/m],
    ["a USB relay on the power relay's topic", (r: any) => (r.usbPower = { ...r.power }), /^ {2}usbPower\.topic: expected another topic than power\.topic \(badge-bench-1\)/m],
    ["a USB relay on a rig without a power relay", (r: any) => ((r.power = null), (r.usbPower = { broker: "mqtt://127.0.0.1:1883", topic: "usb" })), /^ {2}usbPower: needs `power` as well/m],
    ["a provision command as one string", (r: any) => (r.provision = { command: "./provision {token}" }), /^ {2}provision\.command: expected the command as a list of words/m],
    ["an empty provision command", (r: any) => (r.provision = { command: [] }), /^ {2}provision\.command: expected the command as a list of words/m],
    ["a provision command without {token}", (r: any) => (r.provision = { command: ["./provision", "dtk_test_x"] }), /^ {2}provision\.command: expected \{token\} in one of the words/m],
    ["a provision command with an empty word", (r: any) => (r.provision = { command: ["./provision", "", "{token}"] }), /^ {2}provision\.command\[1\]: expected no empty words/m],
    ["a provision timeout of 0", (r: any) => (r.provision = { command: ["p", "{token}"], timeoutMs: 0 }), /^ {2}provision\.timeoutMs: /m],
    ["powerOff as a string", (r: any) => (r.provision = { command: ["p", "{token}"], powerOff: "yes" }), /^ {2}provision\.powerOff: .*expected boolean/m],
    ["powerOff on a rig without a relay", (r: any) => ((r.power = null), (r.provision = { command: ["p", "{token}"], powerOff: true })), /^ {2}provision\.powerOff: needs `power`/m],
    ["a clock factor of 0", (r: any) => (r.clockFactor = 0), /^ {2}clockFactor: /m],
    ["a clock factor of 2.5", (r: any) => (r.clockFactor = 2.5), /^ {2}clockFactor: expected a whole number from 1 to 1000/m],
    ["a clock factor for the simulated badge", (r: any) => ((r.badge = "simulated"), (r.clockFactor = 10)), /^ {2}clockFactor: is for a badge on the wall clock/m],
    ["an unknown field in provision", (r: any) => (r.provision = { command: ["p", "{token}"], env: {} }), /^ {2}provision\.env: unknown field/m],
  ])("%s names the field", (_name, spoil, message) => {
    const rig = example();
    spoil(rig);
    const file = write(rig);
    expect(() => loadRigFile(file)).toThrow(RigFileError);
    expect(() => loadRigFile(file)).toThrow(message);
    expect(() => loadRigFile(file)).toThrow(/bad-rig\.json: not a valid rig file:\n/);
  });

  it("lists every bad field at once", () => {
    const rig = example();
    rig.name = "";
    rig.power.topic = "#";
    rig.server.url = "https://example.org";
    expect(() => loadRigFile(write(rig))).toThrow(/name: .*\n {2}power\.topic: .*\n {2}server\.url: /);
  });

  it("that is not an object, not JSON, or unreadable, says so", () => {
    expect(() => loadRigFile(write([]))).toThrow(/\(the file\): .*expected object/);
    expect(() => loadRigFile(write("{nope"))).toThrow(/bad-rig\.json:1:2: not JSON/);
    expect(() => loadRigFile("/nonexistent/rig.json")).toThrow(/rig\.json: cannot read: ENOENT/);
    expect(() => loadRigFile(os.tmpdir())).toThrow(/cannot read: EISDIR/);
  });
});

describe("a farm rig file (several badges)", () => {
  const FARM = path.join(ROOT, "fixtures/rigs/example-farm.json");
  const farm = () => JSON.parse(fs.readFileSync(FARM, "utf8"));

  it("loads the shipped example: each badge with its wiring and token, setup and provision run in the file's directory, the ELF resolved", () => {
    const rig = loadRigFile(FARM);
    expect(rig.badges.map((badge) => badge.name)).toEqual(["bench-1", "bench-2"]);
    expect(rig.badges[1]).toMatchObject({
      badge: "real",
      port: { serialNumber: "F4:12:FA:00:00:02" },
      baudRate: 115200,
      power: { topic: "badge-bench-2" },
      setup: { powerOff: true, timeoutMs: 300_000, cwd: path.dirname(FARM) },
      provision: { powerOff: false, cwd: path.dirname(FARM) },
      proxy: { host: "0.0.0.0", port: 8092 },
      deviceToken: "dtk_test_REPLACE_WITH_BENCH_2_TOKEN",
    });
    expect(rig.elf).toEqual({ path: path.join(ROOT, "var/firmware/badge-{version}.elf"), arch: "xtensa" });
    expect(rig.server).toEqual({ url: "http://192.168.1.20:8080", dataDir: path.join(ROOT, "var") });
    // a one-badge file is a farm of one, named after the rig
    expect(loadRigFile(EXAMPLE).badges).toEqual([expect.objectContaining({ name: "bench-1", deviceToken: example().server.deviceToken, port: { vid: "303a", pid: "1001" } })]);
  });

  it.each([
    ["two badges on one port", (r: any) => (r.badges[1].port = r.badges[0].port), /^ {2}badges\[1\]\.port: \{"serialNumber":"F4:12:FA:00:00:01"\} is badge bench-1's port as well: one badge per port$/m],
    ["two badges on one relay topic", (r: any) => (r.badges[1].usbPower = r.badges[0].power), /^ {2}badges\[1\]\.usbPower\.topic: the relay badge-bench-1 on mqtt:\/\/127\.0\.0\.1:1883 is badge bench-1's as well: one relay per badge/m],
    ["two badges with one token", (r: any) => (r.badges[1].deviceToken = r.badges[0].deviceToken), /^ {2}badges\[1\]\.deviceToken: is badge bench-1's device token as well/m],
    ["two badges with one name", (r: any) => (r.badges[1].name = "bench-1"), /^ {2}badges\[1\]\.name: bench-1 names another badge as well/m],
    ["no badges", (r: any) => (r.badges = []), /^ {2}badges: expected at least one badge/m],
    ["a badge without its token", (r: any) => delete r.badges[0].deviceToken, /^ {2}badges\[0\]\.deviceToken: missing/m],
    ["a setup command without {version}", (r: any) => (r.badges[0].setup = { command: ["./flash.sh"] }), /^ {2}badges\[0\]\.setup\.command: expected \{version\} in one of the words/m],
    ["an ELF for an unknown CPU", (r: any) => (r.elf.arch = "arm"), /^ {2}elf\.arch: /m],
    ["a token beside the server's URL", (r: any) => (r.server.deviceToken = "dtk_test_x"), /^ {2}server\.deviceToken: unknown field/m],
  ])("%s is refused, naming the badge and the field", (_name, spoil, message) => {
    const rig = farm();
    spoil(rig);
    expect(() => loadRigFile(write(rig))).toThrow(message);
  });
});
