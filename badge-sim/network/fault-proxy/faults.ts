// What a fault is (the schema scenario files and callers write faults in) and the one error for
// options or faults the proxy cannot use, naming every bad field.
import { z } from "zod";

const byteOffset = z.int().nonnegative();
const scope = {
  /** A string is the exact path (the query is ignored); a RegExp is tested against path and query. */
  path: z.union([z.string().startsWith("/"), z.instanceof(RegExp)]).optional(),
  /** Apply from the nth matching request on (1 = the first), counted from when the fault was set. */
  nth: z.int().min(1).optional(),
  /** Apply to this many matching requests; default 1 when `nth` is given, otherwise all of them. */
  times: z.int().min(1).optional(),
};

/**
 * What `atByte` counts: the body's bytes (the default), or the image's. A 206 body starts at its
 * Content-Range's first byte, so a fault at an image byte lands on the same byte of a resumed
 * download, and is passed over by a body that starts after it.
 */
const counted = { of: z.enum(["body", "image"]).optional() };

export const faultSchema = z.discriminatedUnion("kind", [
  z.strictObject({ ...scope, ...counted, kind: z.literal("drop"), atByte: byteOffset }),
  z.strictObject({ ...scope, ...counted, kind: z.literal("stall"), atByte: byteOffset, forMs: z.int().nonnegative().optional() }),
  z.strictObject({ ...scope, ...counted, kind: z.literal("corrupt"), atByte: byteOffset, xor: z.int().min(1).max(255).optional() }),
  /** `retryAfterS`: a Retry-After header, as the server's download cap sends with its 503 */
  z.strictObject({ ...scope, kind: z.literal("status"), code: z.int().min(200).max(599), body: z.string().optional(), retryAfterS: z.int().nonnegative().optional() }),
  z.strictObject({ ...scope, kind: z.literal("throttle"), bytesPerSecond: z.number().min(1) }),
  // by default on the check: the proxy answers it (mitm-answer.ts); with atByte every download is tampered there too
  z.strictObject({
    ...scope,
    kind: z.literal("mitm"),
    atByte: byteOffset.optional(),
    xor: z.int().min(1).max(255).optional(),
    lines: z.record(z.string().regex(/^[A-Z]$/), z.string().regex(/^[^\x00-\x1f\x7f]*$/, "expected one line")).optional(),
  }),
  /** a proxy that mishandles a resume (range-faults.ts): strips Range, shifts it, or makes it unsatisfiable */
  z.strictObject({ ...scope, kind: z.literal("range"), mode: z.enum(["ignore", "shift", "unsatisfiable"]), shiftBytes: z.int().optional() }),
]);

export type Fault = z.infer<typeof faultSchema>;
export type FaultOf<K extends Fault["kind"]> = Extract<Fault, { kind: K }>;

/** Thrown for options or faults the proxy cannot use; the message names every bad field. */
export class FaultProxyConfigError extends TypeError {
  override name = "FaultProxyConfigError";
}

export function parseFaults(input: unknown): Fault[] {
  const result = z.array(faultSchema).safeParse(input);
  if (!result.success) throw configError(result.error, input, ["faults"]);
  return result.data;
}

/** A FaultProxyConfigError naming every field of `input` (below `root`) that `error` found wrong. */
export function configError(error: z.ZodError, input: unknown, root: Array<string | number>): FaultProxyConfigError {
  return new FaultProxyConfigError(describeIssues(error, input, root));
}

function describeIssues(error: z.ZodError, input: unknown, root: Array<string | number>): string {
  const described = error.issues.flatMap((issue) => {
    const path = [...root, ...issue.path.map((key) => (typeof key === "symbol" ? String(key) : key))];
    if (issue.code === "unrecognized_keys") return issue.keys.map((key) => `${formatPath([...path, key])}: unknown field`);
    const value = valueAt(input, issue.path);
    const got = value === undefined || typeof value === "object" ? "" : ` (got ${JSON.stringify(value)})`;
    return [`${formatPath(path)}: ${issue.message}${got}`];
  });
  return `invalid fault proxy ${root.length > 0 ? "faults" : "options"}: ${described.join("; ")}`;
}

function formatPath(path: Array<string | number>): string {
  const text = path.map((key) => (typeof key === "number" ? `[${key}]` : `.${key}`)).join("");
  return text.startsWith(".") ? text.slice(1) : text || "(the value)";
}

function valueAt(input: unknown, path: PropertyKey[]): unknown {
  let value = input;
  for (const key of path) {
    if (value === null || typeof value !== "object") return undefined;
    value = (value as Record<PropertyKey, unknown>)[key];
  }
  return value;
}
