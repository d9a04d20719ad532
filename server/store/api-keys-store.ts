import { announceChange } from "./change-feed.ts";
import { compiledQuery } from "./compiled-query.ts";
import type { ApiKeysTable, Db } from "./schema.ts";

export interface ApiKeyRow extends ApiKeysTable {
  user_name: string;
}

export async function findOrCreateUser(db: Db, name: string, newUserId: () => string, now: string) {
  const existing = await db.selectFrom("users").select(["id", "name"]).where("name", "=", name).executeTakeFirst();
  if (existing) return existing;
  const user = { id: newUserId(), name, created_at: now };
  await db.insertInto("users").values(user).execute();
  return { id: user.id, name: user.name };
}

export async function insertApiKey(db: Db, row: ApiKeysTable): Promise<void> {
  await db.insertInto("api_keys").values(row).execute();
}

const withUser = (db: Db) =>
  db
    .selectFrom("api_keys")
    .innerJoin("users", "users.id", "api_keys.user_id")
    .selectAll("api_keys")
    .select("users.name as user_name");

const byLookup = compiledQuery((db: Db, lookup: string) => withUser(db).where("api_keys.lookup", "=", lookup));

export async function findApiKeyByLookup(db: Db, lookup: string): Promise<ApiKeyRow | undefined> {
  return (await byLookup(db, lookup)).rows[0];
}

export async function listApiKeys(db: Db): Promise<ApiKeyRow[]> {
  return withUser(db).orderBy("api_keys.created_at").orderBy("api_keys.id").execute();
}

/** Revokes the key; every server's cached principals are emptied (change-feed.ts). */
export async function revokeApiKey(db: Db, id: string, now: string): Promise<ApiKeyRow | undefined> {
  return announceChange(db, async (trx) => {
    await trx.updateTable("api_keys").set({ revoked_at: now }).where("id", "=", id).where("revoked_at", "is", null).execute();
    return withUser(trx).where("api_keys.id", "=", id).executeTakeFirst();
  });
}

