// One connection to the MQTT broker that carries the rig's power relay and event stream.
// mqtt.js retries a refused connection forever by default, so a rig whose broker is down would
// hang; here a connection is tried once, within a deadline, and an error names the broker.
import { connect, type MqttClient } from "mqtt";
import { z } from "zod";

const BROKER_PROTOCOLS = ["mqtt:", "mqtts:", "ws:", "wss:"];

export const brokerUrlSchema = z
  .string()
  .refine(
    (text) => URL.canParse(text) && BROKER_PROTOCOLS.includes(new URL(text).protocol),
    "expected a broker URL such as mqtt://192.168.1.10:1883 (mqtt, mqtts, ws or wss)",
  );

/** One level of a topic: a `/` would shift the levels, and `+` `#` are wildcards. */
export const topicLevelSchema = z.string().regex(/^[^/+#\s]{1,64}$/, "expected 1 to 64 characters without /, +, # or spaces");

/** The broker cannot be reached, refused us, or went away. */
export class BrokerError extends Error {
  override name = "BrokerError";
}

/** Checks one option up front, as constructors do, with a TypeError naming it. */
export function checkOption<T>(name: string, schema: z.ZodType<T>, value: unknown): T {
  const result = schema.safeParse(value);
  if (!result.success) throw new TypeError(`${name}: ${result.error.issues[0]!.message} (got ${JSON.stringify(value)})`);
  return result.data;
}

export interface BrokerConnection {
  /** The broker's URL as error messages show it: without a password. */
  url: string;
  client: MqttClient;
  /** Why the connection ended without close(); set once it has. */
  readonly lost: BrokerError | undefined;
  /** Called once if the connection ends without close(). */
  onLost(listener: (error: BrokerError) => void): void;
  /** Disconnects at once: callers wait themselves for the acknowledgements that matter to them. */
  close(): Promise<void>;
}

export function connectBroker(brokerUrl: string, timeoutMs: number): Promise<BrokerConnection> {
  const url = withoutPassword(brokerUrl);
  // connectTimeout bounds everything up to the broker's CONNACK (TCP, TLS, the handshake);
  // reconnectPeriod 0: a rig that loses its broker fails that step and says why, rather than
  // switching power late after a silent reconnect.
  const client = connect(brokerUrl, { connectTimeout: timeoutMs, reconnectPeriod: 0 });
  let lastError: Error | undefined;
  // Without a listener an 'error' event would throw out of the event loop.
  client.on("error", (error) => (lastError = error));

  return new Promise((resolve, reject) => {
    const onClose = () => reject(new BrokerError(`cannot connect to MQTT broker ${url}: ${whyNotConnected(lastError, timeoutMs)}`));
    client.once("close", onClose);
    client.once("connect", () => {
      client.off("close", onClose);
      // A relay command is a few bytes whose latency is the point: not held back by Nagle's
      // algorithm for the ACK of the one before (a TCP socket; a WebSocket's stream has no such switch).
      (client.stream as { setNoDelay?: (noDelay: boolean) => void }).setNoDelay?.(true);
      resolve(connected(url, client, () => lastError));
    });
  });
}

function connected(url: string, client: MqttClient, lastError: () => Error | undefined): BrokerConnection {
  let lost: BrokerError | undefined;
  const listeners: Array<(error: BrokerError) => void> = [];
  client.once("close", () => {
    if (client.disconnecting || client.disconnected) return;
    const cause = lastError();
    lost = new BrokerError(`lost the connection to MQTT broker ${url}: ${cause ? describe(cause) : "the broker closed it"}`);
    for (const listener of listeners) listener(lost);
  });
  return {
    url,
    client,
    get lost() {
      return lost;
    },
    onLost: (listener) => listeners.push(listener),
    // Forced: a polite end waits for every unacknowledged message, forever if the broker is gone.
    close: () => client.endAsync(true),
  };
}

function withoutPassword(brokerUrl: string): string {
  const url = new URL(brokerUrl);
  if (!url.password) return brokerUrl;
  url.password = "***";
  return url.toString();
}

function whyNotConnected(error: Error | undefined, timeoutMs: number): string {
  if (!error) return "the connection closed before the broker accepted it";
  if (error.message === "connack timeout") return `no answer within ${timeoutMs} ms`;
  return describe(error);
}

function describe(error: Error): string {
  const code = (error as NodeJS.ErrnoException).code;
  return typeof code === "string" && !error.message.includes(code) ? `${code} ${error.message}` : error.message;
}
