// The webhook outbox, written from one place: every service that reports a change (attendance
// creates and corrections, device captures, a badge's OTA report) writes its event here, in the
// transaction of the change, with a type from EVENT_TYPES. The delivery worker
// (webhooks/delivery-worker.ts) sends what is written; /v1/events reads it (listEvents, getEvent).
import type { Kysely, Transaction } from "kysely";
import { filterFingerprint, toPage, type CursorCodec } from "../cursor.ts";
import { notFound } from "../errors.ts";
import { newId } from "../ids.ts";
import type { Database, EventsTable, Livemode } from "../store/schema.ts";
import * as store from "../store/webhooks-store.ts";

/** Every event type written to the outbox. */
export const EVENT_TYPES = ["attendance.recorded", "attendance.updated", "badge.ota_reported", "release.rollout_advanced", "release.rollout_halted", "release.rollout_completed"] as const;
export type EventType = (typeof EVENT_TYPES)[number];

/** An outbox row for the `events` table; write it in the transaction of the change it reports. */
export function eventRow(livemode: Livemode, type: EventType, data: Record<string, unknown>, now: Date): EventsTable {
  const id = newId("evt", now.getTime());
  const event = { id, object: "event", type, created: Math.floor(now.getTime() / 1000), livemode: livemode === 1, data };
  return { id, livemode, type, created_at: now.toISOString(), payload: JSON.stringify(event) };
}

/** Writes rows made by eventRow, in one insert. */
export async function writeEvents(trx: Transaction<Database>, rows: EventsTable[]): Promise<void> {
  await store.insertEvents(trx, rows);
}

export async function writeEvent(trx: Transaction<Database>, livemode: Livemode, type: EventType, data: Record<string, unknown>, now: Date): Promise<void> {
  await writeEvents(trx, [eventRow(livemode, type, data, now)]);
}

/** GET /v1/events: the mode's events, newest first, as they were sent. */
export async function listEvents(
  db: Kysely<Database>,
  codec: CursorCodec,
  livemode: Livemode,
  query: { type?: EventType; since?: string; limit: number; cursor?: string },
) {
  const { limit, cursor, ...filterParams } = query;
  const filters = filterFingerprint("events", filterParams);
  const position = cursor === undefined ? undefined : codec.decode(cursor, filters);
  const since = filterParams.since === undefined ? undefined : new Date(filterParams.since).toISOString();
  const rows = await store.listEvents(db, { livemode, type: filterParams.type, since, after: position?.after, limit: limit + 1 });
  return toPage(rows, limit, { codec, filters, keyOf: (row) => [row.created_at, row.id], view: (row) => JSON.parse(row.payload) as unknown });
}

export async function getEvent(db: Kysely<Database>, livemode: Livemode, id: string): Promise<unknown> {
  const event = await store.findEvent(db, livemode, id);
  if (!event) throw notFound("event", id);
  return JSON.parse(event.payload);
}
