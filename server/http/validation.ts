// Request validation with zod. The first problem found becomes a 400 naming the parameter,
// so a client can fix its request without reading our source.
import { z } from "zod";
import { invalidParam } from "../errors.ts";

export const limitParam = z
  .string()
  .regex(/^\d+$/, "must be a whole number from 1 to 200")
  .transform(Number)
  .pipe(z.number().int().min(1, "must be at least 1").max(200, "must be at most 200"))
  .optional()
  .default(50);

export const idParam = (prefix: string) => z.string().min(1).max(100).startsWith(`${prefix}_`, `must be an id starting with ${prefix}_`);

export function parseInput<S extends z.ZodType>(schema: S, input: unknown, what: "query" | "body"): z.output<S> {
  if (what === "body" && (input === undefined || input === null || typeof input !== "object" || Array.isArray(input))) {
    throw invalidParam("body", "The request body must be a JSON object (Content-Type: application/json).", "body_invalid");
  }
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  if (issue.code === "unrecognized_keys") {
    const key = issue.keys[0]!;
    throw invalidParam(key, `Received unknown ${what === "query" ? "query parameter" : "field"}: ${key}.`, "parameter_unknown");
  }
  const param = issue.path.map(String).join(".") || what;
  // zod 4 leaves `issue.input` out of its issues, so look the value up in what was given.
  const given = issue.path.reduce<unknown>((value, key) => (value !== null && typeof value === "object" ? (value as Record<PropertyKey, unknown>)[key] : undefined), input);
  const missing = issue.code === "invalid_type" && given === undefined;
  if (missing) throw invalidParam(param, `Missing required ${what === "query" ? "parameter" : "field"}: ${param}.`, "parameter_missing");
  const shown = typeof given === "string" ? ` (got '${given.slice(0, 60)}')` : "";
  throw invalidParam(param, `Invalid ${param}: ${issue.message}${shown}.`);
}

/** The `:id` segment of a route; Express always sets it on routes that declare it. */
export function pathId(params: Record<string, string | string[] | undefined>): string {
  return String(params.id);
}
