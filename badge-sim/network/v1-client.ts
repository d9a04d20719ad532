// The /v1 API as the project's own code calls it (the simulator's fleet view, `sim --server`, the
// demo school): openapi-fetch typed by v1-api-types.ts, which is generated from the OpenAPI
// document, so a route, parameter or answer field the document lacks fails `tsc` here first.
import createClient, { type Client } from "openapi-fetch";
import type { components, paths } from "./v1-api-types.ts";

export type V1Client = Client<paths>;
/** The API's one error body. */
export type V1Error = components["schemas"]["Error"];

/** `fetch` replaces the global one, to check or time the answers before openapi-fetch reads them. */
export function v1Client(serverUrl: string, apiKey: string, fetch?: (request: Request) => Promise<Response>): V1Client {
  return createClient<paths>({ baseUrl: serverUrl, headers: { authorization: `Bearer ${apiKey}` }, ...(fetch ? { fetch } : {}) });
}
