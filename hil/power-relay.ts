// Power control of a real badge through a Tasmota-style relay over MQTT: ON or OFF on
// `cmnd/<topic>/POWER` switches it, and the relay says what it did on `stat/<topic>/POWER`.
// A switch counts only once the relay has confirmed it: a brownout test that believes the power
// was cut when the relay never heard the command would pass for the wrong reason.
import { setTimeout as sleep } from "node:timers/promises";
import { z } from "zod";
import type { Scenario } from "../badge-sim/runners/scenario.ts";
import { BrokerError, brokerUrlSchema, checkOption, connectBroker, topicLevelSchema, type BrokerConnection } from "./mqtt-broker.ts";

export type PowerState = "ON" | "OFF";

export const DEFAULT_RELAY_TIMEOUT_MS = 5000;

export interface PowerRelayOptions {
  brokerUrl: string;
  /** The relay's Tasmota `Topic`, e.g. `badge-bench-1`. */
  topic: string;
  /** How long the broker may take to accept us, and the relay to answer a command. */
  timeoutMs?: number;
}

export interface PowerRelay {
  readonly topic: string;
  /** Resolves once the relay confirms it is on. */
  on(): Promise<void>;
  /** Resolves once the relay confirms it is off; `onSent` hears when the broker has the command (its PUBACK). */
  off(options?: { onSent?: () => void }): Promise<void>;
  /** Asks the relay with an empty command, as Tasmota's `Power` without an argument. */
  state(): Promise<PowerState>;
  /** Off, `offMs` without power, then on. */
  cycle(offMs: number): Promise<void>;
  close(): Promise<void>;
}

/** The relay did not confirm a command in time, or was used after close(). */
export class PowerRelayError extends Error {
  override name = "PowerRelayError";
}

export async function connectPowerRelay(options: PowerRelayOptions): Promise<PowerRelay> {
  const brokerUrl = checkOption("brokerUrl", brokerUrlSchema, options.brokerUrl);
  const topic = checkOption("topic", topicLevelSchema, options.topic);
  const timeoutMs = checkOption("timeoutMs", z.int().positive(), options.timeoutMs ?? DEFAULT_RELAY_TIMEOUT_MS);
  const connection = await connectBroker(brokerUrl, timeoutMs);
  const relay = new TasmotaRelay(connection, topic, timeoutMs);
  try {
    await relay.listen();
  } catch (error) {
    await connection.close();
    throw error;
  }
  return relay;
}

/** The command waiting for the relay's answer. */
interface Exchange {
  heard(state: PowerState): void;
  fail(error: Error): void;
}

class TasmotaRelay implements PowerRelay {
  private readonly commandTopic: string;
  private readonly stateTopic: string;
  private exchange: Exchange | undefined;
  /** Commands run one at a time, since a state message answers whichever command is waiting. */
  private queue: Promise<unknown> = Promise.resolve();
  private closed = false;

  constructor(
    private readonly connection: BrokerConnection,
    readonly topic: string,
    private readonly timeoutMs: number,
  ) {
    this.commandTopic = `cmnd/${topic}/POWER`;
    this.stateTopic = `stat/${topic}/POWER`;
    connection.client.on("message", (received, payload, packet) => {
      // A retained state is old news (Tasmota's PowerRetain): it must not confirm a new command.
      if (received !== this.stateTopic || packet.retain) return;
      const state = payload.toString().trim().toUpperCase();
      if (state === "ON" || state === "OFF") this.exchange?.heard(state);
    });
    connection.onLost((error) => this.exchange?.fail(error));
  }

  async listen(): Promise<void> {
    const refused = new BrokerError(`MQTT broker ${this.connection.url} did not grant a subscription to ${this.stateTopic}`);
    const grants = await withTimeout(this.connection.client.subscribeAsync(this.stateTopic, { qos: 1 }), this.timeoutMs, refused);
    const granted = grants[0]?.qos;
    if (granted === undefined || granted >= 128) throw refused;
  }

  async on(): Promise<void> {
    await this.command("ON", "ON");
  }

  async off(options: { onSent?: () => void } = {}): Promise<void> {
    await this.command("OFF", "OFF", options.onSent);
  }

  state(): Promise<PowerState> {
    return this.command("", undefined);
  }

  async cycle(offMs: number): Promise<void> {
    checkOption("offMs", z.number().nonnegative(), offMs);
    await this.off();
    await sleep(offMs);
    await this.on();
  }

  async close(): Promise<void> {
    this.closed = true;
    this.exchange?.fail(this.closedError());
    await this.connection.close();
  }

  /** Publishes `payload` and resolves with the first state the relay then reports (`wanted`, when given). */
  private command(payload: string, wanted: PowerState | undefined, onSent?: () => void): Promise<PowerState> {
    const answered = this.queue.then(() => this.exchangeOnce(payload, wanted, onSent));
    this.queue = answered.catch(() => undefined);
    return answered;
  }

  private exchangeOnce(payload: string, wanted: PowerState | undefined, onSent?: () => void): Promise<PowerState> {
    if (this.closed) return Promise.reject(this.closedError());
    if (this.connection.lost) return Promise.reject(this.connection.lost);
    return new Promise((resolve, reject) => {
      let settled = false;
      let lastHeard: PowerState | undefined;
      const settle = (outcome: PowerState | Error) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        this.exchange = undefined;
        if (outcome instanceof Error) reject(outcome);
        else resolve(outcome);
      };
      const timer = setTimeout(() => settle(this.silenceError(wanted, lastHeard)), this.timeoutMs);
      this.exchange = {
        heard: (state) => (wanted === undefined || state === wanted ? settle(state) : (lastHeard = state)),
        fail: settle,
      };
      // QoS 1 only when the caller must hear the broker's PUBACK (`onSent`, a cut's order): the
      // relay's state answer is what confirms a command, and a connection that never reconnects
      // never resends one. A PUBACK before the answer cost every command 40 to 90 ms: a broker
      // with Nagle's algorithm on (Mosquitto's default) holds the answer until the PUBACK's
      // delayed ACK comes back.
      this.connection.client.publish(this.commandTopic, payload, { qos: onSent ? 1 : 0 }, (error) => {
        if (error) settle(new BrokerError(`cannot publish ${this.commandTopic} to MQTT broker ${this.connection.url}: ${error.message}`));
        else onSent?.();
      });
    });
  }

  private silenceError(wanted: PowerState | undefined, lastHeard: PowerState | undefined): PowerRelayError {
    const asked = wanted ? `confirm POWER ${wanted}` : `answer an empty ${this.commandTopic}`;
    const hint = lastHeard ? `it said ${lastHeard}` : "is the relay online, and is its topic right?";
    return new PowerRelayError(
      `relay ${this.topic} did not ${asked} on ${this.stateTopic} within ${this.timeoutMs} ms (MQTT broker ${this.connection.url}); ${hint}`,
    );
  }

  private closedError(): PowerRelayError {
    return new PowerRelayError(`relay ${this.topic} on MQTT broker ${this.connection.url} was closed`);
  }
}

function withTimeout<T>(work: Promise<T>, ms: number, error: Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(error), ms)));
  return Promise.race([work, expired]).finally(() => clearTimeout(timer));
}

type PowerFault = Scenario["faults"]["power"][number];

/** When to cut a real badge's power: once the console reports `byte` downloaded, or as it enters the partition switch. */
export type PowerCutPlan = { cutAt: "progress"; byte: number } | { cutAt: "switch" };

/**
 * A scenario's power fault for a real badge. The byte is the simulated battery's (`atPercent`
 * of the image, rounded down), so both targets aim at the same point; a real badge is cut at
 * the first progress line at or past it, so it lands up to one progress step (and the relay's
 * latency) later.
 */
export function powerCutPlan(fault: PowerFault, totalBytes: number): PowerCutPlan {
  checkOption("totalBytes", z.int().positive(), totalBytes);
  if ("during" in fault) return { cutAt: "switch" };
  return { cutAt: "progress", byte: Math.floor((totalBytes * fault.atPercent) / 100) };
}
