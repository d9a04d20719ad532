// The body parsers of /v1 and the badge endpoints (server/http/request-body.ts) read the plain
// case themselves and hand everything else to body-parser. Whatever they read must come out as
// body-parser reads it: the same body, or the same client mistake. Here both parse the same
// generated requests, each behind its own real HTTP server, and their answers are compared.
import http from "node:http";
import type { AddressInfo } from "node:net";
import express from "express";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { clientMistakeOf } from "../../server/http/error-middleware.ts";
import type { Step } from "../../server/http/steps.ts";
import { jsonBody, textBody } from "../../server/http/request-body.ts";
import { sendRaw, type RawRequest } from "./fuzz-http.ts";

const LIMIT = 64;

/** A server that parses with `parser` and answers with what it read, or the client mistake it raised. */
async function parsingServer(parser: Step): Promise<{ url: string; close(): Promise<void> }> {
  const server = http.createServer((req, res) => {
    const answer = (value: unknown) => {
      res.setHeader("Content-Type", "application/json");
      res.end(JSON.stringify(value));
    };
    parser(req, res, (error) => {
      if (error === undefined) answer({ body: req.body === undefined ? "(none)" : req.body });
      else answer({ mistake: clientMistakeOf(error)?.code ?? "not a client mistake" });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

const pick = <T>(...values: T[]) => fc.constantFrom(...values);

const jsonText = fc.oneof(
  fc.json({ maxDepth: 2 }),
  pick("", " ", "\t\n", "{", "[1,", '{"a":1}x', "null", "1", '"s"', "true", ' {"a": 1}', '{"__proto__": {"x": 1}}', '{"a":"\\ud800"}', "{}".padEnd(70, " ")),
);
/** Text as a client might encode it: plain, behind a byte-order mark, cut mid-character, or with stray bytes. */
const bodyBytes = fc.oneof(
  { weight: 4, arbitrary: jsonText.map((text) => Buffer.from(text)) },
  { weight: 1, arbitrary: jsonText.map((text) => Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(text)])) },
  { weight: 1, arbitrary: fc.tuple(jsonText, fc.uint8Array({ maxLength: 4 })).map(([text, bytes]) => Buffer.concat([Buffer.from(text), Buffer.from(bytes)])) },
  { weight: 1, arbitrary: fc.string({ unit: "binary", maxLength: 30 }).map((text) => Buffer.from(text).subarray(1)) },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 80 }).map((bytes) => Buffer.from(bytes)) },
);

function requests(contentTypes: fc.Arbitrary<string | null>): fc.Arbitrary<RawRequest> {
  return fc
    .record({
      type: contentTypes,
      body: fc.option(bodyBytes, { freq: 10 }),
      encoding: fc.option(pick("identity", "gzip", "bogus"), { freq: 8 }),
    })
    .map(({ type, body, encoding }) => ({
      method: "POST",
      path: "/",
      headers: [
        ...(type === null ? [] : [["Content-Type", type] as [string, string]]),
        ...(encoding === null ? [] : [["Content-Encoding", encoding] as [string, string]]),
      ],
      body: body ?? undefined,
    }));
}

const parsers = [
  {
    name: "JSON (/v1)",
    ours: jsonBody(LIMIT),
    bodyParser: express.json({ limit: LIMIT }),
    contentTypes: fc.option(pick("application/json", "application/json; charset=utf-8", "application/json; charset=latin1", "APPLICATION/JSON", "application/json;charset=utf-8", "text/plain", "application/merge-patch+json"), { freq: 8 }),
  },
  {
    name: "text (badge endpoints)",
    ours: textBody(LIMIT),
    bodyParser: express.text({ type: () => true, limit: LIMIT, defaultCharset: "utf-8" }),
    contentTypes: fc.option(pick("text/plain", "text/plain; charset=utf-8", "text/plain; charset=latin1", "text/plain; charset=utf-16le", "text/plain; charset=bogus", "garbage", "", "application/octet-stream"), { freq: 4 }),
  },
];

describe.each(parsers)("the $name body parser", ({ ours, bodyParser, contentTypes }) => {
  let oursServer: Awaited<ReturnType<typeof parsingServer>>;
  let bodyParserServer: Awaited<ReturnType<typeof parsingServer>>;
  beforeAll(async () => {
    oursServer = await parsingServer(ours);
    bodyParserServer = await parsingServer(bodyParser);
  });
  afterAll(async () => {
    await oursServer.close();
    await bodyParserServer.close();
  });

  it("reads every request as body-parser does: the same body, or the same client mistake; refuses any body over the limit", async () => {
    await fc.assert(
      fc.asyncProperty(requests(contentTypes), async (request) => {
        const [mine, theirs] = await Promise.all([sendRaw(oursServer.url, request), sendRaw(bodyParserServer.url, request)]);
        // body-parser leaves a body of another Content-Type unread, and reads a refused one to
        // its end before it answers; a length over the limit is refused before the body is read.
        if ((request.body?.length ?? 0) > LIMIT) expect(mine.body.toString()).toBe('{"mistake":"body_too_large"}');
        else expect(mine.body.toString()).toBe(theirs.body.toString());
      }),
      { seed: 20261125, numRuns: 400 },
    );
  });

  it("reads a plain body itself: a lone byte-order mark, an empty body and one at the limit", async () => {
    for (const body of [Buffer.from([0xef, 0xbb, 0xbf]), Buffer.alloc(0), Buffer.from(`{"a":"${"x".repeat(LIMIT - 8)}"}`)]) {
      const request: RawRequest = { method: "POST", path: "/", headers: [["Content-Type", "application/json"]], body };
      const [mine, theirs] = await Promise.all([sendRaw(oursServer.url, request), sendRaw(bodyParserServer.url, request)]);
      expect(mine.body.toString()).toBe(theirs.body.toString());
    }
  });
});
