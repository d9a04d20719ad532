// The power relay and the rig's event stream against a real Mosquitto (MQTT_URL, default
// mqtt://127.0.0.1:1883), with a test client that behaves like a Tasmota relay. Every test uses
// its own random topic, so runs in parallel and leftovers on the broker cannot cross.
import { randomUUID } from "node:crypto";
import net from "node:net";
import path from "node:path";
import { connectAsync, type MqttClient } from "mqtt";
import { afterEach, describe, expect, it } from "vitest";
import { loadScenario } from "../../badge-sim/runners/scenario.ts";
import { BrokerError } from "../../hil/mqtt-broker.ts";
import { connectPowerRelay, PowerRelayError, powerCutPlan, type PowerRelay, type PowerState } from "../../hil/power-relay.ts";
import { connectRigEvents, type RigEvent } from "../../hil/rig-events.ts";
import { ROOT } from "../server/cli-process.ts";

const BROKER = process.env.MQTT_URL ?? "mqtt://127.0.0.1:1883";
/** A port nothing listens on: the connection is refused at once. */
const DOWN_BROKER = "mqtt://127.0.0.1:1";

/** Run last-in first-out, so a client is still connected for the cleanups registered after it. */
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const uniqueTopic = () => `badgebench-test-${randomUUID().slice(0, 8)}`;

async function testClient(): Promise<MqttClient> {
  const client = await connectAsync(BROKER, { reconnectPeriod: 0, connectTimeout: 2000 });
  cleanups.push(() => client.endAsync(true));
  return client;
}

interface FakeRelay {
  /** Every ON or OFF it received, with the moment (performance.now()) it switched. */
  switches: Array<{ state: PowerState; at: number }>;
}

/**
 * Answers like Tasmota: ON or OFF on `cmnd/<topic>/POWER` switches and reports the new state on
 * `stat/<topic>/POWER`; an empty command reports the state. A `stuck` relay reports without switching.
 */
async function startFakeRelay(topic: string, { initial = "OFF", stuck = false }: { initial?: PowerState; stuck?: boolean } = {}): Promise<FakeRelay> {
  const client = await testClient();
  const relay: FakeRelay = { switches: [] };
  let state = initial;
  client.on("message", (_topic, payload) => {
    const asked = payload.toString();
    if ((asked === "ON" || asked === "OFF") && !stuck) {
      state = asked;
      relay.switches.push({ state, at: performance.now() });
    }
    client.publish(`stat/${topic}/POWER`, state);
  });
  await client.subscribeAsync(`cmnd/${topic}/POWER`);
  return relay;
}

async function relayOn(topic: string, timeoutMs = 2000): Promise<PowerRelay> {
  const relay = await connectPowerRelay({ brokerUrl: BROKER, topic, timeoutMs });
  cleanups.push(() => relay.close());
  return relay;
}

/**
 * A TCP server standing in for a broker: `answer` gets each chunk the client sends, which is one
 * packet here since the clients wait for each answer. The default stays silent.
 */
async function fakeBroker(answer: (packet: Buffer, socket: net.Socket) => void = () => {}): Promise<string> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on("error", () => {});
    socket.on("data", (packet) => answer(packet, socket));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  cleanups.push(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  });
  return `mqtt://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
}

/** MQTT 3.1.1 packet types (the high nibble of the first byte). */
const CONNECT = 1;
const PUBLISH = 3;
const SUBSCRIBE = 8;

/** Accepts the connection and subscriptions, then goes away at the first message published. */
function leavesAtFirstPublish(packet: Buffer, socket: net.Socket) {
  const type = packet[0]! >> 4;
  if (type === CONNECT) socket.write(Buffer.from([0x20, 0x02, 0x00, 0x00]));
  if (type === SUBSCRIBE) socket.write(Buffer.from([0x90, 0x03, packet[2]!, packet[3]!, 0x01]));
  if (type === PUBLISH) socket.destroy();
}

describe("the power relay", () => {
  it("switches on and off, each once the relay confirms it", async () => {
    const topic = uniqueTopic();
    const fake = await startFakeRelay(topic);
    const relay = await relayOn(topic);
    await relay.on();
    expect(fake.switches.map((s) => s.state)).toEqual(["ON"]);
    expect(await relay.state()).toBe("ON");
    await relay.off();
    expect(await relay.state()).toBe("OFF");
    expect(fake.switches.map((s) => s.state)).toEqual(["ON", "OFF"]);
  });

  it("asks for the state with an empty command", async () => {
    const topic = uniqueTopic();
    await startFakeRelay(topic, { initial: "ON" });
    const watcher = await testClient();
    const commands: string[] = [];
    watcher.on("message", (_topic, payload) => commands.push(payload.toString()));
    await watcher.subscribeAsync(`cmnd/${topic}/POWER`);
    expect(await (await relayOn(topic)).state()).toBe("ON");
    await expect.poll(() => commands).toEqual([""]);
  });

  it("cycles: off, the time asked without power, on", async () => {
    const topic = uniqueTopic();
    const fake = await startFakeRelay(topic, { initial: "ON" });
    await (await relayOn(topic)).cycle(200);
    const [off, on] = fake.switches;
    expect([off?.state, on?.state]).toEqual(["OFF", "ON"]);
    expect(on!.at - off!.at).toBeGreaterThanOrEqual(195);
  });

  it("runs commands given together one after the other", async () => {
    const topic = uniqueTopic();
    const fake = await startFakeRelay(topic);
    const relay = await relayOn(topic);
    const answers = await Promise.all([relay.on(), relay.state(), relay.off(), relay.state()]);
    expect(answers).toEqual([undefined, "ON", undefined, "OFF"]);
    expect(fake.switches.map((s) => s.state)).toEqual(["ON", "OFF"]);
  });

  it("fails naming the topic and broker when no relay answers", async () => {
    const topic = uniqueTopic();
    const relay = await relayOn(topic, 300);
    const started = performance.now();
    const error = await relay.off().catch((e: Error) => e);
    expect(error).toBeInstanceOf(PowerRelayError);
    expect((error as Error).message).toBe(
      `relay ${topic} did not confirm POWER OFF on stat/${topic}/POWER within 300 ms (MQTT broker ${BROKER}); is the relay online, and is its topic right?`,
    );
    expect(performance.now() - started).toBeLessThan(2000);
    await expect(relay.state()).rejects.toThrow(`did not answer an empty cmnd/${topic}/POWER on stat/${topic}/POWER within 300 ms`);
  });

  it("fails saying what a relay that did not switch answered", async () => {
    const topic = uniqueTopic();
    await startFakeRelay(topic, { initial: "ON", stuck: true });
    await expect((await relayOn(topic, 300)).off()).rejects.toThrow(/did not confirm POWER OFF .*; it said ON$/);
  });

  it("does not take a retained state for an answer", async () => {
    const topic = uniqueTopic();
    const publisher = await testClient();
    await publisher.publishAsync(`stat/${topic}/POWER`, "ON", { retain: true, qos: 1 });
    cleanups.push(() => publisher.publishAsync(`stat/${topic}/POWER`, "", { retain: true, qos: 1 }));
    await expect((await relayOn(topic, 300)).on()).rejects.toThrow(PowerRelayError);
  });

  it("refuses commands after close", async () => {
    const topic = uniqueTopic();
    await startFakeRelay(topic);
    const relay = await connectPowerRelay({ brokerUrl: BROKER, topic });
    await relay.close();
    await expect(relay.on()).rejects.toThrow(`relay ${topic} on MQTT broker ${BROKER} was closed`);
  });

  it("checks its options up front", async () => {
    await expect(connectPowerRelay({ brokerUrl: "127.0.0.1:1883", topic: "t" })).rejects.toThrow(/^brokerUrl: expected a broker URL/);
    await expect(connectPowerRelay({ brokerUrl: BROKER, topic: "bench/+" })).rejects.toThrow(TypeError);
    await expect(connectPowerRelay({ brokerUrl: BROKER, topic: "t", timeoutMs: 0 })).rejects.toThrow(/^timeoutMs: /);
  });
});

describe("a broker that cannot be used", () => {
  const connectBoth = (brokerUrl: string, timeoutMs: number) => [
    () => connectPowerRelay({ brokerUrl, topic: "t", timeoutMs }),
    () => connectRigEvents({ brokerUrl, rig: "bench-1", timeoutMs }),
  ];

  it("that is down fails at once, naming the URL", async () => {
    // "at once": before the connect timeout, which is long enough that no busy machine reaches it
    const timeoutMs = 30_000;
    for (const connect of connectBoth(DOWN_BROKER, timeoutMs)) {
      const started = performance.now();
      const error = await connect().catch((e: Error) => e);
      expect(error).toBeInstanceOf(BrokerError);
      expect((error as Error).message).toBe(`cannot connect to MQTT broker ${DOWN_BROKER}: connect ECONNREFUSED 127.0.0.1:1`);
      expect(performance.now() - started).toBeLessThan(timeoutMs);
    }
  });

  it("is named without its password", async () => {
    await expect(connectPowerRelay({ brokerUrl: "mqtt://rig:secret@127.0.0.1:1", topic: "t" })).rejects.toThrow(
      "cannot connect to MQTT broker mqtt://rig:***@127.0.0.1:1: connect ECONNREFUSED",
    );
  });

  it("that never answers fails after the timeout", async () => {
    const silent = await fakeBroker();
    const started = performance.now();
    for (const connect of connectBoth(silent, 300)) {
      await expect(connect()).rejects.toThrow(`cannot connect to MQTT broker ${silent}: no answer within 300 ms`);
    }
    expect(performance.now() - started).toBeLessThan(2500);
  });

  it("that refuses the connection says why", async () => {
    // CONNACK with MQTT 3.1.1 return code 5: not authorized
    const refusing = await fakeBroker((_packet, socket) => socket.end(Buffer.from([0x20, 0x02, 0x00, 0x05])));
    await expect(connectPowerRelay({ brokerUrl: refusing, topic: "t", timeoutMs: 2000 })).rejects.toThrow(
      `cannot connect to MQTT broker ${refusing}: Connection refused: Not authorized`,
    );
  });
});

describe("a broker that goes away", () => {
  it("fails the relay's command at once, and every command after it", async () => {
    const broker = await fakeBroker(leavesAtFirstPublish);
    // "at once": before the command's timeout, which is long enough that no busy machine reaches it
    const timeoutMs = 30_000;
    const relay = await connectPowerRelay({ brokerUrl: broker, topic: "t", timeoutMs });
    cleanups.push(() => relay.close());
    const started = performance.now();
    const lost = `lost the connection to MQTT broker ${broker}: the broker closed it`;
    await expect(relay.off()).rejects.toThrow(lost);
    await expect(relay.state()).rejects.toThrow(lost);
    expect(performance.now() - started).toBeLessThan(timeoutMs);
  });

  it("makes the event stream's close() say how many events were not delivered", async () => {
    const broker = await fakeBroker(leavesAtFirstPublish);
    const events = await connectRigEvents({ brokerUrl: broker, rig: "bench-1", timeoutMs: 300 });
    events.publish({ t: 0, kind: "power", detail: "off" });
    events.publish({ t: 1, kind: "power", detail: "on" });
    await expect(events.close()).rejects.toThrow(
      new BrokerError(`2 of 2 events on badgebench/bench-1/events were not delivered: lost the connection to MQTT broker ${broker}: the broker closed it`),
    );
  });
});

describe("the rig's event stream", () => {
  async function subscribe(topic: string): Promise<RigEvent[]> {
    const subscriber = await testClient();
    const received: RigEvent[] = [];
    subscriber.on("message", (_topic, payload) => received.push(JSON.parse(payload.toString())));
    await subscriber.subscribeAsync(topic, { qos: 1 });
    return received;
  }

  it("publishes on badgebench/<rig>/events, in order, and close() flushes", async () => {
    const rig = uniqueTopic();
    const received = await subscribe(`badgebench/${rig}/events`);
    const events = await connectRigEvents({ brokerUrl: BROKER, rig });
    expect(events.topic).toBe(`badgebench/${rig}/events`);
    const sent: RigEvent[] = Array.from({ length: 200 }, (_, i) => ({ t: i * 10, kind: i % 2 ? "state" : "console", detail: `event ${i}` }));
    for (const event of sent) events.publish(event);
    await events.close();
    await expect.poll(() => received.length).toBe(sent.length);
    expect(received).toEqual(sent);
  });

  it("sends only t, kind and detail, and refuses events after close", async () => {
    const rig = uniqueTopic();
    const received = await subscribe(`badgebench/${rig}/events`);
    const events = await connectRigEvents({ brokerUrl: BROKER, rig });
    events.publish({ t: 1, kind: "power", detail: "off", extra: "not sent" } as RigEvent);
    await events.close();
    await expect.poll(() => received).toEqual([{ t: 1, kind: "power", detail: "off" }]);
    expect(() => events.publish({ t: 2, kind: "power", detail: "on" })).toThrow(/closed/);
  });

  it("refuses a rig id that would not be one topic level", async () => {
    await expect(connectRigEvents({ brokerUrl: BROKER, rig: "bench/1" })).rejects.toThrow(/^rig: expected a rig id/);
  });
});

describe("powerCutPlan", () => {
  const IMAGE = 262_144;

  it.each([
    [0, 0],
    [10, 26_214],
    [50, 131_072],
    [99, 259_522],
    [99.9, 261_881],
  ])("cuts a brownout at %s %% when the progress reaches byte %s", (atPercent, byte) => {
    expect(powerCutPlan({ kind: "brownout", atPercent }, IMAGE)).toEqual({ cutAt: "progress", byte });
  });

  it("rounds down as the simulated battery does", () => {
    expect(powerCutPlan({ kind: "brownout", atPercent: 33 }, 1001)).toEqual({ cutAt: "progress", byte: 330 });
  });

  it("cuts a brownout during the switch at the console's switch event", () => {
    expect(powerCutPlan({ kind: "brownout", during: "switch" }, IMAGE)).toEqual({ cutAt: "switch" });
  });

  it("reads the shipped scenarios' power faults", () => {
    const fault = (file: string) => loadScenario(path.join(ROOT, "fixtures/scenarios", file)).faults.power[0]!;
    expect(powerCutPlan(fault("brownout-50-percent.json"), 1_966_080)).toEqual({ cutAt: "progress", byte: 983_040 });
    expect(powerCutPlan(fault("brownout-during-switch.json"), 1_966_080)).toEqual({ cutAt: "switch" });
  });

  it("refuses a download size that is not a positive whole number", () => {
    expect(() => powerCutPlan({ kind: "brownout", atPercent: 50 }, 0)).toThrow(/^totalBytes: /);
    expect(() => powerCutPlan({ kind: "brownout", atPercent: 50 }, 1.5)).toThrow(TypeError);
  });
});
