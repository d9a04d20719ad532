// A badgebench server at a URL (`sim run|fleet --server URL`), set up through its /v1 API with
// the user's API key, so it may run on another machine. The key must be a test-mode key: what a
// simulation adds lives in test mode, where no live badge, live fleet count or live webhook sees
// it, and close() revokes every device the run added. The run makes no API key of its own.
import { randomUUID } from "node:crypto";
import { UnreachableError } from "../../badge-sim/network/unreachable.ts";
import { v1Client, type V1Error } from "../../badge-sim/network/v1-client.ts";
import { EXIT } from "../cli/exit-codes.ts";
import { SimSetupError } from "./sim-server.ts";

export const DEFAULT_SERVER_TIMEOUT_MS = 10_000;
/** Devices added at once: enough to set up 10,000 badges in seconds, few enough not to crowd the server. */
const PARALLEL_WRITES = 16;
const KEY_HINT = "badgebench keys create --mode test --scope devices:write --scope releases:read";

/** A URL that answered, but not as a badgebench server (an HTML page, another service). */
export class NotBadgebenchServerError extends Error {
  override name = "NotBadgebenchServerError";
}

/** The releases a server has published, oldest first, and the one its fleet is offered. */
export interface ServerReleases {
  versions: string[];
  fleet: string | null;
  /** bytes of the fleet release's image */
  fleetSize: number | null;
}

export interface RemoteServer {
  url: string;
  /** the user's key: `devices:write` (which includes the `devices:read` the fleet view needs) */
  apiKey: string;
  releases(): Promise<ServerReleases>;
  addDevice(name: string): Promise<{ id: string; token: string }>;
  revokeDevice(id: string): Promise<void>;
  /** revokes every device this run added and has not revoked yet */
  close(): Promise<void>;
}

export interface RemoteServerOptions {
  url: string;
  /** --key, else BADGEBENCH_API_KEY */
  key: string | undefined;
  /** the test-mode room the run's devices hang in */
  room: string;
  timeoutMs?: number;
}

/** Checks the URL, the key and that the server answers as badgebench does, before anything is added. */
export async function connectRemoteServer(options: RemoteServerOptions): Promise<RemoteServer> {
  const url = serverUrl(options.url);
  const key = options.key;
  if (!key) throw new SimSetupError(`--server needs an API key: --key KEY or BADGEBENCH_API_KEY (make one with \`${KEY_HINT}\`)`);
  if (!key.startsWith("sk_test_")) {
    throw new SimSetupError(`--key must be a test-mode key (sk_test_...): a simulation never touches live badges, counts or webhooks (make one with \`${KEY_HINT}\`)`);
  }
  const timeoutMs = options.timeoutMs ?? DEFAULT_SERVER_TIMEOUT_MS;
  const api = v1Client(url, key, (request) => badgebenchAnswer(url, request, timeoutMs));
  /** The answer's body, or the one line a user can act on for the API's error. */
  const answered = <T>(what: string, result: { data?: T; error?: V1Error; response: Response }): T => {
    const { data, error, response } = result;
    if (data !== undefined) return data;
    const apiError = error?.error;
    if (response.status === 401) throw new SimSetupError(`the server at ${url} refused the API key: ${apiError?.message} (make one with \`${KEY_HINT}\`)`);
    if (response.status === 403) throw new SimSetupError(`the API key lacks a scope at ${url}: ${apiError?.message} (make one with \`${KEY_HINT}\`)`);
    if (apiError?.code === "room_unknown") {
      throw new SimSetupError(`the server at ${url} has no room ${options.room} in test mode: give --room one of its test-mode rooms, or import one`);
    }
    throw new SimSetupError(`the server at ${url} answered ${what} with ${response.status} ${apiError?.code}: ${apiError?.message}`, EXIT.failed);
  };

  const releases = async (): Promise<ServerReleases> => {
    const list = answered("GET /v1/releases", await api.GET("/v1/releases"));
    if (!Array.isArray(list.data)) throw new NotBadgebenchServerError(`${url} is not a badgebench server: GET /v1/releases answered no release list`);
    const newestFirst = list.data;
    const fleet = list.fleet ?? null;
    return { versions: newestFirst.map((r) => r.version).reverse(), fleet, fleetSize: newestFirst.find((r) => r.version === fleet)?.size ?? null };
  };
  await releases();

  const added = new Set<string>();
  // Each add's Idempotency-Key: this run and the add's number, never the device's name, which two
  // scenarios may share: a second add under the first one's key would be answered by its replay,
  // the first device, without its token.
  const run = randomUUID();
  let adds = 0;
  const revokeDevice = async (id: string) => {
    answered(`POST /v1/devices/${id}/revoke`, await api.POST("/v1/devices/{id}/revoke", { params: { path: { id } } }));
    added.delete(id);
  };
  return {
    url,
    apiKey: key,
    releases,
    async addDevice(name) {
      const headers = { "Idempotency-Key": `badgebench sim ${run} ${++adds}` };
      const device = answered("POST /v1/devices", await api.POST("/v1/devices", { params: { header: headers }, body: { room: options.room, model: "virtual-badge", name } }));
      added.add(device.id);
      // only a replay withholds the token, and each add has a key of its own
      if (device.token === null) throw new Error(`POST /v1/devices for ${name} was answered without the device's token`);
      return { id: device.id, token: device.token };
    },
    revokeDevice,
    async close() {
      await inBatches([...added], PARALLEL_WRITES, revokeDevice);
    },
  };
}

/**
 * What openapi-fetch reads: the server's answer once it is known to be badgebench's JSON (an
 * answer, or an error in the API's one shape); anything else is a URL that is not a badgebench
 * server, and no answer at all an unreachable one.
 */
async function badgebenchAnswer(url: string, request: Request, timeoutMs: number): Promise<Response> {
  let response: Response;
  let text: string;
  try {
    response = await fetch(request, { signal: AbortSignal.timeout(timeoutMs) });
    text = await response.text();
  } catch (error) {
    throw new UnreachableError(url, error);
  }
  const answer = jsonObject(text);
  const apiError = answer?.error as { code?: unknown } | undefined;
  if (!(response.headers.get("content-type") ?? "").includes("application/json") || answer === null || (!response.ok && typeof apiError?.code !== "string")) {
    const route = new URL(request.url).pathname;
    throw new NotBadgebenchServerError(`${url} is not a badgebench server: ${request.method} ${route} answered HTTP ${response.status} ${response.headers.get("content-type") ?? "without a content type"}`);
  }
  return new Response(text, { status: response.status, statusText: response.statusText, headers: response.headers });
}

/** Runs `work` over `items`, `parallel` at a time; the results in the items' order. */
export async function inBatches<T, R>(items: T[], parallel: number, work: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const results: R[] = [];
  for (let first = 0; first < items.length; first += parallel) {
    results.push(...(await Promise.all(items.slice(first, first + parallel).map((item, i) => work(item, first + i)))));
  }
  return results;
}

/** The URL without a trailing slash; anything but an http(s) URL is a usage mistake. */
function serverUrl(given: string): string {
  let parsed: URL;
  try {
    parsed = new URL(given);
  } catch {
    throw new SimSetupError(`--server must be a URL like http://127.0.0.1:3000, got '${given}'`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw new SimSetupError(`--server must be an http:// or https:// URL, got '${given}'`);
  return given.replace(/\/+$/, "");
}

function jsonObject(text: string): Record<string, unknown> | null {
  try {
    const value = JSON.parse(text) as unknown;
    return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}
