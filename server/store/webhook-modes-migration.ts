// Migration 0012 (issue 27): whether each mode has an enabled webhook endpoint, one row per mode
// that always exists. Apart from migrations.ts, which would otherwise pass 500 lines;
// migrations.ts lists it under its name like the others. A write of events reads (and on
// PostgreSQL share-locks) its mode's row and writes the events dispatched when there is none, so
// the delivery worker rewrites no event nobody receives. Every endpoint write locks the row first
// and sets it from the endpoints after (webhooks-store.ts: lockEndpointMode, refreshEndpointMode).
import type { Kysely } from "kysely";

/** Creates the table with its two rows, set from the endpoints the database has. */
export async function createWebhookModes(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("webhook_modes")
    .addColumn("livemode", "integer", (c) => c.primaryKey())
    .addColumn("has_enabled_endpoint", "integer", (c) => c.notNull())
    .execute();
  for (const livemode of [0, 1]) {
    const enabled = await db.selectFrom("webhook_endpoints").select("id").where("livemode", "=", livemode).where("status", "=", "enabled").limit(1).execute();
    await db.insertInto("webhook_modes").values({ livemode, has_enabled_endpoint: enabled.length > 0 ? 1 : 0 }).execute();
  }
}
