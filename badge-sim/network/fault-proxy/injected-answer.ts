// What the proxy answers by itself for a status fault, without contacting the server: on the
// badge endpoints the server's own text format, elsewhere one plain line; the connection closes
// after it.
import http from "node:http";
import { BADGE_PREFIX, formatResponse, RECHECK_AFTER_S } from "../../../firmware/index.ts";
import type { FaultOf } from "./faults.ts";

/** The whole response to `path` under a status fault: its bytes, and how many of them are body. */
export function injectedAnswer(path: string, fault: FaultOf<"status">): { bytes: Buffer; bodyBytes: number } {
  const { code, body: given } = fault;
  const body = Buffer.from(given ?? injectedBody(path, code));
  const reason = http.STATUS_CODES[code] ?? "Injected";
  const head = [
    `HTTP/1.1 ${code} ${reason}`,
    `Content-Type: text/plain; charset=utf-8`,
    `Content-Length: ${body.length}`,
    "Cache-Control: no-store",
    ...(fault.retryAfterS === undefined ? [] : [`Retry-After: ${fault.retryAfterS}`]),
    "Connection: close",
    "",
    "",
  ].join("\r\n");
  return { bytes: Buffer.concat([Buffer.from(head, "latin1"), body]), bodyBytes: body.length };
}

function injectedBody(path: string, code: number): string {
  if (path.startsWith(`${BADGE_PREFIX}/`)) {
    return formatResponse([
      // the server's own answer to a failure on its side
      { letter: "S", value: String(RECHECK_AFTER_S.serverTrouble) },
      { letter: "X", value: "server_error injected by the fault proxy" },
    ]);
  }
  return `${code} injected by the fault proxy\n`;
}
