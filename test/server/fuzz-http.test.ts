// The HTTP interface fuzzed from outside (test/server/fuzz-http.ts): every parser family gets
// generated requests over a real socket; none may get a 5xx, an answer outside its endpoint's
// format, or change a row when refused. A fixed seed and a bounded number of runs keep this
// repeatable and quick; `npx tsx test/server/fuzz-http-run.ts --runs N --seed S` runs it for longer.
import { afterAll, beforeAll, describe, it, expect } from "vitest";
import { fuzzTarget } from "./fuzz-http.ts";
import { startFuzzFixture, type FuzzFixture } from "./fuzz-targets.ts";

const SEED = 20261125;
const RUNS = 300;

let fixture: FuzzFixture;
beforeAll(async () => {
  fixture = await startFuzzFixture();
});
afterAll(() => fixture.close());

const TARGET_NAMES = [
  "/v1 list query strings and cursors",
  "/v1 path ids",
  "/v1 JSON bodies and Idempotency-Key values",
  "badge key=value bodies (check and sync)",
  "badge download v= and paths",
];

describe("the HTTP interface fuzzed from outside", () => {
  it("runs every target fuzz-targets.ts defines (a new one must be listed here)", () => {
    expect(fixture.targets.map((t) => t.name)).toEqual(TARGET_NAMES);
  });

  it.each(TARGET_NAMES)("%s: never a 5xx, always the endpoint's format, a refusal changes nothing", async (name) => {
    const target = fixture.targets.find((t) => t.name === name);
    if (!target) throw new Error(`no fuzz target named ${name}`);
    await fuzzTarget(fixture, target, { seed: SEED, numRuns: RUNS });
  });
});
