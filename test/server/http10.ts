// A download fetched the way the badge fetches it: an HTTP/1.0 request on a raw socket, read until
// the server closes, so nothing between test and server adds or hides framing.
import net from "node:net";

export interface RawResponse {
  statusLine: string;
  status: number;
  headers: Map<string, string>;
  body: Buffer;
}

/** Sends `GET path HTTP/1.0` with the device token and `extraHeaders` (whole lines) to `serverUrl`. */
export function http10(serverUrl: string, path: string, token: string, extraHeaders: string[] = []): Promise<RawResponse> {
  const { port } = new URL(serverUrl);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), "127.0.0.1", () => {
      socket.write([`GET ${path} HTTP/1.0`, "Host: badge", `Authorization: Bearer ${token}`, ...extraHeaders, "", ""].join("\r\n"));
    });
    const chunks: Buffer[] = [];
    socket.on("data", (chunk) => chunks.push(chunk));
    socket.on("error", reject);
    socket.on("end", () => {
      const raw = Buffer.concat(chunks);
      const split = raw.indexOf("\r\n\r\n");
      const head = raw.subarray(0, split).toString("latin1").split("\r\n");
      const headers = new Map(
        head.slice(1).map((line) => {
          const colon = line.indexOf(":");
          return [line.slice(0, colon).toLowerCase(), line.slice(colon + 1).trim()] as [string, string];
        }),
      );
      resolve({ statusLine: head[0]!, status: Number(head[0]!.split(" ")[1]), headers, body: raw.subarray(split + 4) });
    });
  });
}
