// The /v1 types the project's own clients compile against (badge-sim/network/v1-api-types.ts) are
// what openapi-typescript generates from the current OpenAPI document: a schema changed without
// `npm run api-types` fails here, so the typed client cannot drift from the API it calls.
import fs from "node:fs";
import { describe, expect, it } from "vitest";
import { V1_API_TYPES_FILE, v1ApiTypesSource } from "../../scripts/cli/make-v1-api-types.ts";

describe("the generated /v1 client types", () => {
  it("are what the current OpenAPI document generates (else run `npm run api-types`)", async () => {
    const generated = await v1ApiTypesSource();
    expect(fs.readFileSync(V1_API_TYPES_FILE, "utf8"), "badge-sim/network/v1-api-types.ts is stale: run `npm run api-types` and commit it").toBe(generated);
  });
});
