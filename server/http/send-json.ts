// Every /v1 JSON answer that the hot routes can give is written here, for Express and the hot
// routes alike, with exactly the headers Express's `res.status(s).set(h).json(body)` wrote
// (the given headers, then Content-Type, then Content-Length; no ETag, as the app disables it).
import type { ServerResponse } from "node:http";

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.statusCode = status;
  for (const name in headers) res.setHeader(name, headers[name]!);
  res.setHeader("Content-Type", "application/json; charset=utf-8");
  res.setHeader("Content-Length", Buffer.byteLength(text));
  res.end(text);
}
