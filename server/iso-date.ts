// A calendar date as the API and the school file write it (YYYY-MM-DD), checked to be a real
// day: shared by the request validation (http/) and the school import (services/), which may
// not import http/.
import { z } from "zod";

function isRealDate(value: string): boolean {
  const date = new Date(`${value}T00:00:00Z`);
  return !Number.isNaN(date.getTime()) && date.toISOString().slice(0, 10) === value;
}

export const isoDate = z
  .string()
  .regex(/^\d{4}-\d{2}-\d{2}$/, "must be a date in the form YYYY-MM-DD")
  .refine(isRealDate, "is not a real calendar date");
