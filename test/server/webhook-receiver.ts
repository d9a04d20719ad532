// A real HTTP(S) receiver on port 0 for webhook tests, a second, independent implementation of
// the SPEC 5 signature check written from the spec (never the server's code), and the end of a
// rolled secret's grace period.
import { createHmac } from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import https from "node:https";
import type { AddressInfo } from "node:net";
import path from "node:path";
import type { Kysely } from "kysely";
import type { Database } from "../../server/store/schema.ts";
import type { Resolver } from "../../server/webhooks/address-guard.ts";
import { ROOT } from "./cli-process.ts";

/** A test DNS over `names` (read at each lookup, so a test may repoint a name); any other name does not resolve. */
export function namesResolver(names: Record<string, string>): Resolver {
  return async (host) => {
    const address = names[host];
    if (!address) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: "ENOTFOUND" });
    return [{ address, family: address.includes(":") ? 6 : 4 }];
  };
}

export const TEST_CERT = fs.readFileSync(path.join(ROOT, "fixtures/webhooks/localhost-cert.pem"), "utf8");
const TEST_KEY = fs.readFileSync(path.join(ROOT, "fixtures/webhooks/localhost-key.pem"), "utf8");

/**
 * SPEC 5, from its text: the header is comma-separated name=value parts; `t` is unix seconds;
 * each `v1` is lowercase hex HMAC-SHA256 of `<t>.<raw body>` keyed with the secret. Returns
 * which of `secrets` signed (by index), so a test can see both parts during a secret roll.
 */
export function specSigners(raw: Buffer, header: string, secrets: string[]): { t: number; signedBy: number[]; v1Count: number } {
  const parts = header.split(",").map((p) => p.split("=") as [string, string]);
  const t = Number(parts.find(([name]) => name === "t")![1]);
  const v1 = parts.filter(([name]) => name === "v1").map(([, value]) => value);
  const signedBy = secrets
    .map((secret, i) => {
      const mac = createHmac("sha256", Buffer.from(secret, "utf8"));
      mac.update(Buffer.concat([Buffer.from(String(t), "ascii"), Buffer.from(".", "ascii"), raw]));
      return v1.includes(mac.digest("hex")) ? i : -1;
    })
    .filter((i) => i >= 0);
  return { t, signedBy, v1Count: v1.length };
}

/** The header a sender following SPEC 5 would send (for tests of receivers). */
export function specSign(raw: string, secret: string, t = Math.floor(Date.now() / 1000)): string {
  return `t=${t},v1=${createHmac("sha256", secret).update(`${t}.${raw}`).digest("hex")}`;
}

export interface Delivery {
  raw: Buffer;
  headers: http.IncomingHttpHeaders;
  event: { id: string; type: string; livemode: boolean; created: number; data: any; test_delivery?: boolean };
  at: number;
}

export type Answer = { status: number; headers?: Record<string, string>; body?: string | Buffer } | "hang" | { stream: number };

export interface Receiver {
  url: string;
  deliveries: Delivery[];
  connections: () => number;
  /** what the next requests get (default 200 "ok") */
  answer: (delivery: Delivery) => Answer | Promise<Answer>;
  waitFor(predicate: (deliveries: Delivery[]) => boolean, timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

export async function startReceiver(options: { https?: boolean; path?: string } = {}): Promise<Receiver> {
  const deliveries: Delivery[] = [];
  let connections = 0;
  const hanging = new Set<http.ServerResponse>();
  const receiver: Receiver = {
    url: "",
    deliveries,
    connections: () => connections,
    answer: () => ({ status: 200, body: "ok" }),
    async waitFor(predicate, timeoutMs = 5000) {
      const deadline = Date.now() + timeoutMs;
      while (!predicate(deliveries)) {
        if (Date.now() > deadline) throw new Error(`receiver: condition not met in ${timeoutMs} ms (${deliveries.length} deliveries so far)`);
        await new Promise((r) => setTimeout(r, 10));
      }
    },
    async close() {
      for (const res of hanging) res.destroy();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
  const handler = (req: http.IncomingMessage, res: http.ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", async () => {
      const raw = Buffer.concat(chunks);
      const delivery: Delivery = { raw, headers: req.headers, event: JSON.parse(raw.toString("utf8")), at: Date.now() };
      deliveries.push(delivery);
      const answer = await receiver.answer(delivery);
      if (answer === "hang") {
        hanging.add(res);
        return;
      }
      if ("stream" in answer) {
        res.writeHead(200, { "content-type": "application/octet-stream" });
        const chunk = Buffer.alloc(64 * 1024, 0x61);
        let left = answer.stream;
        const pump = () => {
          while (left > 0) {
            left -= chunk.length;
            if (!res.write(chunk)) return void res.once("drain", pump);
          }
          res.end();
        };
        res.on("error", () => {});
        pump();
        return;
      }
      res.writeHead(answer.status, answer.headers ?? {});
      res.end(answer.body ?? "");
    });
  };
  const server = options.https ? https.createServer({ cert: TEST_CERT, key: TEST_KEY }, handler) : http.createServer(handler);
  server.on("connection", () => connections++);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  receiver.url = `${options.https ? "https" : "http"}://${options.https ? "localhost" : "127.0.0.1"}:${port}${options.path ?? "/hooks"}`;
  return receiver;
}

/**
 * Ends a rolled secret's grace period now, as the clock would at its end: the tests' grace periods
 * are long, so that a delivery made during one is inside it however busy the machine is.
 */
export async function endGracePeriod(db: Kysely<Database>, endpointId: string): Promise<void> {
  const ended = new Date(Date.now() - 1000).toISOString();
  await db.updateTable("webhook_endpoints").set({ previous_secret_expires_at: ended }).where("id", "=", endpointId).execute();
}
