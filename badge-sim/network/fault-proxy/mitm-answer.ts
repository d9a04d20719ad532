// The man in the middle (a `mitm` fault): the proxy answers the badge's update check itself, from
// the server's own answer with lines of its choosing. With `atByte` it also fetches the offered
// image (with the badge's own token), flips that byte as the download will, and writes the MD5
// of the tampered image into `M`: an MD5 proves nothing against someone who controls the answer,
// which is what release signatures are for. It cannot write a valid `G`, having no private key.
import { createHash } from "node:crypto";
import net from "node:net";
import { formatResponse, parseResponse, type ResponseLine } from "../../../firmware/index.ts";
import type { FaultOf } from "./faults.ts";

type Upstream = { host: string; port: number };

/** One raw HTTP exchange with the server on a fresh connection; resolves with everything it sent until it closed. */
function rawExchange(upstream: Upstream, request: Buffer): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const socket = net.connect(upstream, () => socket.write(request));
    socket.on("data", (chunk: Buffer) => chunks.push(chunk));
    socket.on("end", () => resolve(Buffer.concat(chunks)));
    socket.on("error", reject);
  });
}

function splitResponse(bytes: Buffer): { status: number; body: Buffer } | null {
  const end = bytes.indexOf("\r\n\r\n");
  const status = /^HTTP\/1\.[01] (\d{3})/.exec(bytes.subarray(0, Math.max(end, 0)).toString("latin1"));
  return end === -1 || !status ? null : { status: Number(status[1]), body: bytes.subarray(end + 4) };
}

/** The offered image as the server sends it to this badge, with byte `atByte` flipped by `xor`. */
async function tamperedImage(upstream: Upstream, path: string, authorization: string, atByte: number, xor: number): Promise<Buffer | null> {
  const request = `GET ${path} HTTP/1.0\r\nHost: ${upstream.host}:${upstream.port}\r\nAuthorization: ${authorization}\r\n\r\n`;
  const response = splitResponse(await rawExchange(upstream, Buffer.from(request, "latin1")));
  if (!response || response.status !== 200 || atByte >= response.body.length) return null;
  const image = Buffer.from(response.body);
  image[atByte]! ^= xor;
  return image;
}

/** The bytes of the proxy's answer to a check: the server's, rewritten as the fault says; the server's own when it is not an offer. */
export async function mitmAnswer(upstream: Upstream, request: Buffer, fault: FaultOf<"mitm">): Promise<{ bytes: Buffer; bodyBytes: number; status: number }> {
  const original = await rawExchange(upstream, request);
  const response = splitResponse(original);
  const parsed = response && parseResponse(response.body.toString("utf8"));
  if (!response || !parsed?.ok || response.status !== 200) return { bytes: original, bodyBytes: response?.body.length ?? 0, status: response?.status ?? 0 };
  let lines: ResponseLine[] = parsed.lines;
  const path = lines.find((line) => line.letter === "P")?.value;
  const authorization = /^authorization: *(.*)$/im.exec(request.toString("latin1"))?.[1]?.trim();
  if (fault.atByte !== undefined && path && authorization) {
    const image = await tamperedImage(upstream, path, authorization, fault.atByte, fault.xor ?? 0x01);
    if (image) lines = replaceLine(lines, "M", createHash("md5").update(image).digest("hex"));
  }
  for (const [letter, value] of Object.entries(fault.lines ?? {})) lines = replaceLine(lines, letter, value);
  const body = Buffer.from(formatResponse(lines), "utf8");
  const head = `HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`;
  return { bytes: Buffer.concat([Buffer.from(head, "latin1"), body]), bodyBytes: body.length, status: 200 };
}

/** `lines` with `letter`'s value replaced (added after `P`, or at the end, when it had none). */
function replaceLine(lines: ResponseLine[], letter: string, value: string): ResponseLine[] {
  if (lines.some((line) => line.letter === letter)) return lines.map((line) => (line.letter === letter ? { letter, value } : line));
  const after = lines.findIndex((line) => line.letter === "P");
  const at = after === -1 ? lines.length : after + 1;
  return [...lines.slice(0, at), { letter, value }, ...lines.slice(at)];
}
