// The rig's event stream on `badgebench/<rig>/events`, so a dashboard or a second terminal can
// follow a run on a real badge. Each message is one observation-log entry, `{t, kind, detail}`
// in JSON as in badge.log, sent with QoS 1: the broker acknowledges each one and delivers them
// in the order they were published.
import { z } from "zod";
import { BrokerError, brokerUrlSchema, checkOption, connectBroker } from "./mqtt-broker.ts";

export interface RigEvent {
  t: number;
  kind: string;
  detail: string;
}

export const DEFAULT_EVENTS_TIMEOUT_MS = 5000;

/** The rig's id, one level of its topics. */
export const rigNameSchema = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, "expected a rig id of up to 64 letters, digits, '.', '_' or '-', such as bench-1");

export const rigEventsTopic = (rig: string) => `badgebench/${rig}/events`;

export interface RigEventStreamOptions {
  brokerUrl: string;
  rig: string;
  /** How long the broker may take to accept us, and at close to acknowledge what was sent. */
  timeoutMs?: number;
}

export interface RigEventStream {
  readonly topic: string;
  /** Sends one event without waiting; close() reports any that did not reach the broker. */
  publish(event: RigEvent): void;
  /** Waits until the broker acknowledged every event (up to timeoutMs), then disconnects; throws if some did not arrive. */
  close(): Promise<void>;
}

export async function connectRigEvents(options: RigEventStreamOptions): Promise<RigEventStream> {
  const brokerUrl = checkOption("brokerUrl", brokerUrlSchema, options.brokerUrl);
  const rig = checkOption("rig", rigNameSchema, options.rig);
  const timeoutMs = checkOption("timeoutMs", z.int().positive(), options.timeoutMs ?? DEFAULT_EVENTS_TIMEOUT_MS);
  const connection = await connectBroker(brokerUrl, timeoutMs);
  const topic = rigEventsTopic(rig);
  const inFlight = new Set<Promise<void>>();
  let published = 0;
  let failed = 0;
  let firstFailure: string | undefined;
  let closed = false;

  return {
    topic,
    publish({ t, kind, detail }) {
      if (closed) throw new Error(`the event stream ${topic} is closed`);
      published += 1;
      const sent: Promise<void> = connection.client
        .publishAsync(topic, JSON.stringify({ t, kind, detail }), { qos: 1 })
        .then(
          () => undefined,
          (error: Error) => {
            failed += 1;
            firstFailure ??= error.message;
          },
        )
        .finally(() => inFlight.delete(sent));
      inFlight.add(sent);
    },
    async close() {
      closed = true;
      const acknowledged = connection.lost === undefined && (await settlesWithin(Promise.all(inFlight), timeoutMs));
      const undelivered = failed + inFlight.size;
      await connection.close();
      if (undelivered === 0) return;
      const why =
        connection.lost?.message ??
        (acknowledged ? `MQTT broker ${connection.url}: ${firstFailure}` : `MQTT broker ${connection.url} did not acknowledge them within ${timeoutMs} ms`);
      throw new BrokerError(`${undelivered} of ${published} events on ${topic} were not delivered: ${why}`);
    },
  };
}

function settlesWithin(work: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<boolean>((resolve) => (timer = setTimeout(resolve, ms, false)));
  return Promise.race([work.then(() => true), expired]).finally(() => clearTimeout(timer));
}
