// `badgebench webhooks listen`: a local webhook receiver for integrators, following every
// receiver rule of SPEC 5 with the exported verifySignature: the raw body bytes, a
// constant-time compare against any v1 part under any given secret, 400 on a mismatch or a
// timestamp more than 300 s off, 200 before any slow work (printing, forwarding) and never a
// failure after it, and duplicates (same event.id) acknowledged but skipped.
import http from "node:http";
import type { AddressInfo } from "node:net";
import { UnreachableError } from "../../badge-sim/network/unreachable.ts";
import { DEFAULT_TOLERANCE_SECONDS, SignatureVerificationError, verifySignature } from "../../server/webhooks/signature.ts";

export interface ListenOptions {
  port: number;
  host: string;
  secrets: string[];
  forwardTo?: string;
  json: boolean;
  toleranceSeconds?: number;
  /** where event lines go (default stdout) and notices go (default stderr) */
  out?: (line: string) => void;
  err?: (line: string) => void;
}

const MAX_BODY_BYTES = 1024 * 1024;
/** ids remembered for deduplication; the oldest are forgotten first */
const SEEN_LIMIT = 100_000;

interface EventShape {
  id: string;
  type: string;
  livemode?: boolean;
  test_delivery?: boolean;
  data?: { object?: Record<string, any>; from?: string };
}

/** One readable line per event: time, id, type, and what happened. */
export function describeEvent(event: EventShape, receivedAt: Date): string {
  const object = event.data?.object ?? {};
  let what = "";
  if (event.type.startsWith("attendance.")) {
    const from = event.data?.from;
    what = `${object.id} ${object.student?.external_id ?? "?"} ${from ? `${from} -> ` : ""}${object.status}`;
  } else if (event.type === "badge.ota_reported") {
    what = `${object.device?.id ?? "?"} ${object.outcome} ${object.version}${object.message ? ` (${object.message})` : ""}`;
  }
  const mode = event.livemode ? "live" : "test";
  return [receivedAt.toISOString(), event.id, event.type, mode + (event.test_delivery ? " test-delivery" : ""), what].filter(Boolean).join("  ");
}

export interface Listener {
  url: string;
  close(): Promise<void>;
}

export async function startListener(options: ListenOptions): Promise<Listener> {
  const out = options.out ?? ((line) => process.stdout.write(`${line}\n`));
  const err = options.err ?? ((line) => process.stderr.write(`${line}\n`));
  const seen = new Set<string>();
  const answer = (res: http.ServerResponse, status: number, body: object) => {
    res.writeHead(status, { "content-type": "application/json" });
    res.end(JSON.stringify(body));
  };

  const server = http.createServer((req, res) => {
    if (req.method !== "POST") return answer(res, 405, { error: "webhooks are POSTed" });
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_BODY_BYTES) chunks.push(chunk);
    });
    req.on("end", () => {
      if (size > MAX_BODY_BYTES) return answer(res, 413, { error: `body larger than ${MAX_BODY_BYTES} bytes` });
      const raw = Buffer.concat(chunks);
      const header = req.headers["x-service-signature"];
      try {
        verifySignature(raw, Array.isArray(header) ? header.join(",") : header, options.secrets, {
          toleranceSeconds: options.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS,
        });
      } catch (error) {
        if (!(error instanceof SignatureVerificationError)) throw error;
        err(`refused a delivery: ${error.message}`);
        return answer(res, 400, { error: error.reason, message: error.message });
      }
      let event: EventShape;
      try {
        event = JSON.parse(raw.toString("utf8")) as EventShape;
        if (typeof event?.id !== "string" || typeof event.type !== "string") throw new Error("no id or type");
      } catch {
        return answer(res, 400, { error: "body_invalid", message: "the signed body is not an event object" });
      }
      const duplicate = seen.has(event.id);
      answer(res, 200, { received: true, duplicate });
      if (duplicate) return;
      seen.add(event.id);
      if (seen.size > SEEN_LIMIT) seen.delete(seen.values().next().value!);
      // Acknowledged: from here on nothing may fail the delivery, so every error is only reported.
      try {
        out(options.json ? JSON.stringify(event) : describeEvent(event, new Date()));
      } catch (error) {
        err(`could not print event ${event.id}: ${(error as Error).message}`);
      }
      if (options.forwardTo) void forward(options.forwardTo, raw, req.headers, err, event.id);
    });
    req.on("error", () => res.destroy());
  });

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  const host = options.host.includes(":") ? `[${options.host}]` : options.host;
  return {
    url: `http://${host}:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** The headers an app behind verifies a delivery with: SPEC 5's and Standard Webhooks' three. */
const SIGNED_HEADERS = ["x-service-signature", "webhook-id", "webhook-timestamp", "webhook-signature"];

/** Passes the delivery on unchanged (raw bytes, signature headers), so the app behind can verify it too. */
async function forward(url: string, raw: Buffer, headers: http.IncomingHttpHeaders, err: (line: string) => void, eventId: string) {
  const signed = SIGNED_HEADERS.flatMap((name) => (typeof headers[name] === "string" ? [[name, headers[name]]] : []));
  try {
    const response = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json", ...Object.fromEntries(signed) },
      body: new Uint8Array(raw),
      signal: AbortSignal.timeout(30_000),
    });
    await response.arrayBuffer();
    if (!response.ok) err(`forwarding ${eventId} to ${url}: HTTP ${response.status}`);
  } catch (error) {
    err(`forwarding ${eventId} failed: ${new UnreachableError(url, error).message}`);
  }
}
