// What lets a server process keep API-key and device-token principals and the published release
// in memory, though another process (a second instance, an admin command) may revoke a key or a
// badge, or publish, at any moment. A cache keeps what it read under the feed's `current()` value
// (an opaque number) and empties itself when the value differs; a change that must empty the
// caches runs through `announceChange`.
// - SQLite: `current()` moves when SQLite's data_version says another connection committed, or
//   when this process announced a change itself; nothing waits.
// - PostgreSQL: `announceChange` writes a fresh value into the version row (settings
//   `change_version`) and sends NOTIFY on `badgebench_changes` in the change's own transaction,
//   so both happen with its commit. Every instance LISTENs on a connection of its own and moves
//   `current()` when a notification arrives: the next request reads afresh. Whatever happens to
//   that connection (dropped, silently cut, reconnecting), `current()` also reads the version row
//   when it was last confirmed `checkIntervalMs` or longer ago, so a change is seen at most
//   `checkIntervalMs` (plus one short read) after its commit, notification or not. The row is
//   read ahead, behind a request's answer, from half the interval on: requests wait for the read
//   only when the pool kept it longer than the other half.
import { randomUUID } from "node:crypto";
import { sql } from "kysely";
import type pg from "pg";
import { isPostgres } from "./dialect.ts";
import type { Db } from "./schema.ts";

export const CHANGES_CHANNEL = "badgebench_changes";
const VERSION_SETTING = "change_version";
/** The longest a cache may be behind a committed change: the version row is read at least this often while requests come. */
export const CHANGE_CHECK_INTERVAL_MS = 500;
/** How long the listening connection waits before connecting again after it was lost. */
const RELISTEN_DELAY_MS = 1000;

/** Changes announced by this process (before and after each), on any connection: they move every feed of the process. */
let localChanges = 0;
/** Callers' transactions in which a change was announced: whoever commits one moves the feeds once more (`noteCommitted`). */
const announcingTransactions = new WeakSet<Db>();

export interface ChangeFeed {
  /** A value that differs from the one read before whenever a cached principal or release may have changed since. */
  current(): number | Promise<number>;
  close(): Promise<void>;
}

async function bumpVersion(db: Db): Promise<void> {
  if (!isPostgres(db)) return;
  const value = randomUUID();
  await db
    .insertInto("settings")
    .values({ name: VERSION_SETTING, value })
    .onConflict((oc) => oc.column("name").doUpdateSet({ value }))
    .execute();
  await sql`select pg_notify(${CHANGES_CHANNEL}, ${value})`.execute(db);
}

/**
 * Runs `work` (a revocation, a publish) in a transaction with the announcement that caches must be
 * emptied, or inside `db` when it is a transaction already (the announcement then commits with
 * the caller's commit). This process's feeds move before and after, so no request of this
 * process caches what `work` is changing; in a caller's transaction they move again when its
 * committer calls `noteCommitted` (a read between the announcement and that commit still saw
 * the old rows, on PostgreSQL's other connections).
 */
export async function announceChange<T>(db: Db, work: (trx: Db) => Promise<T>): Promise<T> {
  localChanges += 1;
  try {
    const run = async (trx: Db) => {
      const result = await work(trx);
      await bumpVersion(trx);
      return result;
    };
    if (!db.isTransaction) return await db.transaction().execute(run);
    announcingTransactions.add(db);
    return await run(db);
  } finally {
    localChanges += 1;
  }
}

/** This process moves its feeds (after a transaction that announced a change inside a caller's transaction committed). */
export function noteLocalChange(): void {
  localChanges += 1;
}

/** After `trx` ended (committed or not): moves this process's feeds if a change was announced in it. */
export function noteCommitted(trx: Db): void {
  if (announcingTransactions.has(trx)) noteLocalChange();
}

/** SQLite's feed: `dataVersion` is SQLite's data_version pragma on the serving connection. */
export function sqliteChangeFeed(dataVersion: () => number): ChangeFeed {
  let seen = dataVersion();
  let moves = 0;
  return {
    current() {
      const version = dataVersion();
      if (version !== seen) {
        seen = version;
        moves += 1;
      }
      return moves + localChanges;
    },
    close: async () => {},
  };
}

export interface PostgresChangeFeedOptions {
  /** a new connection for LISTEN (pg.Client, not one of the pool's) */
  connect(): Promise<pg.Client>;
  /** reads the version row on the store's pool */
  db: Db;
  checkIntervalMs?: number;
  /** monotonic milliseconds (tests move it by hand) */
  now?: () => number;
  /** false: no LISTEN connection at all, the version row only (tests of the fallback) */
  listen?: boolean;
}

export class PostgresChangeFeed implements ChangeFeed {
  readonly #options: Required<Omit<PostgresChangeFeedOptions, "connect" | "db">> & Pick<PostgresChangeFeedOptions, "connect" | "db">;
  #moves = 0;
  #seenVersion: string | null | undefined;
  /** when the read that last confirmed the version row started */
  #confirmedAt = Number.NEGATIVE_INFINITY;
  #reading: Promise<void> | undefined;
  #client: pg.Client | undefined;
  #relisten: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(options: PostgresChangeFeedOptions) {
    this.#options = { checkIntervalMs: CHANGE_CHECK_INTERVAL_MS, now: () => performance.now(), listen: true, ...options };
  }

  /** Starts listening (resolves once LISTEN is in place, or failed and will be retried) and confirms the version row once. */
  async start(): Promise<this> {
    if (this.#options.listen) await this.#listen();
    await this.#confirm();
    return this;
  }

  /** Whether the LISTEN connection is up (for the tests and the logs). */
  get listening(): boolean {
    return this.#client !== undefined;
  }

  current(): number | Promise<number> {
    const sinceConfirmed = this.#options.now() - this.#confirmedAt;
    if (sinceConfirmed < this.#options.checkIntervalMs) {
      // Past half the interval the version row is read behind the answer, so that on a busy pool
      // no request waits for it (a fleet's checks did, every interval, for as long as the read
      // queued). A failed read leaves the bound to the read a request waits for.
      if (sinceConfirmed >= this.#options.checkIntervalMs / 2 && !this.#reading) this.#confirm().catch(() => {});
      return this.#moves + localChanges;
    }
    return this.#confirm().then(() => this.#moves + localChanges);
  }

  /** Reads the version row; requests arriving meanwhile share the read. */
  #confirm(): Promise<void> {
    this.#reading ??= (async () => {
      const startedAt = this.#options.now();
      try {
        const row = await this.#options.db.selectFrom("settings").select("value").where("name", "=", VERSION_SETTING).executeTakeFirst();
        const version = row?.value ?? null;
        if (version !== this.#seenVersion) {
          this.#seenVersion = version;
          this.#moves += 1;
        }
        this.#confirmedAt = startedAt;
      } finally {
        this.#reading = undefined;
      }
    })();
    return this.#reading;
  }

  async #listen(): Promise<void> {
    if (this.#closed) return;
    let client: pg.Client | undefined;
    try {
      client = await this.#options.connect();
      client.on("notification", () => {
        this.#moves += 1;
      });
      client.on("error", () => this.#lost(client!));
      client.on("end", () => this.#lost(client!));
      await client.query(`listen ${CHANGES_CHANNEL}`);
      this.#client = client;
      // Notifications sent while no connection listened are lost: whatever they said may have changed.
      this.#moves += 1;
    } catch {
      client?.end().catch(() => {});
      this.#scheduleRelisten();
    }
  }

  #lost(client: pg.Client): void {
    if (this.#client !== client) return;
    this.#client = undefined;
    this.#moves += 1;
    client.end().catch(() => {});
    this.#scheduleRelisten();
  }

  #scheduleRelisten(): void {
    if (this.#closed || this.#relisten) return;
    this.#relisten = setTimeout(() => {
      this.#relisten = undefined;
      void this.#listen();
    }, RELISTEN_DELAY_MS);
    this.#relisten.unref();
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#relisten);
    const client = this.#client;
    this.#client = undefined;
    await client?.end().catch(() => {});
  }
}
