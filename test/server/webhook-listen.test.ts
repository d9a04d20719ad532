// The receiver side: the exported verifySignature (checked against the test's own SPEC 5
// signer) and `badgebench webhooks listen` as a real process, fed by the test and by the server.
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import path from "node:path";
import fc from "fast-check";
import { Webhook } from "standardwebhooks";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createApiKey } from "../../server/services/api-keys.ts";
import { SignatureVerificationError, verifySignature } from "../../server/webhooks/signature.ts";
import { deliveryHeaders } from "../../server/webhooks/standard-webhooks.ts";
import { baseEnv, ROOT, run } from "./cli-process.ts";
import { startHarness, type Harness } from "./harness.ts";
import { specSign, startReceiver, type Receiver } from "./webhook-receiver.ts";

const SECRET = "whsec_test_secret_one";
const OTHER = "whsec_test_secret_two";
const body = JSON.stringify({ id: "evt_1", object: "event", type: "attendance.recorded", created: 1, livemode: false, data: { object: { id: "att_1", status: "present", student: { external_id: "S1" } } } });

describe("verifySignature", () => {
  const now = Math.floor(Date.now() / 1000);
  const reason = (fn: () => unknown) => {
    try {
      fn();
    } catch (error) {
      return (error as SignatureVerificationError).reason;
    }
    return "accepted";
  };

  it("accepts a body signed as SPEC 5 says, with any of several secrets and any of several v1 parts", () => {
    expect(verifySignature(body, specSign(body, SECRET, now), [SECRET])).toBe(now);
    expect(verifySignature(Buffer.from(body), specSign(body, SECRET, now), [OTHER, SECRET])).toBe(now);
    const two = `${specSign(body, OTHER, now)},v1=${specSign(body, SECRET, now).split("v1=")[1]}`;
    expect(verifySignature(body, two, SECRET)).toBe(now);
  });

  it("refuses a changed body, a wrong secret, a stale or future timestamp, and malformed headers", () => {
    const header = specSign(body, SECRET, now);
    expect(reason(() => verifySignature(body.replace("present", "absent"), header, [SECRET]))).toBe("signature_mismatch");
    expect(reason(() => verifySignature(JSON.stringify(JSON.parse(body), null, 1), header, [SECRET]))).toBe("signature_mismatch");
    expect(reason(() => verifySignature(body, header, [OTHER]))).toBe("signature_mismatch");
    expect(reason(() => verifySignature(body, specSign(body, SECRET, now - 301), [SECRET], { now }))).toBe("timestamp_outside_tolerance");
    expect(reason(() => verifySignature(body, specSign(body, SECRET, now + 301), [SECRET], { now }))).toBe("timestamp_outside_tolerance");
    expect(reason(() => verifySignature(body, specSign(body, SECRET, now - 300), [SECRET], { now }))).toBe("accepted");
    expect(reason(() => verifySignature(body, specSign(body, SECRET, now - 30), [SECRET], { toleranceSeconds: 10, now }))).toBe("timestamp_outside_tolerance");
    expect(reason(() => verifySignature(body, undefined, [SECRET]))).toBe("header_missing");
    expect(reason(() => verifySignature(body, `t=${now}`, [SECRET]))).toBe("header_malformed");
    expect(reason(() => verifySignature(body, header.replace(/^t=\d+,/, ""), [SECRET]))).toBe("header_malformed");
    expect(reason(() => verifySignature(body, header, []))).toBe("signature_mismatch");
  });

  it("never throws anything but a SignatureVerificationError, and never accepts a header it did not make (fuzz)", () => {
    fc.assert(
      fc.property(fc.string(), fc.string(), (raw, header) => {
        try {
          verifySignature(raw, header, [SECRET]);
          return false;
        } catch (error) {
          return error instanceof SignatureVerificationError;
        }
      }),
      { numRuns: 500 },
    );
  });

  it("is importable as badgebench/webhooks (the package's exports entry)", async () => {
    const result = await run([], { program: ["--import", "tsx", "--input-type=module", "-e", "import { verifySignature } from 'badgebench/webhooks'; console.log(typeof verifySignature)"] });
    expect(result.stderr).toBe("");
    expect(result.stdout.trim()).toBe("function");
  });
});

interface ListenProcess {
  url: string;
  child: ChildProcess;
  lines: () => string[];
  stderr: () => string;
}

const listeners: ChildProcess[] = [];
afterEach(() => {
  for (const child of listeners.splice(0)) child.kill("SIGKILL");
});

function listen(args: string[]): Promise<ListenProcess> {
  const child = spawn(process.execPath, [path.join(ROOT, "scripts/cli/badgebench.js"), "webhooks", "listen", ...(args.includes("--port") ? [] : ["--port", "0"]), ...args], { cwd: ROOT, env: baseEnv(), stdio: ["ignore", "pipe", "pipe"] });
  listeners.push(child);
  let stdout = "";
  let stderr = "";
  child.stdout!.setEncoding("utf8").on("data", (c: string) => (stdout += c));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`listen did not start: ${stderr}`)), 20_000);
    child.on("close", () => reject(new Error(`listen exited: ${stderr}`)));
    child.stderr!.setEncoding("utf8").on("data", (c: string) => {
      stderr += c;
      const match = /listening on (http:\/\/\S+)/.exec(stderr);
      if (match) {
        clearTimeout(timer);
        resolve({ url: match[1]!, child, lines: () => stdout.split("\n").filter(Boolean), stderr: () => stderr });
      }
    });
  });
}

async function post(url: string, raw: string, header?: string) {
  const res = await fetch(url, { method: "POST", headers: { "content-type": "application/json", ...(header ? { "x-service-signature": header } : {}) }, body: raw });
  return { status: res.status, body: await res.json() };
}

async function until(check: () => boolean, timeoutMs = 5000) {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe("badgebench webhooks listen", () => {
  it("prints each verified event on one line, refuses bad signatures and stale timestamps with 400, skips duplicates", async () => {
    const l = await listen(["--secret", SECRET]);
    expect((await post(l.url, body, specSign(body, SECRET))).status).toBe(200);
    await until(() => l.lines().length === 1);
    expect(l.lines()[0]).toMatch(/^\S+Z {2}evt_1 {2}attendance\.recorded {2}test {2}att_1 S1 present$/);
    const duplicate = await post(l.url, body, specSign(body, SECRET));
    expect(duplicate).toEqual({ status: 200, body: { received: true, duplicate: true } });
    const wrong = await post(l.url, body, specSign(body, OTHER));
    expect(wrong.status).toBe(400);
    expect(wrong.body.error).toBe("signature_mismatch");
    const stale = await post(l.url, body, specSign(body, SECRET, Math.floor(Date.now() / 1000) - 301));
    expect(stale.status).toBe(400);
    expect(stale.body.error).toBe("timestamp_outside_tolerance");
    expect((await post(l.url, body)).status).toBe(400);
    const tampered = body.replace("present", "absent");
    expect((await post(l.url, tampered, specSign(body, SECRET))).status).toBe(400);
    await new Promise((r) => setTimeout(r, 100));
    expect(l.lines()).toHaveLength(1);
  });

  it("prints one JSON object per line with --json, accepts either of two secrets, and forwards after acknowledging", async () => {
    const app = await startReceiver();
    app.answer = () => ({ status: 500 }); // the app behind fails: the listener's 200 stands
    try {
      const l = await listen(["--secret", OTHER, "--secret", SECRET, "--json", "--forward-to", app.url]);
      const res = await post(l.url, body, specSign(body, SECRET));
      expect(res).toEqual({ status: 200, body: { received: true, duplicate: false } });
      await until(() => l.lines().length === 1);
      expect(JSON.parse(l.lines()[0]!)).toEqual(JSON.parse(body));
      await app.waitFor((d) => d.length === 1);
      expect(app.deliveries[0]!.raw.toString()).toBe(body);
      expect(String(app.deliveries[0]!.headers["x-service-signature"])).toMatch(/^t=\d+,v1=[0-9a-f]{64}$/);
      await until(() => l.stderr().includes("HTTP 500"));
    } finally {
      await app.close();
    }
  });

  it("forwards the Standard Webhooks headers too, so the app behind can verify with the standardwebhooks package", async () => {
    const secret = `whsec_${randomBytes(32).toString("base64")}`;
    const app = await startReceiver();
    try {
      const l = await listen(["--secret", secret, "--forward-to", app.url]);
      const headers = deliveryHeaders("evt_1", body, [secret], Math.floor(Date.now() / 1000));
      const res = await fetch(l.url, { method: "POST", headers: { "content-type": "application/json", ...headers }, body });
      expect(res.status).toBe(200);
      await app.waitFor((d) => d.length === 1);
      const forwarded = app.deliveries[0]!;
      const standard = Object.fromEntries(["webhook-id", "webhook-timestamp", "webhook-signature"].map((name) => [name, String(forwarded.headers[name])]));
      expect(new Webhook(secret).verify(forwarded.raw.toString("utf8"), standard)).toEqual(JSON.parse(body));
    } finally {
      await app.close();
    }
  });

  it("names the URL and the cause when the app behind is down", async () => {
    const gone = await startReceiver();
    await gone.close(); // nothing listens on its port any more
    const l = await listen(["--secret", SECRET, "--forward-to", gone.url]);
    expect((await post(l.url, body, specSign(body, SECRET))).status).toBe(200);
    await until(() => l.stderr().includes("forwarding evt_1"));
    expect(l.stderr()).toContain(`forwarding evt_1 failed: cannot reach ${gone.url} (connection refused)`);
  });

  it("answers 400 to arbitrary bodies and headers and keeps running (fuzz over HTTP)", async () => {
    const l = await listen(["--secret", SECRET]);
    await fc.assert(
      fc.asyncProperty(
        fc.string({ maxLength: 300 }),
        fc.option(fc.oneof(fc.string({ maxLength: 200 }), fc.constantFrom(`t=${Math.floor(Date.now() / 1000)},v1=${"0".repeat(64)}`, "t=,v1=", "v1=zz,t=1")), { nil: undefined }),
        async (raw, header) => {
          const res = await fetch(l.url, { method: "POST", headers: header === undefined ? {} : { "x-service-signature": header.replace(/[^\x20-\x7e]/g, "") }, body: raw });
          await res.arrayBuffer();
          expect(res.status).toBe(400);
        },
      ),
      { numRuns: 100 },
    );
    expect((await post(l.url, body, specSign(body, SECRET))).status).toBe(200);
    await until(() => l.lines().length === 1);
  });

  it("says so, without a stack trace, when the port is taken", async () => {
    const taken = await startReceiver();
    try {
      const result = await run(["webhooks", "listen", "--port", new URL(taken.url).port, "--secret", SECRET]);
      expect(result.code).toBe(1);
      expect(result.stderr).toMatch(/^badgebench: cannot listen on 127\.0\.0\.1:\d+: .*EADDRINUSE/);
      expect(result.stderr).not.toMatch(/\n\s+at /);
    } finally {
      await taken.close();
    }
  });

  it("refuses to start without a secret (usage error)", async () => {
    const result = await run(["webhooks", "listen", "--port", "0"]);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/secret/);
  });
});

describe("the integrator's loop: endpoint -> test delivery -> listener", () => {
  let h: Harness;
  let key: string;
  beforeAll(async () => {
    h = await startHarness();
    key = (await createApiKey(h.server.store.db, { mode: "test", scopes: ["webhooks:write"] })).secret;
  });
  afterAll(() => h.close());

  it("a test delivery to an endpoint pointing at the listener arrives verified", async () => {
    const port = await freePort();
    const url = `http://localhost:${port}/`;
    const endpoint = await h.request("POST", "/v1/webhook_endpoints", { key, body: { url, enabled_events: ["*"] } });
    expect(endpoint.status).toBe(201);
    const l = await listen(["--port", String(port), "--secret", endpoint.body.secret]);
    expect(l.url).toBe(`http://127.0.0.1:${port}`);
    const res = await h.request("POST", `/v1/webhook_endpoints/${endpoint.body.id}/test`, { key, body: { type: "attendance.updated" } });
    expect(res.body).toMatchObject({ delivered: true, status_code: 200 });
    await until(() => l.lines().length === 1);
    expect(l.lines()[0]).toContain(`${res.body.event.id}  attendance.updated  test test-delivery  att_test TEST-STUDENT present -> late`);
  });
});

async function freePort(): Promise<number> {
  const probe: Receiver = await startReceiver();
  const port = Number(new URL(probe.url).port);
  await probe.close();
  return port;
}
