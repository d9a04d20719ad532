// API keys: `sk_test_...` / `sk_live_...`, shown once at creation and stored hashed (secrets.ts).
import { newId } from "../ids.ts";
import * as keysStore from "../store/api-keys-store.ts";
import type { ChangeFeed } from "../store/change-feed.ts";
import type { Kysely } from "kysely";
import type { Database, Livemode } from "../store/schema.ts";
import { cachedLookup } from "./feed-cache.ts";
import { lookupOf, newSecret, secretMatches } from "./secrets.ts";

export type Mode = "test" | "live";

/** Every scope a key can carry, and what it grants. `*:write` includes the matching read. */
export const SCOPES = {
  "attendance:read": "list and retrieve records, sessions and rolls",
  "attendance:write": "create and correct records (includes attendance:read)",
  "sessions:write": "open, close and cancel sessions (includes attendance:read)",
  "devices:read": "list badges with their firmware state, and the card taps they sent",
  "devices:write": "add badges (their token shown once) and revoke them (includes devices:read)",
  "pipelines:read": "list and read pipelines and their stages through the tool endpoint (/api/mcp)",
  "pipelines:write": "create pipelines and update stages through the tool endpoint (includes pipelines:read)",
  "events:read": "list and retrieve events (GET /v1/events), to catch up after a webhook outage",
  "webhooks:write": "manage webhook endpoints, roll their secrets, send test deliveries and resends, read delivery logs (includes events:read)",
  "releases:read": "list firmware releases with their canary badge and its last report, and staged rollouts",
  "releases:write": "promote a canary release to the fleet, start and move staged rollouts (includes releases:read)",
} as const;

export type Scope = keyof typeof SCOPES;

const IMPLIED: Partial<Record<Scope, Scope[]>> = {
  "attendance:write": ["attendance:read"],
  "sessions:write": ["attendance:read"],
  "pipelines:write": ["pipelines:read"],
  "webhooks:write": ["events:read"],
  "devices:write": ["devices:read"],
  "releases:write": ["releases:read"],
};

export function isScope(value: string): value is Scope {
  return Object.hasOwn(SCOPES, value);
}

export interface Principal {
  keyId: string;
  livemode: Livemode;
  scopes: ReadonlySet<Scope>;
  user: { id: string; name: string };
}

export interface ApiKeyView {
  id: string;
  object: "api_key";
  name: string;
  mode: Mode;
  livemode: boolean;
  scopes: Scope[];
  user: { id: string; name: string };
  secret_hint: string;
  created_at: string;
  revoked_at: string | null;
}

function toView(row: keysStore.ApiKeyRow): ApiKeyView {
  return {
    id: row.id,
    object: "api_key",
    name: row.name,
    mode: row.livemode ? "live" : "test",
    livemode: row.livemode === 1,
    scopes: JSON.parse(row.scopes) as Scope[],
    user: { id: row.user_id, name: row.user_name },
    secret_hint: row.secret_hint,
    created_at: row.created_at,
    revoked_at: row.revoked_at,
  };
}

export class ApiKeyError extends Error {
  override name = "ApiKeyError";
}

export async function createApiKey(
  db: Kysely<Database>,
  input: { mode: Mode; scopes: string[]; name?: string; user?: string },
): Promise<ApiKeyView & { secret: string }> {
  const unknown = input.scopes.filter((s) => !isScope(s));
  if (unknown.length > 0) {
    throw new ApiKeyError(`unknown scope ${unknown.join(", ")}; known scopes: ${Object.keys(SCOPES).join(", ")}`);
  }
  if (input.scopes.length === 0) throw new ApiKeyError("a key needs at least one --scope");
  const now = new Date().toISOString();
  const { secret, lookup, hash, hint } = newSecret(`sk_${input.mode}_`);
  const id = newId("key");
  return db.transaction().execute(async (trx) => {
    const user = await keysStore.findOrCreateUser(trx, input.user ?? "Administrator", () => newId("usr"), now);
    const row = {
      id,
      livemode: (input.mode === "live" ? 1 : 0) as Livemode,
      name: input.name ?? id,
      lookup,
      secret_hash: hash,
      secret_hint: hint,
      scopes: JSON.stringify([...new Set(input.scopes)]),
      user_id: user.id,
      created_at: now,
      revoked_at: null,
    };
    await keysStore.insertApiKey(trx, row);
    return { ...toView({ ...row, user_name: user.name }), secret };
  });
}

export async function listApiKeys(db: Kysely<Database>): Promise<ApiKeyView[]> {
  return (await keysStore.listApiKeys(db)).map(toView);
}

export async function revokeApiKey(db: Kysely<Database>, id: string): Promise<ApiKeyView> {
  const row = await keysStore.revokeApiKey(db, id, new Date().toISOString());
  if (!row) throw new ApiKeyError(`no API key with id ${id}`);
  return toView(row);
}

/** The principal a bearer token stands for, or undefined for an unknown or revoked key. */
async function authenticate(db: Kysely<Database>, token: string): Promise<Principal | undefined> {
  const match = /^sk_(test|live)_/.exec(token);
  if (!match) return undefined;
  const row = await keysStore.findApiKeyByLookup(db, lookupOf(match[0], token));
  if (!row || row.revoked_at !== null) return undefined;
  if (!secretMatches(token, row.secret_hash)) return undefined;
  const scopes = new Set<Scope>();
  for (const scope of JSON.parse(row.scopes) as Scope[]) {
    scopes.add(scope);
    for (const implied of IMPLIED[scope] ?? []) scopes.add(implied);
  }
  return { keyId: row.id, livemode: row.livemode, scopes, user: { id: row.user_id, name: row.user_name } };
}

export type Authenticate = (token: string) => Promise<Principal | undefined>;

/**
 * `authenticate` with recent keys' principals kept in memory (feed-cache.ts): a lookup is a
 * database read plus two hashes, a large share of a small write's cost. A key revoked anywhere
 * (this process, another instance, `badgebench keys revoke`) is refused once the change feed has
 * moved: from the next request on SQLite and on this instance, within the feed's bound elsewhere.
 */
export function cachedAuthenticator(db: Kysely<Database>, changes: ChangeFeed): Authenticate {
  return cachedLookup(changes, (token) => authenticate(db, token));
}
