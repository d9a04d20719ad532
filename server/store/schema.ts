// Row types of every table, as Kysely sees them. Booleans are stored as 0/1 integers and
// timestamps as fixed-width ISO 8601 UTC text, so the same queries sort and compare the same
// way on SQLite and PostgreSQL.
import type { Kysely, Transaction } from "kysely";

export type Livemode = 0 | 1;

export interface UsersTable {
  id: string;
  name: string;
  created_at: string;
}

export interface ApiKeysTable {
  id: string;
  livemode: Livemode;
  name: string;
  lookup: string;
  secret_hash: string;
  secret_hint: string;
  scopes: string;
  user_id: string;
  created_at: string;
  revoked_at: string | null;
}

export interface SettingsTable {
  name: string;
  value: string;
}

export interface StudentsTable {
  id: string;
  livemode: Livemode;
  external_id: string;
  name: string;
  card_uid: string | null;
}

export interface CoursesTable {
  livemode: Livemode;
  code: string;
  name: string;
}

export interface RoomsTable {
  livemode: Livemode;
  code: string;
  name: string;
}

export interface EnrollmentsTable {
  livemode: Livemode;
  course_code: string;
  student_id: string;
}

export interface SessionsTable {
  id: string;
  livemode: Livemode;
  course_code: string;
  room: string;
  date: string;
  starts_at: string;
  ends_at: string;
  status: string;
}

export interface DevicesTable {
  id: string;
  livemode: Livemode;
  room: string;
  model: string;
  name: string;
  created_at: string;
  token_lookup: string | null;
  token_hash: string | null;
  token_hint: string | null;
  revoked_at: string | null;
  /** what the badge last said it runs (check or sync `sv` and `fw`) */
  installed_version: string | null;
  installed_display: string | null;
  battery_volts: number | null;
  charging: Livemode | null;
  last_check_at: string | null;
  last_sync_at: string | null;
  offered_version: string | null;
  offered_at: string | null;
}

export type FetchOutcome = "sending" | "completed" | "cut";

export interface OtaFetchesTable {
  id: string;
  device_id: string;
  version: string;
  size: number;
  /** bytes handed to the connection: an upper bound of what the badge received */
  bytes_sent: number;
  /** the first and last byte of the image this fetch served (0 and size - 1 for the whole image, a 200) */
  first_byte: number;
  last_byte: number;
  outcome: FetchOutcome;
  started_at: string;
  ended_at: string | null;
}

export interface OtaReportsTable {
  id: string;
  device_id: string;
  version: string;
  outcome: "ok" | "err";
  message: string | null;
  /** the `ota=` value exactly as the badge sent it */
  report: string;
  received_at: string;
}

export type TapResult = "accepted" | "rejected";

export interface DeviceTapsTable {
  id: string;
  livemode: Livemode;
  device_id: string;
  card_uid: string;
  tapped_at: string;
  received_at: string;
  result: TapResult;
  reason: string | null;
  session_id: string | null;
  student_id: string | null;
  record_id: string | null;
}

export interface RecordsTable {
  id: string;
  livemode: Livemode;
  session_id: string;
  student_id: string;
  course_code: string;
  status: string;
  recorded_at: string;
  method: string;
  device_id: string | null;
  reason: string | null;
  created_at: string;
  updated_at: string;
}

export interface HistoryTable {
  id: string;
  record_id: string;
  /** position in the record's history, 1 for the first correction */
  seq: number;
  at: string;
  from_status: string;
  to_status: string;
  reason: string;
  actor_type: string;
  actor_id: string;
  actor_name: string;
}

export interface EventsTable {
  id: string;
  livemode: Livemode;
  type: string;
  created_at: string;
  payload: string;
  /**
   * when the delivery worker fanned the event out to the endpoints, null until then; the event's
   * own creation time when its mode had no enabled endpoint (insertEvents)
   */
  dispatched_at?: string | null;
}

export interface IdempotencyKeysTable {
  livemode: Livemode;
  /** the API key that sent the Idempotency-Key: another key's same value is another key */
  api_key_id: string;
  key: string;
  fingerprint: string;
  state: "in_flight" | "done";
  locked_at: string;
  status_code: number | null;
  response_body: string | null;
  /** JSON array of the answer's fields whose shown-once secret was not stored (null: none) */
  withheld: string | null;
  created_at: string;
}

export interface PipelinesTable {
  id: string;
  livemode: Livemode;
  name: string;
  /** `name` lower-cased, for the case-insensitive name search */
  name_folded: string;
  overview: string;
  owner_email: string;
  /** `owner_email` lower-cased, for the owner filter */
  owner_email_folded: string;
  created_at: string;
}

export interface StagesTable {
  /** a UUID: the tool endpoint's `stage_id` */
  id: string;
  pipeline_id: string;
  /** 0-based order within the pipeline, as given at creation */
  position: number;
  title: string;
  goal: string;
  priority: string;
  /** YYYY-MM-DD or null */
  due_date: string | null;
  status: string;
  created_at: string;
}

export type EndpointStatus = "enabled" | "disabled";

export interface WebhookEndpointsTable {
  id: string;
  livemode: Livemode;
  url: string;
  description: string | null;
  /** JSON array of event types, or ["*"] */
  enabled_events: string;
  status: EndpointStatus;
  disabled_reason: string | null;
  /** the signing secret (whsec_...); kept readable because it signs */
  secret: string;
  /** the secret before the last roll, still signing until previous_secret_expires_at */
  previous_secret: string | null;
  previous_secret_expires_at: string | null;
  last_success_at: string | null;
  created_at: string;
  /** when it was last enabled (created, or re-enabled): it receives the events committed from then on */
  enabled_at: string;
  updated_at: string;
}

/**
 * One row per mode, always there: whether the mode has an enabled webhook endpoint. What a
 * write of events reads (share-locked on PostgreSQL) to write them dispatched when it has none.
 */
export interface WebhookModesTable {
  livemode: Livemode;
  has_enabled_endpoint: 0 | 1;
}

export type DeliveryState = "pending" | "succeeded" | "failed";

/**
 * One event to one endpoint: its schedule and, while an attempt runs, its lease. A worker
 * leases a due delivery by moving `next_attempt_at` to the end of the lease and writing its
 * token; a worker that dies leaves the delivery to fall due again when the lease runs out.
 */
export interface WebhookDeliveriesTable {
  endpoint_id: string;
  event_id: string;
  state: DeliveryState;
  attempts: number;
  /** when the next attempt is due (or the lease ends); null once succeeded or failed for good */
  next_attempt_at: string | null;
  /** the worker attempt holding the lease; null when none does */
  lease_token: string | null;
  created_at: string;
  updated_at: string;
}

export interface WebhookAttemptsTable {
  id: string;
  endpoint_id: string;
  event_id: string;
  event_type: string;
  /** `delivery` (the outbox and resends) or `test` (a test delivery) */
  kind: "delivery" | "test";
  attempted_at: string;
  duration_ms: number;
  status_code: number | null;
  error: string | null;
  response_excerpt: string | null;
  outcome: "succeeded" | "failed";
  next_attempt_at: string | null;
}

/** A release image (the database release store): written once, never changed. */
export interface ReleaseImagesTable {
  /** the manifest entry's `file` */
  file: string;
  sha256: string;
  size: number;
  body: Uint8Array;
  created_at: string;
}

/** Each mode's release manifest, one row per mode (the database release store). */
export interface ReleaseManifestTable {
  livemode: Livemode;
  /** a fresh id at every replacement, so an instance knows from it alone whether its copy is current */
  revision: string;
  body: string;
  updated_at: string;
}

/** What a staged rollout is doing (server/services/rollouts.ts). */
export type RolloutStatus = "active" | "paused" | "halted" | "aborted" | "completed";

/** A staged rollout of one release to one mode's fleet (issue 24); JSON columns are text. */
export interface ReleaseRolloutsTable {
  id: string;
  livemode: Livemode;
  version: string;
  /** the fleet's release when the rollout began: what badges outside the stage keep being told they run */
  previous_version: string | null;
  /** when the release was published: its reports and fetches from then on count (the canary's ok included) */
  published_at: string;
  status: RolloutStatus;
  /** JSON array of increasing percentages ending at 100 */
  stages: string;
  stage_index: number;
  stage_started_at: string;
  min_stage_seconds: number;
  min_ok_share: number;
  halt_failures: number;
  halt_failure_share: number;
  report_timeout_seconds: number;
  /** JSON: the halt (when, why, which badges) while halted, and the last one after a resume; null before any */
  halt: string | null;
  /** JSON array of the device ids whose failures an operator accepted by resuming: they count no more */
  accepted_failures: string;
  /** JSON array of what happened, oldest first: created, advanced, paused, resumed, halted, aborted, completed */
  history: string;
  created_at: string;
  updated_at: string;
  ended_at: string | null;
}

export interface Database {
  users: UsersTable;
  api_keys: ApiKeysTable;
  settings: SettingsTable;
  students: StudentsTable;
  courses: CoursesTable;
  rooms: RoomsTable;
  enrollments: EnrollmentsTable;
  sessions: SessionsTable;
  devices: DevicesTable;
  ota_fetches: OtaFetchesTable;
  ota_reports: OtaReportsTable;
  device_taps: DeviceTapsTable;
  records: RecordsTable;
  record_history: HistoryTable;
  events: EventsTable;
  idempotency_keys: IdempotencyKeysTable;
  webhook_endpoints: WebhookEndpointsTable;
  webhook_modes: WebhookModesTable;
  webhook_deliveries: WebhookDeliveriesTable;
  webhook_attempts: WebhookAttemptsTable;
  pipelines: PipelinesTable;
  stages: StagesTable;
  release_images: ReleaseImagesTable;
  release_manifests: ReleaseManifestTable;
  release_rollouts: ReleaseRolloutsTable;
}

/** A connection or an open transaction: store functions accept either. */
export type Db = Kysely<Database> | Transaction<Database>;
