// Migrations live in code and run at every start; Kysely's Migrator records which ran. On
// PostgreSQL the Migrator holds an advisory lock (pg_advisory_lock) while it migrates, in one
// transaction, so instances starting at once migrate one after the other and the later ones
// find nothing to do. Column types are chosen to mean the same on SQLite and PostgreSQL
// (columnTypes).
import { type Expression, type Kysely, type Migration, type MigrationResultSet, Migrator, sql } from "kysely";
import { isPostgres } from "./dialect.ts";
import { createReleaseRollouts } from "./rollouts-migration.ts";
import { dropSyncReferences } from "./sync-references-migration.ts";
import { createWebhookModes } from "./webhook-modes-migration.ts";

/**
 * The column types whose spelling differs. Text compares byte by byte on both (SQLite's BINARY
 * collation; "C" on PostgreSQL, whatever the database's default), so keyset orders, ranges and
 * uniqueness agree; a real is 8 bytes on both; a blob is bytea on PostgreSQL.
 */
export function columnTypes(db: Kysely<any>): { text: Expression<unknown> | "text"; real: "real" | "double precision"; blob: "blob" | "bytea" } {
  return isPostgres(db)
    ? { text: sql`text collate "C"`, real: "double precision", blob: "bytea" }
    : { text: "text", real: "real", blob: "blob" };
}

const migrations: Record<string, Migration> = {
  "0001_foundation": {
    async up(db: Kysely<any>) {
      const t = columnTypes(db);
      await db.schema
        .createTable("settings")
        .addColumn("name", t.text, (c) => c.primaryKey())
        .addColumn("value", t.text, (c) => c.notNull())
        .execute();
      await db.schema
        .createTable("users")
        .addColumn("id", t.text, (c) => c.primaryKey())
        .addColumn("name", t.text, (c) => c.notNull().unique())
        .addColumn("created_at", t.text, (c) => c.notNull())
        .execute();
      await db.schema
        .createTable("api_keys")
        .addColumn("id", t.text, (c) => c.primaryKey())
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("name", t.text, (c) => c.notNull())
        .addColumn("lookup", t.text, (c) => c.notNull().unique())
        .addColumn("secret_hash", t.text, (c) => c.notNull())
        .addColumn("secret_hint", t.text, (c) => c.notNull())
        .addColumn("scopes", t.text, (c) => c.notNull())
        .addColumn("user_id", t.text, (c) => c.notNull().references("users.id"))
        .addColumn("created_at", t.text, (c) => c.notNull())
        .addColumn("revoked_at", t.text)
        .execute();
      await db.schema
        .createTable("students")
        .addColumn("id", t.text, (c) => c.primaryKey())
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("external_id", t.text, (c) => c.notNull())
        .addColumn("name", t.text, (c) => c.notNull())
        .addColumn("card_uid", t.text)
        .addUniqueConstraint("students_external_id", ["livemode", "external_id"])
        .execute();
      await db.schema
        .createTable("courses")
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("code", t.text, (c) => c.notNull())
        .addColumn("name", t.text, (c) => c.notNull())
        .addPrimaryKeyConstraint("courses_pk", ["livemode", "code"])
        .execute();
      await db.schema
        .createTable("rooms")
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("code", t.text, (c) => c.notNull())
        .addColumn("name", t.text, (c) => c.notNull())
        .addPrimaryKeyConstraint("rooms_pk", ["livemode", "code"])
        .execute();
      await db.schema
        .createTable("enrollments")
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("course_code", t.text, (c) => c.notNull())
        .addColumn("student_id", t.text, (c) => c.notNull().references("students.id"))
        .addPrimaryKeyConstraint("enrollments_pk", ["livemode", "course_code", "student_id"])
        .execute();
      await db.schema
        .createTable("sessions")
        .addColumn("id", t.text, (c) => c.primaryKey())
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("course_code", t.text, (c) => c.notNull())
        .addColumn("room", t.text, (c) => c.notNull())
        .addColumn("date", t.text, (c) => c.notNull())
        .addColumn("starts_at", t.text, (c) => c.notNull())
        .addColumn("ends_at", t.text, (c) => c.notNull())
        .addColumn("status", t.text, (c) => c.notNull())
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
        .addColumn("id", t.text, (c) => c.primaryKey())
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("room", t.text, (c) => c.notNull())
        .addColumn("model", t.text, (c) => c.notNull())
        .addColumn("name", t.text, (c) => c.notNull())
        .addColumn("created_at", t.text, (c) => c.notNull())
        .execute();
      await db.schema
        .createTable("records")
        .addColumn("id", t.text, (c) => c.primaryKey())
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("session_id", t.text, (c) => c.notNull().references("sessions.id"))
        .addColumn("student_id", t.text, (c) => c.notNull().references("students.id"))
        .addColumn("course_code", t.text, (c) => c.notNull())
        .addColumn("status", t.text, (c) => c.notNull())
        .addColumn("recorded_at", t.text, (c) => c.notNull())
        .addColumn("method", t.text, (c) => c.notNull())
        .addColumn("device_id", t.text, (c) => c.references("devices.id"))
        .addColumn("reason", t.text)
        .addColumn("created_at", t.text, (c) => c.notNull())
        .addColumn("updated_at", t.text, (c) => c.notNull())
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
        .addColumn("id", t.text, (c) => c.primaryKey())
        .addColumn("record_id", t.text, (c) => c.notNull().references("records.id"))
        .addColumn("seq", "integer", (c) => c.notNull())
        .addColumn("at", t.text, (c) => c.notNull())
        .addColumn("from_status", t.text, (c) => c.notNull())
        .addColumn("to_status", t.text, (c) => c.notNull())
        .addColumn("reason", t.text, (c) => c.notNull())
        .addColumn("actor_type", t.text, (c) => c.notNull())
        .addColumn("actor_id", t.text, (c) => c.notNull())
        .addColumn("actor_name", t.text, (c) => c.notNull())
        .execute();
      await db.schema
        .createIndex("record_history_order")
        .on("record_history")
        .columns(["record_id", "seq"])
        .unique()
        .execute();
      await db.schema
        .createTable("events")
        .addColumn("id", t.text, (c) => c.primaryKey())
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("type", t.text, (c) => c.notNull())
        .addColumn("created_at", t.text, (c) => c.notNull())
        .addColumn("payload", t.text, (c) => c.notNull())
        .execute();
      await db.schema
        .createTable("idempotency_keys")
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("key", t.text, (c) => c.notNull())
        .addColumn("fingerprint", t.text, (c) => c.notNull())
        .addColumn("state", t.text, (c) => c.notNull())
        .addColumn("locked_at", t.text, (c) => c.notNull())
        .addColumn("status_code", "integer")
        .addColumn("response_body", t.text)
        .addColumn("created_at", t.text, (c) => c.notNull())
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
      const t = columnTypes(db);
      const deviceColumns: [string, keyof typeof t | "integer"][] = [
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
        await db.schema.alterTable("devices").addColumn(name, type === "integer" ? type : t[type]).execute();
      }
      await db.schema.createIndex("devices_by_token").on("devices").column("token_lookup").unique().execute();
      await db.schema
        .createTable("ota_fetches")
        .addColumn("id", t.text, (c) => c.primaryKey())
        .addColumn("device_id", t.text, (c) => c.notNull().references("devices.id"))
        .addColumn("version", t.text, (c) => c.notNull())
        .addColumn("size", "integer", (c) => c.notNull())
        .addColumn("bytes_sent", "integer", (c) => c.notNull())
        .addColumn("outcome", t.text, (c) => c.notNull())
        .addColumn("started_at", t.text, (c) => c.notNull())
        .addColumn("ended_at", t.text)
        .execute();
      await db.schema.createIndex("ota_fetches_by_device").on("ota_fetches").columns(["device_id", "started_at"]).execute();
      await db.schema
        .createTable("ota_reports")
        .addColumn("id", t.text, (c) => c.primaryKey())
        .addColumn("device_id", t.text, (c) => c.notNull().references("devices.id"))
        .addColumn("version", t.text, (c) => c.notNull())
        .addColumn("outcome", t.text, (c) => c.notNull())
        .addColumn("message", t.text)
        .addColumn("report", t.text, (c) => c.notNull())
        .addColumn("received_at", t.text, (c) => c.notNull())
        .execute();
      await db.schema.createIndex("ota_reports_by_device").on("ota_reports").columns(["device_id", "received_at"]).execute();
      await db.schema
        .createTable("device_taps")
        .addColumn("id", t.text, (c) => c.primaryKey())
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("device_id", t.text, (c) => c.notNull().references("devices.id"))
        .addColumn("card_uid", t.text, (c) => c.notNull())
        .addColumn("tapped_at", t.text, (c) => c.notNull())
        .addColumn("received_at", t.text, (c) => c.notNull())
        .addColumn("result", t.text, (c) => c.notNull())
        .addColumn("reason", t.text)
        .addColumn("session_id", t.text)
        .addColumn("student_id", t.text)
        .addColumn("record_id", t.text)
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
      const t = columnTypes(db);
      await db.schema.alterTable("events").addColumn("dispatched_at", t.text).execute();
      await sql`create index events_undispatched on events (id) where dispatched_at is null`.execute(db);
      await db.schema.createIndex("events_by_time").on("events").columns(["livemode", "created_at", "id"]).execute();
      await db.schema.createIndex("events_by_type").on("events").columns(["livemode", "type", "created_at", "id"]).execute();
      await db.schema
        .createTable("webhook_endpoints")
        .addColumn("id", t.text, (c) => c.primaryKey())
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("url", t.text, (c) => c.notNull())
        .addColumn("description", t.text)
        .addColumn("enabled_events", t.text, (c) => c.notNull())
        .addColumn("status", t.text, (c) => c.notNull())
        .addColumn("disabled_reason", t.text)
        .addColumn("secret", t.text, (c) => c.notNull())
        .addColumn("previous_secret", t.text)
        .addColumn("previous_secret_expires_at", t.text)
        .addColumn("last_success_at", t.text)
        .addColumn("created_at", t.text, (c) => c.notNull())
        .addColumn("updated_at", t.text, (c) => c.notNull())
        .execute();
      await db.schema.createIndex("webhook_endpoints_by_time").on("webhook_endpoints").columns(["livemode", "created_at", "id"]).execute();
      await db.schema
        .createTable("webhook_deliveries")
        .addColumn("endpoint_id", t.text, (c) => c.notNull().references("webhook_endpoints.id").onDelete("cascade"))
        .addColumn("event_id", t.text, (c) => c.notNull().references("events.id"))
        .addColumn("state", t.text, (c) => c.notNull())
        .addColumn("attempts", "integer", (c) => c.notNull())
        .addColumn("next_attempt_at", t.text)
        .addColumn("lease_token", t.text)
        .addColumn("created_at", t.text, (c) => c.notNull())
        .addColumn("updated_at", t.text, (c) => c.notNull())
        .addPrimaryKeyConstraint("webhook_deliveries_pk", ["endpoint_id", "event_id"])
        .execute();
      await sql`create index webhook_deliveries_due on webhook_deliveries (next_attempt_at) where state = 'pending'`.execute(db);
      await sql`create index webhook_deliveries_due_by_endpoint on webhook_deliveries (endpoint_id, next_attempt_at) where state = 'pending'`.execute(db);
      await db.schema
        .createTable("webhook_attempts")
        .addColumn("id", t.text, (c) => c.primaryKey())
        .addColumn("endpoint_id", t.text, (c) => c.notNull().references("webhook_endpoints.id").onDelete("cascade"))
        .addColumn("event_id", t.text, (c) => c.notNull())
        .addColumn("event_type", t.text, (c) => c.notNull())
        .addColumn("kind", t.text, (c) => c.notNull())
        .addColumn("attempted_at", t.text, (c) => c.notNull())
        .addColumn("duration_ms", "integer", (c) => c.notNull())
        .addColumn("status_code", "integer")
        .addColumn("error", t.text)
        .addColumn("response_excerpt", t.text)
        .addColumn("outcome", t.text, (c) => c.notNull())
        .addColumn("next_attempt_at", t.text)
        .execute();
      await db.schema.createIndex("webhook_attempts_by_endpoint").on("webhook_attempts").columns(["endpoint_id", "attempted_at", "id"]).execute();
    },
  },
  // Pipelines and their stages, edited through the tool endpoint (/api/mcp). The folded columns
  // hold the lower-cased name and owner e-mail, so the case-insensitive filters are plain
  // comparisons that mean the same on SQLite and PostgreSQL.
  "0004_pipelines": {
    async up(db: Kysely<any>) {
      const t = columnTypes(db);
      await db.schema
        .createTable("pipelines")
        .addColumn("id", t.text, (c) => c.primaryKey())
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("name", t.text, (c) => c.notNull())
        .addColumn("name_folded", t.text, (c) => c.notNull())
        .addColumn("overview", t.text, (c) => c.notNull())
        .addColumn("owner_email", t.text, (c) => c.notNull())
        .addColumn("owner_email_folded", t.text, (c) => c.notNull())
        .addColumn("created_at", t.text, (c) => c.notNull())
        .execute();
      await db.schema.createIndex("pipelines_by_creation").on("pipelines").columns(["livemode", "created_at", "id"]).execute();
      await db.schema
        .createIndex("pipelines_by_owner")
        .on("pipelines")
        .columns(["livemode", "owner_email_folded", "created_at", "id"])
        .execute();
      await db.schema
        .createTable("stages")
        .addColumn("id", t.text, (c) => c.primaryKey())
        .addColumn("pipeline_id", t.text, (c) => c.notNull().references("pipelines.id"))
        .addColumn("position", "integer", (c) => c.notNull())
        .addColumn("title", t.text, (c) => c.notNull())
        .addColumn("goal", t.text, (c) => c.notNull())
        .addColumn("priority", t.text, (c) => c.notNull())
        .addColumn("due_date", t.text)
        .addColumn("status", t.text, (c) => c.notNull())
        .addColumn("created_at", t.text, (c) => c.notNull())
        .addUniqueConstraint("stages_order", ["pipeline_id", "position"])
        .execute();
      await db.schema.createIndex("stages_by_status").on("stages").columns(["pipeline_id", "status"]).execute();
    },
  },
  // The database release store (server/releases/database-release-store.ts), used with
  // PostgreSQL so instances on several machines share releases without a shared disk. Images are
  // only ever inserted; the manifest is one row (id 1) replaced in a transaction, with a fresh
  // revision each time; no row is the empty manifest.
  "0005_releases": {
    async up(db: Kysely<any>) {
      const t = columnTypes(db);
      await db.schema
        .createTable("release_images")
        .addColumn("file", t.text, (c) => c.primaryKey())
        .addColumn("sha256", t.text, (c) => c.notNull())
        .addColumn("size", "integer", (c) => c.notNull())
        .addColumn("body", t.blob, (c) => c.notNull())
        .addColumn("created_at", t.text, (c) => c.notNull())
        .execute();
      await db.schema
        .createTable("release_manifest")
        .addColumn("id", "integer", (c) => c.primaryKey().check(sql`id = 1`))
        .addColumn("revision", t.text, (c) => c.notNull())
        .addColumn("body", t.text, (c) => c.notNull())
        .addColumn("updated_at", t.text, (c) => c.notNull())
        .execute();
    },
  },
  // Record indexes that no query reads. 0001 gave the records list one index per filter
  // (course, student, status), but SQLite plans the list's query (server/store/attendance-store.ts
  // listRecords, parameters bound, no statistics gathered) on records_by_time whatever the filter,
  // as EXPLAIN QUERY PLAN shows, and nothing else reads them. Each still cost every insert a page
  // write, records_by_student a page per row (student ids arrive in no order): with them, a badge
  // sync's commit wrote about twice the log it writes now.
  "0006_unread_record_indexes": {
    async up(db: Kysely<any>) {
      for (const name of ["records_by_course", "records_by_student", "records_by_status"]) {
        await db.schema.dropIndex(name).execute();
      }
    },
  },
  // When an endpoint was last enabled (at its creation, or a PATCH {"disabled": false} after a
  // disable): it receives the events committed from then on. The fan-out may run well after an
  // event's commit (while requests keep the server busy), so whether the endpoint was enabled
  // when the event happened cannot be read off its status at fan-out time.
  "0007_endpoint_enabled_at": {
    async up(db: Kysely<any>) {
      const t = columnTypes(db);
      await db.schema.alterTable("webhook_endpoints").addColumn("enabled_at", t.text, (c) => c.notNull().defaultTo("")).execute();
      await db.updateTable("webhook_endpoints").set({ enabled_at: sql.ref("created_at") }).execute();
    },
  },
  // Idempotency-Keys belong to the API key that sent them (issue 28): another key repeating the
  // value gets its own execution, not the first key's stored answer. The stored answers are
  // dropped, not carried over: which key stored each is unknown, and those that revealed a
  // signing secret hold it in clear (answers stored from now on withhold it). At most 24 hours
  // of retries are affected: a retry of a write made before the upgrade runs again (an attendance
  // create is then refused as record_exists).
  "0008_idempotency_per_api_key": {
    async up(db: Kysely<any>) {
      const t = columnTypes(db);
      await db.schema.dropTable("idempotency_keys").execute();
      await db.schema
        .createTable("idempotency_keys")
        .addColumn("livemode", "integer", (c) => c.notNull())
        .addColumn("api_key_id", t.text, (c) => c.notNull())
        .addColumn("key", t.text, (c) => c.notNull())
        .addColumn("fingerprint", t.text, (c) => c.notNull())
        .addColumn("state", t.text, (c) => c.notNull())
        .addColumn("locked_at", t.text, (c) => c.notNull())
        .addColumn("status_code", "integer")
        .addColumn("response_body", t.text)
        .addColumn("withheld", t.text)
        .addColumn("created_at", t.text, (c) => c.notNull())
        .addPrimaryKeyConstraint("idempotency_keys_pk", ["livemode", "api_key_id", "key"])
        .execute();
      await db.schema.createIndex("idempotency_keys_by_age").on("idempotency_keys").column("created_at").execute();
    },
  },
  // Releases per mode (issue 28): one manifest row per mode, keyed by livemode. The one manifest
  // there was becomes the live one: it was published by the operator's command for the real
  // fleet, and live badges must keep being offered what they were offered; test badges see no
  // release until one is published in test mode. (The file store needs no migration: live keeps
  // <data>/releases.)
  "0009_release_modes": {
    async up(db: Kysely<any>) {
      const t = columnTypes(db);
      await db.schema
        .createTable("release_manifests")
        .addColumn("livemode", "integer", (c) => c.primaryKey().check(sql`livemode in (0, 1)`))
        .addColumn("revision", t.text, (c) => c.notNull())
        .addColumn("body", t.text, (c) => c.notNull())
        .addColumn("updated_at", t.text, (c) => c.notNull())
        .execute();
      await db
        .insertInto("release_manifests")
        .columns(["livemode", "revision", "body", "updated_at"])
        .expression(db.selectFrom("release_manifest").select([sql.lit(1).as("livemode"), "revision", "body", "updated_at"]))
        .execute();
      await db.schema.dropTable("release_manifest").execute();
    },
  },
  // Staged rollouts (issue 24): the table is in rollouts-migration.ts, which says why.
  "0010_release_rollouts": { up: (db: Kysely<any>) => createReleaseRollouts(db, columnTypes(db)) },
  // The bytes a fetch served (issue 23): a badge resuming a cut download asks for a range. A
  // fetch from before this migration was always the whole image, 0 to size - 1.
  "0011_fetch_ranges": {
    async up(db: Kysely<any>) {
      await db.schema.alterTable("ota_fetches").addColumn("first_byte", "integer", (c) => c.notNull().defaultTo(0)).execute();
      await db.schema.alterTable("ota_fetches").addColumn("last_byte", "integer", (c) => c.notNull().defaultTo(-1)).execute();
      await db.updateTable("ota_fetches").set({ last_byte: sql`size - 1` }).execute();
    },
  },
  // Whether each mode has an enabled webhook endpoint (issue 27): webhook-modes-migration.ts says why.
  "0012_webhook_modes": { up: (db: Kysely<any>) => createWebhookModes(db) },
  // The foreign keys of a sync's rows, which could never fail, dropped on PostgreSQL (issue 27): sync-references-migration.ts says why.
  "0013_sync_references": { up: (db: Kysely<any>) => dropSyncReferences(db) },
};

/** Migrations the database has run that this code does not have: a newer badgebench wrote it. */
export async function migrationsUnknownHere(db: Kysely<any>): Promise<string[]> {
  const tables = await db.introspection.getTables({ withInternalKyselyTables: true });
  if (!tables.some((table) => table.name === "kysely_migration")) return [];
  const ran = await db.selectFrom("kysely_migration").select("name").execute();
  return ran.map((row) => row.name as string).filter((name) => !Object.hasOwn(migrations, name));
}

export function migrateToLatest(db: Kysely<any>): Promise<void> {
  return migrate(db, (migrator) => migrator.migrateToLatest());
}

/** Runs the migrations up to and including `name`: how a test writes data as an older version kept it. */
export function migrateTo(db: Kysely<any>, name: string): Promise<void> {
  return migrate(db, (migrator) => migrator.migrateTo(name));
}

async function migrate(db: Kysely<any>, run: (migrator: Migrator) => Promise<MigrationResultSet>): Promise<void> {
  const migrator = new Migrator({
    db,
    provider: { getMigrations: async () => migrations },
  });
  const { error, results } = await run(migrator);
  if (error) {
    const failed = results?.find((r) => r.status === "Error")?.migrationName ?? "unknown";
    throw new Error(`database migration ${failed} failed: ${(error as Error).message}`, { cause: error });
  }
}
