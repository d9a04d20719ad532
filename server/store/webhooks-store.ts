// All SQL of webhooks: endpoints, the outbox fan-out, delivery claims with leases, attempts.
// The claim is SELECT then UPDATE inside one BEGIN IMMEDIATE transaction, which on SQLite no
// other writer can interleave with; on PostgreSQL (several instances) the SELECT is
// `FOR UPDATE SKIP LOCKED`, so a delivery another worker is claiming is passed over.
import { sql } from "kysely";
import { columnArrays, compiledQuery, postgresStatement, rowsInsert } from "./compiled-query.ts";
import { isPostgres } from "./dialect.ts";
import type {
  Db,
  EventsTable,
  Livemode,
  WebhookAttemptsTable,
  WebhookDeliveriesTable,
  WebhookEndpointsTable,
} from "./schema.ts";

export type EndpointRow = WebhookEndpointsTable;

export async function insertEndpoint(db: Db, row: EndpointRow): Promise<void> {
  await db.insertInto("webhook_endpoints").values(row).execute();
}

export async function findEndpoint(db: Db, livemode: Livemode, id: string): Promise<EndpointRow | undefined> {
  return db.selectFrom("webhook_endpoints").selectAll().where("livemode", "=", livemode).where("id", "=", id).executeTakeFirst();
}

export async function listEndpoints(db: Db, filter: { livemode: Livemode; after?: [string, string]; limit: number }): Promise<EndpointRow[]> {
  let query = db.selectFrom("webhook_endpoints").selectAll().where("livemode", "=", filter.livemode);
  if (filter.after !== undefined) {
    const after = filter.after;
    query = query.where((eb) => eb(eb.refTuple("created_at", "id"), ">", eb.tuple(after[0], after[1])));
  }
  return query.orderBy("created_at").orderBy("id").limit(filter.limit).execute();
}

export async function updateEndpoint(db: Db, id: string, changes: Partial<Omit<EndpointRow, "id" | "livemode" | "created_at">>): Promise<void> {
  await db.updateTable("webhook_endpoints").set(changes).where("id", "=", id).execute();
}

/** Deletes the endpoint; its deliveries and attempts go with it (ON DELETE CASCADE). */
export async function deleteEndpoint(db: Db, id: string): Promise<void> {
  await db.deleteFrom("webhook_endpoints").where("id", "=", id).execute();
}

/**
 * Which of `ids` still exist (an endpoint may be deleted while an attempt to it runs). On
 * PostgreSQL they stay until the transaction ends (FOR KEY SHARE): a delete waits for it, so the
 * attempts recorded next never point at a deleted endpoint, and the lock is taken before the
 * delivery rows a cascading delete also locks, so the two cannot deadlock.
 */
export async function existingEndpointIds(db: Db, ids: string[]): Promise<Set<string>> {
  if (ids.length === 0) return new Set();
  const query = db.selectFrom("webhook_endpoints").select("id").where("id", "in", [...new Set(ids)]).orderBy("id");
  const rows = await (isPostgres(db) ? query.forKeyShare() : query).execute();
  return new Set(rows.map((r) => r.id));
}

export async function findEvent(db: Db, livemode: Livemode, id: string) {
  return db.selectFrom("events").select(["id", "type", "payload", "created_at"]).where("livemode", "=", livemode).where("id", "=", id).executeTakeFirst();
}

export async function listEvents(
  db: Db,
  filter: { livemode: Livemode; type?: string; since?: string; after?: [string, string]; limit: number },
): Promise<Pick<EventsTable, "id" | "created_at" | "payload">[]> {
  let query = db.selectFrom("events").select(["id", "created_at", "payload"]).where("livemode", "=", filter.livemode);
  if (filter.type !== undefined) query = query.where("type", "=", filter.type);
  if (filter.since !== undefined) query = query.where("created_at", ">=", filter.since);
  if (filter.after !== undefined) {
    const after = filter.after;
    query = query.where((eb) => eb(eb.refTuple("created_at", "id"), ">", eb.tuple(after[0], after[1])));
  }
  return query.orderBy("created_at").orderBy("id").limit(filter.limit).execute();
}

const insertEventRows = rowsInsert("events", ["id", "livemode", "type", "created_at", "payload", "dispatched_at"]);

/**
 * For each open write transaction (a write batcher's group of many writes) on SQLite: whether a
 * mode was found to have no enabled endpoint, so a group asks once, not once per write. An
 * endpoint write in the transaction forgets the answers (refreshEndpointMode).
 */
const endpointlessModes = new WeakMap<Db, Map<Livemode, boolean>>();

/**
 * Before an endpoint of `livemode` is created, enabled, disabled or deleted, in its transaction:
 * its mode's webhook_modes row, locked (PostgreSQL) until the commit. A write of events holds
 * that row shared for its transaction (insertEvents), so the lock waits for every write that
 * found no enabled endpoint, and a time taken after it (an endpoint's enabled_at) is later than
 * all their events. SQLite's write transaction holds its one write lock already.
 */
export async function lockEndpointMode(db: Db, livemode: Livemode): Promise<void> {
  if (isPostgres(db)) await db.selectFrom("webhook_modes").select("livemode").where("livemode", "=", livemode).forUpdate().execute();
}

/**
 * After an endpoint write, in its transaction (lockEndpointMode first: this statement then sees
 * every endpoint committed before the lock): whether `livemode` has an enabled endpoint now.
 */
export async function refreshEndpointMode(db: Db, livemode: Livemode): Promise<void> {
  endpointlessModes.delete(db);
  await db
    .updateTable("webhook_modes")
    .set((eb) => ({
      has_enabled_endpoint: eb
        .case()
        .when(eb.exists(eb.selectFrom("webhook_endpoints").select("id").where("livemode", "=", livemode).where("status", "=", "enabled")))
        .then(sql.lit<0 | 1>(1))
        .else(sql.lit<0 | 1>(0))
        .end(),
    }))
    .where("livemode", "=", livemode)
    .execute();
}

const modeHasEnabledEndpoint = compiledQuery((db: Db, livemode: Livemode) =>
  db.selectFrom("webhook_modes").select("has_enabled_endpoint").where("livemode", "=", livemode),
);

async function hasNoEnabledEndpoint(db: Db, livemode: Livemode): Promise<boolean> {
  const ask = async () => (await modeHasEnabledEndpoint(db, livemode)).rows[0]?.has_enabled_endpoint === 0;
  if (!db.isTransaction) return ask();
  let modes = endpointlessModes.get(db);
  if (!modes) endpointlessModes.set(db, (modes = new Map()));
  let none = modes.get(livemode);
  if (none === undefined) modes.set(livemode, (none = await ask()));
  return none;
}

/**
 * The parts of a PostgreSQL statement inserting events from an `e` row set whose livemodes are
 * the int array `$N`: the CTE `guard` share-locks their modes' webhook_modes rows (an endpoint
 * being created or enabled is waited for, and its row read as committed: a locking read returns
 * the row's newest version), and `dispatched` is the column an event is written with: its
 * creation time when its mode has no enabled endpoint, else null, for the delivery worker.
 */
export const postgresEventGuard = (livemodesParameter: string) => ({
  cte: `guard as materialized (select livemode, has_enabled_endpoint from webhook_modes where livemode = any(${livemodesParameter}::int[]) for share)`,
  dispatched: "case when g.has_enabled_endpoint = 0 then e.created_at end",
  join: "left join guard g on g.livemode = e.livemode",
});

const eventsGuarded = postgresEventGuard("$2");
const insertEventsGuarded = postgresStatement(
  `with ${eventsGuarded.cte}
   insert into events (id, livemode, type, created_at, payload, dispatched_at)
   select e.id, e.livemode, e.type, e.created_at, e.payload, ${eventsGuarded.dispatched}
   from unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[]) as e(id, livemode, type, created_at, payload)
   ${eventsGuarded.join}`,
);

/**
 * Writes events to the outbox; call in the transaction of the change they report. The delivery
 * worker fans an event out to the endpoints of its mode that were enabled when it was written.
 * An event of a mode with no enabled endpoint is written dispatched (at its creation time): the
 * worker then has no row to rewrite, where it rewrote every event (a badge sync writes 30), a
 * second version of the row and its index entries. The decision is exact: on SQLite the write
 * transaction holds the one write lock, on PostgreSQL the mode's webhook_modes row is held shared
 * to the commit, which an endpoint's creation or enabling waits for (lockEndpointMode).
 */
export async function insertEvents(db: Db, rows: readonly EventsTable[]): Promise<void> {
  if (rows.length === 0) return;
  if (isPostgres(db)) {
    await insertEventsGuarded(db, columnArrays(rows, ["id", "livemode", "type", "created_at", "payload"]));
    return;
  }
  const noEndpoint = new Set<Livemode>();
  for (const livemode of new Set(rows.map((row) => row.livemode))) {
    if (await hasNoEnabledEndpoint(db, livemode)) noEndpoint.add(livemode);
  }
  await insertEventRows(
    db,
    rows.map(({ id, livemode, type, created_at, payload }) => ({ id, livemode, type, created_at, payload, dispatched_at: noEndpoint.has(livemode) ? created_at : null })),
  );
}

// The delivery worker's reads of every tick (after every write, at most every 5 ms while the
// server has time to spare) and its poll: compiled once, so on PostgreSQL they are prepared
// statements, not parsed and planned on every tick (a fifth of a create's statements).
const undispatched = compiledQuery((db: Db, limit: number) =>
  db.selectFrom("events").select(["id", "livemode", "type", "created_at"]).where("dispatched_at", "is", null).orderBy("id").limit(limit),
);

/** An event no worker has fanned out yet. */
export type UndispatchedEvent = Pick<EventsTable, "id" | "livemode" | "type" | "created_at">;

/** Events no worker has fanned out yet, oldest first. */
export async function undispatchedEvents(db: Db, limit: number): Promise<UndispatchedEvent[]> {
  return (await undispatched(db, limit)).rows;
}

const enabled = compiledQuery((db: Db) => db.selectFrom("webhook_endpoints").select(["id", "livemode", "enabled_events", "enabled_at"]).where("status", "=", "enabled"));

export async function enabledEndpoints(db: Db) {
  return (await enabled(db)).rows;
}

export async function insertDeliveries(db: Db, rows: WebhookDeliveriesTable[]): Promise<void> {
  // SQLite allows 32766 bound parameters; 8 columns per row.
  for (let i = 0; i < rows.length; i += 1000) {
    await db
      .insertInto("webhook_deliveries")
      .values(rows.slice(i, i + 1000))
      .onConflict((oc) => oc.columns(["endpoint_id", "event_id"]).doNothing())
      .execute();
  }
}

export async function markDispatched(db: Db, ids: string[], now: string): Promise<void> {
  for (let i = 0; i < ids.length; i += 1000) {
    await db.updateTable("events").set({ dispatched_at: now }).where("id", "in", ids.slice(i, i + 1000)).execute();
  }
}

/**
 * One endpoint's pending deliveries that are due (a leased one is due when its lease ends),
 * oldest first. On PostgreSQL the rows stay locked until the claim commits, and rows another
 * worker is claiming are skipped, not waited for.
 */
export async function dueDeliveriesOf(db: Db, endpointId: string, now: string, limit: number) {
  const query = db
    .selectFrom("webhook_deliveries as d")
    .innerJoin("webhook_endpoints as e", "e.id", "d.endpoint_id")
    .innerJoin("events as ev", "ev.id", "d.event_id")
    .select([
      "d.endpoint_id",
      "d.event_id",
      "d.attempts",
      "d.created_at",
      "e.url",
      "e.livemode",
      "e.secret",
      "e.previous_secret",
      "e.previous_secret_expires_at",
      "ev.type as event_type",
      "ev.payload",
    ])
    .where("d.endpoint_id", "=", endpointId)
    // A literal, not a bound parameter: SQLite uses a partial index only for the same constant.
    .where("d.state", "=", sql.lit("pending"))
    .where("d.next_attempt_at", "<=", now)
    .orderBy("d.next_attempt_at")
    .limit(limit);
  return (isPostgres(db) ? query.forUpdate("d").skipLocked() : query).execute();
}

export type DueDelivery = Awaited<ReturnType<typeof dueDeliveriesOf>>[number];

/** Leases the deliveries to one claim: due again at `leaseUntil` unless settled by `token` first. */
export async function leaseDeliveries(db: Db, keys: { endpoint_id: string; event_id: string }[], leaseUntil: string, token: string): Promise<void> {
  for (let i = 0; i < keys.length; i += 500) {
    const slice = keys.slice(i, i + 500);
    await db
      .updateTable("webhook_deliveries")
      .set({ next_attempt_at: leaseUntil, lease_token: token })
      .where((eb) => eb(eb.refTuple("endpoint_id", "event_id"), "in", slice.map((k) => eb.tuple(k.endpoint_id, k.event_id))))
      .execute();
  }
}

/** The earliest time a pending delivery of an enabled endpoint falls due, if any. */
const earliestDue = compiledQuery((db: Db) =>
  db
    .selectFrom("webhook_deliveries as d")
    .innerJoin("webhook_endpoints as e", "e.id", "d.endpoint_id")
    .select((eb) => eb.fn.min("d.next_attempt_at").as("at"))
    .where("d.state", "=", sql.lit("pending"))
    .where("e.status", "=", "enabled"),
);

export async function nextDueAt(db: Db): Promise<string | null> {
  const row = (await earliestDue(db)).rows[0];
  return (row?.at as string | null | undefined) ?? null;
}

/** Records the outcome of a leased attempt; a worker whose lease was taken over changes nothing. */
export async function settleDelivery(
  db: Db,
  key: { endpoint_id: string; event_id: string; lease_token: string },
  changes: Pick<WebhookDeliveriesTable, "state" | "attempts" | "next_attempt_at" | "updated_at">,
): Promise<boolean> {
  const result = await db
    .updateTable("webhook_deliveries")
    .set({ ...changes, lease_token: null })
    .where("endpoint_id", "=", key.endpoint_id)
    .where("event_id", "=", key.event_id)
    .where("lease_token", "=", key.lease_token)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) > 0;
}

/** Schedules one event to one endpoint again from now, with a fresh retry schedule. */
export async function requeueDelivery(db: Db, endpointId: string, eventId: string, now: string): Promise<void> {
  await db
    .insertInto("webhook_deliveries")
    .values({ endpoint_id: endpointId, event_id: eventId, state: "pending", attempts: 0, next_attempt_at: now, lease_token: null, created_at: now, updated_at: now })
    .onConflict((oc) =>
      oc.columns(["endpoint_id", "event_id"]).doUpdateSet({ state: "pending", attempts: 0, next_attempt_at: now, lease_token: null, created_at: now, updated_at: now }),
    )
    .execute();
}

export async function insertAttempts(db: Db, rows: WebhookAttemptsTable[]): Promise<void> {
  // 13 columns per row, well under SQLite's 32766 bound parameters per statement.
  for (let i = 0; i < rows.length; i += 1000) await db.insertInto("webhook_attempts").values(rows.slice(i, i + 1000)).execute();
}

/** Newest first, so the log opens on what just happened. */
export async function listAttempts(
  db: Db,
  filter: { endpointId: string; eventId?: string; before?: [string, string]; limit: number },
): Promise<WebhookAttemptsTable[]> {
  let query = db.selectFrom("webhook_attempts").selectAll().where("endpoint_id", "=", filter.endpointId);
  if (filter.eventId !== undefined) query = query.where("event_id", "=", filter.eventId);
  if (filter.before !== undefined) {
    const before = filter.before;
    query = query.where((eb) => eb(eb.refTuple("attempted_at", "id"), "<", eb.tuple(before[0], before[1])));
  }
  return query.orderBy("attempted_at", "desc").orderBy("id", "desc").limit(filter.limit).execute();
}

export type AttemptRow = WebhookAttemptsTable;
