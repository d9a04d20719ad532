// What differs between the two databases where code must say it: row locks, and which errors
// mean the database cannot answer now. Everything else is the same Kysely query on both.
import { PostgresAdapter, type SelectQueryBuilder } from "kysely";
import type { Db } from "./schema.ts";

export function isPostgres(db: Pick<Db, "getExecutor">): boolean {
  return db.getExecutor().adapter instanceof PostgresAdapter;
}

/**
 * `query` locking the rows it reads until the transaction ends (FOR UPDATE) on PostgreSQL, where
 * transactions of this and other server processes run side by side. SQLite has no row locks and
 * needs none: a write transaction (BEGIN IMMEDIATE) holds the database's one write lock from its
 * start, so nothing changes the rows between its read and its write.
 */
export function forUpdate<DB, TB extends keyof DB, O>(db: Db, query: SelectQueryBuilder<DB, TB, O>): SelectQueryBuilder<DB, TB, O> {
  return isPostgres(db) ? query.forUpdate() : query;
}

const UNAVAILABLE_NODE_CODES = new Set(["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EPIPE", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH"]);
// SQLSTATEs that say the database, not the query, failed: class 08 (connection exception),
// admin or crash shutdown, starting up, too many connections, a statement or lock timeout.
const UNAVAILABLE_SQLSTATES = new Set(["57P01", "57P02", "57P03", "53300", "57014", "55P03"]);
// Deadlock detected, serialization failure: the statement was chosen to end a conflict with
// another transaction (of this process or another instance); run again, it normally succeeds.
const LOCK_CONFLICT_SQLSTATES = new Set(["40P01", "40001"]);
// What pg and pg-pool raise without a code.
const UNAVAILABLE_MESSAGES = [
  "Connection terminated",
  "timeout exceeded when trying to connect",
  "Client has encountered a connection error and is not queryable",
  "Query read timeout",
  "Connection ended",
];

const codeOf = (error: unknown) => (typeof error === "object" && error !== null && typeof (error as { code?: unknown }).code === "string" ? (error as { code: string }).code : undefined);

/**
 * Whether `error` says the database cannot answer now (gone, restarting, overloaded, too slow,
 * or a lock conflict lost more often than the write batcher retries it), as opposed to a mistake
 * in a query: worth a 503 and a retry, never a 500.
 */
export function isDatabaseUnavailable(error: unknown): boolean {
  const code = codeOf(error);
  if (code !== undefined && (UNAVAILABLE_NODE_CODES.has(code) || UNAVAILABLE_SQLSTATES.has(code) || LOCK_CONFLICT_SQLSTATES.has(code) || code.startsWith("08"))) return true;
  const message = typeof error === "object" && error !== null ? (error as { message?: unknown }).message : undefined;
  return typeof message === "string" && UNAVAILABLE_MESSAGES.some((known) => message.startsWith(known));
}

/**
 * Whether `error` is PostgreSQL refusing a statement because one before it in the transaction
 * failed: what went wrong is that earlier statement's error, not this one.
 */
export const isRefusedAfterFailure = (error: unknown): boolean => codeOf(error) === "25P02";

/** Whether `error` is PostgreSQL ending a statement to break a lock conflict: worth running again. */
export function isLockConflict(error: unknown): boolean {
  const code = codeOf(error);
  return code !== undefined && LOCK_CONFLICT_SQLSTATES.has(code);
}
