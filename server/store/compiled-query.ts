// Queries compiled once. Kysely builds an operation tree and compiles it to SQL on every call,
// which costs more than SQLite takes to run the small statements of the hot paths (the CPU
// profiles in the root README's Benchmarks section). A compiled query is built and compiled once
// per argument shape, with placeholders in place of the arguments; each call reuses that SQL
// (and so the prepared statement) with its own values put where the placeholders were.
//
// The shape of the arguments is their structure: array lengths, the keys of plain objects that
// are not undefined, and where undefined, null and booleans stand (a builder may branch on them). Strings,
// numbers and other values are the values that change; a builder must pass them to Kysely as
// they are (no arithmetic, no string building on them), which the compilation checks.
import { createHash } from "node:crypto";
import { CompiledQuery, type Compilable, type QueryResult } from "kysely";
import type { Database, Db } from "./schema.ts";

const PLACEHOLDER = "\u0000compiled-query-argument:";

/**
 * The SQL of every compiled query, with the name its prepared statement has on PostgreSQL
 * (database.ts names them, so each connection parses and plans them once). The set is bounded:
 * one entry per query and argument shape the code has.
 */
const preparedNames = new Map<string, string>();

/** The prepared statement name of a hot query's SQL; undefined for SQL compiled per call. */
export const preparedStatementName = (sql: string): string | undefined => preparedNames.get(sql);

/** Registers `sql` as a hot query, run as a named prepared statement on PostgreSQL. */
export function prepareAsHot(sql: string): void {
  if (!preparedNames.has(sql)) preparedNames.set(sql, `bb_${createHash("sha1").update(sql).digest("hex").slice(0, 20)}`);
}

interface Template {
  sql: string;
  query: CompiledQuery["query"];
  queryId: CompiledQuery["queryId"];
  /** per SQL parameter: the index of the argument value it takes, or a constant of the builder */
  bindings: ({ value: number } | { constant: unknown })[];
}

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === "object" && Object.getPrototypeOf(value) === Object.prototype;

/** Walks `value`, appending its shape to `shape` and its changing values to `values`, in one order. */
function flatten(value: unknown, shape: string[], values: unknown[]): void {
  if (Array.isArray(value)) {
    shape.push(`[${value.length}`);
    for (const item of value) flatten(item, shape, values);
  } else if (isPlainObject(value)) {
    shape.push("{");
    for (const key in value) {
      if (value[key] === undefined) continue;
      shape.push(key);
      flatten(value[key], shape, values);
    }
    shape.push("}");
  } else if (value === null || value === undefined || typeof value === "boolean") {
    shape.push(String(value));
  } else {
    shape.push("?");
    values.push(value);
  }
}

/** `value` with each changing value replaced by a placeholder naming its index in flatten's order. */
function withPlaceholders(value: unknown, counter: { next: number }): unknown {
  if (Array.isArray(value)) return value.map((item) => withPlaceholders(item, counter));
  if (isPlainObject(value)) {
    const out: Record<string, unknown> = {};
    for (const key in value) if (value[key] !== undefined) out[key] = withPlaceholders(value[key], counter);
    return out;
  }
  if (value === null || value === undefined || typeof value === "boolean") return value;
  return `${PLACEHOLDER}${counter.next++}`;
}

function compileTemplate<Args extends unknown[]>(db: Db, build: (db: Db, ...args: Args) => Compilable<unknown>, args: Args): Template {
  const compiled = build(db, ...(withPlaceholders(args, { next: 0 }) as Args)).compile();
  const bindings = compiled.parameters.map((parameter) => {
    if (typeof parameter !== "string" || !parameter.includes(PLACEHOLDER)) return { constant: parameter };
    const index = Number(parameter.slice(PLACEHOLDER.length));
    if (!parameter.startsWith(PLACEHOLDER) || !Number.isInteger(index)) {
      throw new Error(`compiled query: an argument was changed before it reached Kysely (${compiled.sql})`);
    }
    return { value: index };
  });
  prepareAsHot(compiled.sql);
  return { sql: compiled.sql, query: compiled.query, queryId: compiled.queryId, bindings };
}

/**
 * A query built by `build` and compiled once per argument shape (and per database: the SQL is
 * the dialect's). Runs on a connection or inside a transaction, like the builder would.
 */
export function compiledQuery<Args extends unknown[], Row>(
  build: (db: Db, ...args: Args) => Compilable<Row>,
): (db: Db, ...args: Args) => Promise<QueryResult<Row>> {
  const templates = new WeakMap<object, Map<string, Template>>();
  return (db, ...args) => {
    const shape: string[] = [];
    const values: unknown[] = [];
    flatten(args, shape, values);
    const key = shape.join(" ");
    const dialect = db.getExecutor().adapter;
    let byShape = templates.get(dialect);
    if (!byShape) templates.set(dialect, (byShape = new Map()));
    let template = byShape.get(key);
    if (!template) byShape.set(key, (template = compileTemplate(db, build, args)));
    const parameters = template.bindings.map((binding) => ("value" in binding ? values[binding.value] : binding.constant));
    return db.executeQuery<Row>({ sql: template.sql, query: template.query, queryId: template.queryId, parameters });
  };
}

/** Every column of the table, so one added later cannot be left out of an insert unnoticed (a type error names it). */
type EveryColumn<Table extends keyof Database, Columns extends readonly string[]> =
  Exclude<keyof Database[Table], Columns[number]> extends never ? unknown : { missing: Exclude<keyof Database[Table], Columns[number]> };

/** `columns` as given, checked to name every column of `table` (for an insert written as SQL, as rowsInsert checks its own). */
export const everyColumnOf =
  <Table extends keyof Database & string>() =>
  <const Columns extends readonly (keyof Database[Table] & string)[]>(columns: Columns & EveryColumn<Table, Columns>): Columns =>
    columns;

/**
 * A multi-row insert of `columns` into `table`, its SQL compiled once per row count (and per
 * database). For the inserts of many rows on the hot paths (a badge sync inserts 30 records,
 * events and taps): compiledQuery works out an argument's shape by walking every value of every
 * row, which cost a 30-row insert a fifth of its time; here the shape is the row count, and each
 * row gives its values in the order of `columns` (a column a row leaves undefined is null).
 */
export function rowsInsert<Table extends keyof Database & string, const Columns extends readonly (keyof Database[Table] & string)[]>(
  table: Table,
  columns: Columns & EveryColumn<Table, Columns>,
) {
  const templates = new WeakMap<object, Map<number, Omit<Template, "bindings">>>();
  return (db: Db, rows: readonly Database[Table][]): Promise<QueryResult<never>> => {
    const dialect = db.getExecutor().adapter;
    let byCount = templates.get(dialect);
    if (!byCount) templates.set(dialect, (byCount = new Map()));
    let template = byCount.get(rows.length);
    if (!template) {
      const placeholders = rows.map(() => Object.fromEntries(columns.map((column) => [column, null])));
      const { sql, query, queryId, parameters } = db.insertInto(table).values(placeholders as never).compile();
      if (parameters.length !== rows.length * columns.length) throw new Error(`rows insert: ${parameters.length} parameters in ${sql}`);
      prepareAsHot(sql);
      byCount.set(rows.length, (template = { sql, query, queryId }));
    }
    const parameters: unknown[] = [];
    for (const row of rows) for (const column of columns as Columns) parameters.push(row[column] ?? null);
    return db.executeQuery<never>({ sql: template.sql, query: template.query, queryId: template.queryId, parameters });
  };
}

/** A PostgreSQL statement's array parameters for `rows`: one array per column, in the order of `columns` (undefined as null). */
export const columnArrays = <Row>(rows: readonly Row[], columns: readonly (keyof Row)[]): unknown[][] =>
  columns.map((column) => rows.map((row) => row[column] ?? null));

/**
 * A PostgreSQL statement written as SQL (for what Kysely has no builder for: `unnest` of array
 * parameters, a LATERAL lookup per key), run as a named prepared statement. Its lists are array
 * parameters, so its text, and its one plan per connection, do not change with their lengths.
 */
export function postgresStatement<Row>(text: string): (db: Db, parameters: readonly unknown[]) => Promise<QueryResult<Row>> {
  prepareAsHot(text);
  return (db, parameters) => db.executeQuery<Row>(CompiledQuery.raw(text, [...parameters]));
}
