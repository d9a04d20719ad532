import type { Db } from "./schema.ts";

/** Reads a setting, creating it with `create()` on first use (first writer wins across processes). */
export async function getOrCreateSetting(db: Db, name: string, create: () => string): Promise<string> {
  await db.insertInto("settings").values({ name, value: create() }).onConflict((oc) => oc.column("name").doNothing()).execute();
  const row = await db.selectFrom("settings").select("value").where("name", "=", name).executeTakeFirstOrThrow();
  return row.value;
}
