// Migrations live in code and run at every start; Kysely's Migrator records which ran.
// Column types are chosen to mean the same on SQLite and PostgreSQL.
import { type Kysely, type Migration, Migrator, sql } from "kysely";

const migrations: Record<string, Migration> = {
  "0001_foundation": {
    async up(db: Kysely<any>) {
      await db.schema
        .createTable("settings")
        .addColumn("name", "text", (c) => c.primaryKey())
        .addColumn("value", "text", (c) => c.notNull())
        .execute();
      await db.schema
        .createTable("users")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("name", "text", (c) => c.notNull().unique())
        .addColumn("created_at", "text", (c) => c.notNull())
        .execute();
      await db.schema
        .createTable("api_keys")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("name", "text", (c) => c.notNull())
        .addColumn("lookup", "text", (c) => c.notNull().unique())
        .addColumn("secret_hash", "text", (c) => c.notNull())
        .addColumn("secret_hint", "text", (c) => c.notNull())
        .addColumn("scopes", "text", (c) => c.notNull())
        .addColumn("user_id", "text", (c) => c.notNull().references("users.id"))
        .addColumn("created_at", "text", (c) => c.notNull())
        .addColumn("revoked_at", "text")
        .execute();
      await db.schema
        .createTable("students")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("external_id", "text", (c) => c.notNull())
        .addColumn("name", "text", (c) => c.notNull())
        .addColumn("card_uid", "text")
        .addUniqueConstraint("students_external_id", ["livemode", "external_id"])
        .execute();
      await db.schema
        .createTable("courses")
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("code", "text", (c) => c.notNull())
        .addColumn("name", "text", (c) => c.notNull())
        .addPrimaryKeyConstraint("courses_pk", ["livemode", "code"])
        .execute();
      await db.schema
        .createTable("rooms")
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("code", "text", (c) => c.notNull())
        .addColumn("name", "text", (c) => c.notNull())
        .addPrimaryKeyConstraint("rooms_pk", ["livemode", "code"])
        .execute();
      await db.schema
        .createTable("enrollments")
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("course_code", "text", (c) => c.notNull())
        .addColumn("student_id", "text", (c) => c.notNull().references("students.id"))
        .addPrimaryKeyConstraint("enrollments_pk", ["livemode", "course_code", "student_id"])
        .execute();
      await db.schema
        .createTable("sessions")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("course_code", "text", (c) => c.notNull())
        .addColumn("room", "text", (c) => c.notNull())
        .addColumn("date", "text", (c) => c.notNull())
        .addColumn("starts_at", "text", (c) => c.notNull())
        .addColumn("ends_at", "text", (c) => c.notNull())
        .addColumn("status", "text", (c) => c.notNull())
        .addUniqueConstraint("sessions_natural_key", ["livemode", "course_code", "starts_at"])
        .execute();
      await db.schema
        .createIndex("sessions_by_start")
        .on("sessions")
        .columns(["livemode", "starts_at", "id"])
        .execute();
      await db.schema
        .createIndex("sessions_by_date")
        .on("sessions")
        .columns(["livemode", "date", "starts_at", "id"])
        .execute();
      await db.schema
        .createTable("devices")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("room", "text", (c) => c.notNull())
        .addColumn("model", "text", (c) => c.notNull())
        .addColumn("name", "text", (c) => c.notNull())
        .addColumn("created_at", "text", (c) => c.notNull())
        .execute();
      await db.schema
        .createTable("records")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("session_id", "text", (c) => c.notNull().references("sessions.id"))
        .addColumn("student_id", "text", (c) => c.notNull().references("students.id"))
        .addColumn("course_code", "text", (c) => c.notNull())
        .addColumn("status", "text", (c) => c.notNull())
        .addColumn("recorded_at", "text", (c) => c.notNull())
        .addColumn("method", "text", (c) => c.notNull())
        .addColumn("device_id", "text", (c) => c.references("devices.id"))
        .addColumn("reason", "text")
        .addColumn("created_at", "text", (c) => c.notNull())
        .addColumn("updated_at", "text", (c) => c.notNull())
        .addUniqueConstraint("records_one_per_student_session", ["session_id", "student_id"])
        .execute();
      // One index per list filter, each ending in the keyset order (recorded_at, id).
      const recordIndexes: Record<string, string[]> = {
        records_by_time: ["livemode", "recorded_at", "id"],
        records_by_course: ["livemode", "course_code", "recorded_at", "id"],
        records_by_student: ["livemode", "student_id", "recorded_at", "id"],
        records_by_status: ["livemode", "status", "recorded_at", "id"],
      };
      for (const [name, columns] of Object.entries(recordIndexes)) {
        await db.schema.createIndex(name).on("records").columns(columns).execute();
      }
      await db.schema
        .createTable("record_history")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("record_id", "text", (c) => c.notNull().references("records.id"))
        .addColumn("seq", "integer", (c) => c.notNull())
        .addColumn("at", "text", (c) => c.notNull())
        .addColumn("from_status", "text", (c) => c.notNull())
        .addColumn("to_status", "text", (c) => c.notNull())
        .addColumn("reason", "text", (c) => c.notNull())
        .addColumn("actor_type", "text", (c) => c.notNull())
        .addColumn("actor_id", "text", (c) => c.notNull())
        .addColumn("actor_name", "text", (c) => c.notNull())
        .execute();
      await db.schema
        .createIndex("record_history_order")
        .on("record_history")
        .columns(["record_id", "seq"])
        .unique()
        .execute();
      await db.schema
        .createTable("events")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("type", "text", (c) => c.notNull())
        .addColumn("created_at", "text", (c) => c.notNull())
        .addColumn("payload", "text", (c) => c.notNull())
        .execute();
      await db.schema
        .createTable("idempotency_keys")
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("key", "text", (c) => c.notNull())
        .addColumn("fingerprint", "text", (c) => c.notNull())
        .addColumn("state", "text", (c) => c.notNull())
        .addColumn("locked_at", "text", (c) => c.notNull())
        .addColumn("status_code", "integer")
        .addColumn("response_body", "text")
        .addColumn("created_at", "text", (c) => c.notNull())
        .addPrimaryKeyConstraint("idempotency_keys_pk", ["livemode", "key"])
        .execute();
      await db.schema
        .createIndex("idempotency_keys_by_age")
        .on("idempotency_keys")
        .column("created_at")
        .execute();
    },
  },
  // Badges: device tokens and what each badge last said, firmware fetches, outcome reports and
  // card taps. The devices table was created empty in 0001; no rows exist to backfill.
  "0002_badges": {
    async up(db: Kysely<any>) {
      const deviceColumns: [string, "text" | "integer" | "real"][] = [
        ["token_lookup", "text"],
        ["token_hash", "text"],
        ["token_hint", "text"],
        ["revoked_at", "text"],
        ["installed_version", "text"],
        ["installed_display", "text"],
        ["battery_volts", "real"],
        ["charging", "integer"],
        ["last_check_at", "text"],
        ["last_sync_at", "text"],
        ["offered_version", "text"],
        ["offered_at", "text"],
      ];
      for (const [name, type] of deviceColumns) {
        await db.schema.alterTable("devices").addColumn(name, type).execute();
      }
      await db.schema.createIndex("devices_by_token").on("devices").column("token_lookup").unique().execute();
      await db.schema
        .createTable("ota_fetches")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("device_id", "text", (c) => c.notNull().references("devices.id"))
        .addColumn("version", "text", (c) => c.notNull())
        .addColumn("size", "integer", (c) => c.notNull())
        .addColumn("bytes_sent", "integer", (c) => c.notNull())
        .addColumn("outcome", "text", (c) => c.notNull())
        .addColumn("started_at", "text", (c) => c.notNull())
        .addColumn("ended_at", "text")
        .execute();
      await db.schema.createIndex("ota_fetches_by_device").on("ota_fetches").columns(["device_id", "started_at"]).execute();
      await db.schema
        .createTable("ota_reports")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("device_id", "text", (c) => c.notNull().references("devices.id"))
        .addColumn("version", "text", (c) => c.notNull())
        .addColumn("outcome", "text", (c) => c.notNull())
        .addColumn("message", "text")
        .addColumn("report", "text", (c) => c.notNull())
        .addColumn("received_at", "text", (c) => c.notNull())
        .execute();
      await db.schema.createIndex("ota_reports_by_device").on("ota_reports").columns(["device_id", "received_at"]).execute();
      await db.schema
        .createTable("device_taps")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("device_id", "text", (c) => c.notNull().references("devices.id"))
        .addColumn("card_uid", "text", (c) => c.notNull())
        .addColumn("tapped_at", "text", (c) => c.notNull())
        .addColumn("received_at", "text", (c) => c.notNull())
        .addColumn("result", "text", (c) => c.notNull())
        .addColumn("reason", "text")
        .addColumn("session_id", "text")
        .addColumn("student_id", "text")
        .addColumn("record_id", "text")
        // A replayed sync carries the same taps: the badge, the card and the second identify one.
        .addUniqueConstraint("device_taps_once", ["device_id", "card_uid", "tapped_at"])
        .execute();
      await db.schema.createIndex("device_taps_by_result").on("device_taps").columns(["livemode", "result", "id"]).execute();
      await db.schema.createIndex("students_by_card").on("students").columns(["livemode", "card_uid"]).execute();
      await db.schema.createIndex("sessions_by_room").on("sessions").columns(["livemode", "room", "starts_at"]).execute();
    },
  },
  // Webhooks: endpoints, one delivery row per (event, endpoint) holding its schedule and lease,
  // and the log of every attempt. Events get `dispatched_at`: null until the delivery worker
  // has fanned the event out to the endpoints, so the worker finds new events through a small
  // partial index instead of a cursor that a late commit could slip behind.
  "0003_webhooks": {
    async up(db: Kysely<any>) {
      await db.schema.alterTable("events").addColumn("dispatched_at", "text").execute();
      await sql`create index events_undispatched on events (id) where dispatched_at is null`.execute(db);
      await db.schema.createIndex("events_by_time").on("events").columns(["livemode", "created_at", "id"]).execute();
      await db.schema.createIndex("events_by_type").on("events").columns(["livemode", "type", "created_at", "id"]).execute();
      await db.schema
        .createTable("webhook_endpoints")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("url", "text", (c) => c.notNull())
        .addColumn("description", "text")
        .addColumn("enabled_events", "text", (c) => c.notNull())
        .addColumn("status", "text", (c) => c.notNull())
        .addColumn("disabled_reason", "text")
        .addColumn("secret", "text", (c) => c.notNull())
        .addColumn("previous_secret", "text")
        .addColumn("previous_secret_expires_at", "text")
        .addColumn("last_success_at", "text")
        .addColumn("created_at", "text", (c) => c.notNull())
        .addColumn("updated_at", "text", (c) => c.notNull())
        .execute();
      await db.schema.createIndex("webhook_endpoints_by_time").on("webhook_endpoints").columns(["livemode", "created_at", "id"]).execute();
      await db.schema
        .createTable("webhook_deliveries")
        .addColumn("endpoint_id", "text", (c) => c.notNull().references("webhook_endpoints.id").onDelete("cascade"))
        .addColumn("event_id", "text", (c) => c.notNull().references("events.id"))
        .addColumn("state", "text", (c) => c.notNull())
        .addColumn("attempts", "integer", (c) => c.notNull())
        .addColumn("next_attempt_at", "text")
        .addColumn("lease_token", "text")
        .addColumn("created_at", "text", (c) => c.notNull())
        .addColumn("updated_at", "text", (c) => c.notNull())
        .addPrimaryKeyConstraint("webhook_deliveries_pk", ["endpoint_id", "event_id"])
        .execute();
      await sql`create index webhook_deliveries_due on webhook_deliveries (next_attempt_at) where state = 'pending'`.execute(db);
      await sql`create index webhook_deliveries_due_by_endpoint on webhook_deliveries (endpoint_id, next_attempt_at) where state = 'pending'`.execute(db);
      await db.schema
        .createTable("webhook_attempts")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("endpoint_id", "text", (c) => c.notNull().references("webhook_endpoints.id").onDelete("cascade"))
        .addColumn("event_id", "text", (c) => c.notNull())
        .addColumn("event_type", "text", (c) => c.notNull())
        .addColumn("kind", "text", (c) => c.notNull())
        .addColumn("attempted_at", "text", (c) => c.notNull())
        .addColumn("duration_ms", "integer", (c) => c.notNull())
        .addColumn("status_code", "integer")
        .addColumn("error", "text")
        .addColumn("response_excerpt", "text")
        .addColumn("outcome", "text", (c) => c.notNull())
        .addColumn("next_attempt_at", "text")
        .execute();
      await db.schema.createIndex("webhook_attempts_by_endpoint").on("webhook_attempts").columns(["endpoint_id", "attempted_at", "id"]).execute();
    },
  },
  // Pipelines and their stages, edited through the tool endpoint (/api/mcp). The folded columns
  // hold the lower-cased name and owner e-mail, so the case-insensitive filters are plain
  // comparisons that mean the same on SQLite and PostgreSQL.
  "0004_pipelines": {
    async up(db: Kysely<any>) {
      await db.schema
        .createTable("pipelines")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("name", "text", (c) => c.notNull())
        .addColumn("name_folded", "text", (c) => c.notNull())
        .addColumn("overview", "text", (c) => c.notNull())
        .addColumn("owner_email", "text", (c) => c.notNull())
        .addColumn("owner_email_folded", "text", (c) => c.notNull())
        .addColumn("created_at", "text", (c) => c.notNull())
        .execute();
      await db.schema.createIndex("pipelines_by_creation").on("pipelines").columns(["livemode", "created_at", "id"]).execute();
      await db.schema
        .createIndex("pipelines_by_owner")
        .on("pipelines")
        .columns(["livemode", "owner_email_folded", "created_at", "id"])
        .execute();
      await db.schema
        .createTable("stages")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("pipeline_id", "text", (c) => c.notNull().references("pipelines.id"))
        .addColumn("position", "integer", (c) => c.notNull())
        .addColumn("title", "text", (c) => c.notNull())
        .addColumn("goal", "text", (c) => c.notNull())
        .addColumn("priority", "text", (c) => c.notNull())
        .addColumn("due_date", "text")
        .addColumn("status", "text", (c) => c.notNull())
        .addColumn("created_at", "text", (c) => c.notNull())
        .addUniqueConstraint("stages_order", ["pipeline_id", "position"])
        .execute();
      await db.schema.createIndex("stages_by_status").on("stages").columns(["pipeline_id", "status"]).execute();
    },
  },
};

export async function migrateToLatest(db: Kysely<any>): Promise<void> {
  const migrator = new Migrator({
    db,
    provider: { getMigrations: async () => migrations },
  });
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
    const failed = results?.find((r) => r.status === "Error")?.migrationName ?? "unknown";
    throw new Error(`database migration ${failed} failed: ${(error as Error).message}`, { cause: error });
  }
}
