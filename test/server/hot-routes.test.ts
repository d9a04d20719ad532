// The hot routes (server/http/hot-routes.ts) serve POST /v1/attendance, POST
// /api/badge/ota/check and POST /api/badge/sync without Express's router. They must answer
// exactly as Express does: here a second server on the same data directory runs with
// `hotRoutes: false`, and the fuzz targets' requests for those routes go to both; status,
// headers and body must match.
import http from "node:http";
import type { AddressInfo } from "node:net";
import fc from "fast-check";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { withHotRoutes, type HotRoute } from "../../server/http/hot-routes.ts";
import type { Step } from "../../server/http/steps.ts";
import { startServer, type RunningServer } from "../../server/main.ts";
import { sendRaw, type RawAnswer, type RawRequest } from "./fuzz-http.ts";
import { FUZZ_AUTH_FAILURES, startFuzzFixture, type FuzzFixture } from "./fuzz-targets.ts";

describe("withHotRoutes", () => {
  const calls: string[] = [];
  let url: string;
  let server: http.Server;
  const step =
    (name: string, act: "next" | "throw" | "reject" | "pass" | "answer"): Step =>
    async (_req, res, next) => {
      calls.push(name);
      if (act === "throw") throw new Error(name);
      if (act === "pass") return next(new Error(name));
      if (act === "answer") return res.end(name);
      if (act === "reject") return Promise.reject(new Error(name));
      next();
    };
  const errorStep =
    (name: string, answers: boolean): HotRoute["onError"][number] =>
    (error, _req, res, next) => {
      calls.push(`${name}(${(error as Error).message})`);
      if (answers) res.end(`${name}: ${(error as Error).message}`);
      else throw new Error(`${name} failed`);
    };
  beforeAll(async () => {
    const routes: HotRoute[] = [
      { method: "POST", path: "/ok", steps: [step("a", "next"), step("b", "answer")], onError: [errorStep("e", true)] },
      { method: "POST", path: "/throws", steps: [step("a", "throw"), step("b", "answer")], onError: [errorStep("e", true)] },
      { method: "POST", path: "/passes", steps: [step("a", "pass"), step("b", "answer")], onError: [errorStep("e", true)] },
      { method: "POST", path: "/rejects", steps: [step("a", "next"), step("b", "reject")], onError: [errorStep("inner", false), errorStep("outer", true)] },
    ];
    server = http.createServer(withHotRoutes(routes, (req, res) => res.end(`fallback ${req.method} ${req.url}`)));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  const post = async (path: string, method = "POST") => {
    calls.length = 0;
    const answer = await sendRaw(url, { method, path, headers: [], body: Buffer.from("x") });
    return { text: answer.body.toString(), calls: [...calls] };
  };

  it("runs a route's steps in order, each after the previous one's next()", async () => {
    expect(await post("/ok")).toEqual({ text: "b", calls: ["a", "b"] });
  });

  it("sends a thrown, passed or rejected error to the error middleware, skipping the steps after it", async () => {
    expect(await post("/throws")).toEqual({ text: "e: a", calls: ["a", "e(a)"] });
    expect(await post("/passes")).toEqual({ text: "e: a", calls: ["a", "e(a)"] });
  });

  it("passes what an error middleware throws to the next one, as Express passes the badge router's to the app's", async () => {
    expect(await post("/rejects")).toEqual({ text: "outer: inner failed", calls: ["a", "b", "inner(b)", "outer(inner failed)"] });
  });

  it("leaves every other method and spelling of the path to the fallback", async () => {
    for (const [method, path] of [["GET", "/ok"], ["POST", "/ok/"], ["POST", "/OK"], ["POST", "/ok?x=1"], ["POST", "//ok"]] as const) {
      expect(await post(path, method)).toEqual({ text: `fallback ${method} ${path}`, calls: [] });
    }
  });
});

describe("the hot routes answer as Express does", () => {
  let fixture: FuzzFixture;
  let expressOnly: RunningServer;
  beforeAll(async () => {
    fixture = await startFuzzFixture();
    expressOnly = await startServer({
      dataDir: fixture.harness.dataDir,
      port: 0,
      host: "127.0.0.1",
      sync: "normal",
      logger: pino({ level: "silent" }),
      hotRoutes: false,
      authFailures: FUZZ_AUTH_FAILURES,
    });
  });
  afterAll(async () => {
    await expressOnly.close();
    await fixture.close();
  });

  const HOT = new Set(["POST /v1/attendance", "POST /api/badge/ota/check", "POST /api/badge/sync"]);
  let run = 0;

  /** The same request with its Idempotency-Key made unique to this run and server (same length for both). */
  const withKeySuffix = (request: RawRequest, suffix: string): RawRequest => ({
    ...request,
    headers: request.headers.map(([name, value]) => [name, name.toLowerCase() === "idempotency-key" ? `${value}${suffix}` : value]),
  });
  // A sync's `T` line is the server's clock in seconds, which may tick between the two requests.
  const comparable = (answer: RawAnswer) => {
    const { date: _date, ...headers } = answer.headers;
    return { status: answer.status, headers, body: answer.body.toString().replace(/^T \d+$/m, "T <server time>") };
  };

  it.each(["/v1 JSON bodies and Idempotency-Key values", "badge key=value bodies (check and sync)"])(
    "%s: the same status, headers and body on both",
    async (name) => {
      const target = fixture.targets.find((t) => t.name === name)!;
      let compared = 0;
      await fc.assert(
        fc.asyncProperty(
          target.request.filter((request) => HOT.has(`${request.method} ${request.path}`)),
          async (request) => {
            run++;
            // Express first: when it accepts a write, the same write then conflicts on the hot
            // route, so only refusals (which change nothing) are compared.
            const viaExpress = await sendRaw(expressOnly.url, withKeySuffix(request, `~${run}e`));
            const viaHotRoute = await sendRaw(fixture.url, withKeySuffix(request, `~${run}h`));
            if (viaExpress.status < 300 && request.path === "/v1/attendance") return;
            compared++;
            expect(comparable(viaHotRoute)).toEqual(comparable(viaExpress));
          },
        ),
        { seed: 20261125, numRuns: 250 },
      );
      expect(compared).toBeGreaterThan(100);
    },
    60_000,
  );
});
