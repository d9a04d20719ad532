// A client that uploads as an attacker would: the request head, then body bytes as fast as the
// connection takes them, until the server closes it or the whole body is sent. It counts the
// bytes the connection accepted: what the server read plus what the socket buffers between the
// two hold. The connection is socat's with a fixed send buffer (`sndbuf`): Node cannot set one,
// and Linux grows a loopback socket's send buffer to megabytes, which would hide whether the
// server read the body or left it in the buffers.
import { spawn } from "node:child_process";

export interface UploadResult {
  /** the answer's status, when one arrived before the connection closed */
  status: number | undefined;
  /** body bytes the connection accepted */
  sent: number;
  /** whether the server closed the connection (false: the whole body went out and the client hung up) */
  closedByServer: boolean;
}

const CHUNK = Buffer.alloc(64 * 1024, 0x61);
const SEND_BUFFER_BYTES = 64 * 1024;

export async function upload(
  baseUrl: string,
  request: { path: string; headers: string[]; bytes: number; chunked?: boolean },
): Promise<UploadResult> {
  const { hostname, port } = new URL(baseUrl);
  const socat = spawn("socat", ["-", `TCP:${hostname}:${port},sndbuf=${SEND_BUFFER_BYTES}`], { stdio: ["pipe", "pipe", "ignore"] });
  const answer: Buffer[] = [];
  socat.stdout.on("data", (data: Buffer) => answer.push(data));
  socat.stdin.on("error", () => {});
  let clientEnded = false;
  let closedByServer = false;
  const closed = new Promise<void>((resolve) =>
    socat.once("close", () => {
      closedByServer = !clientEnded;
      resolve();
    }),
  );
  const framing = request.chunked ? "Transfer-Encoding: chunked" : `Content-Length: ${request.bytes}`;
  socat.stdin.write([`POST ${request.path} HTTP/1.1`, `Host: ${hostname}:${port}`, ...request.headers, framing, "", ""].join("\r\n"));
  const piece = request.chunked ? Buffer.concat([Buffer.from(`${CHUNK.length.toString(16)}\r\n`), CHUNK, Buffer.from("\r\n")]) : CHUNK;
  let sent = 0;
  while (sent < request.bytes) {
    const written = new Promise<boolean>((resolve) => socat.stdin.write(piece, (error) => resolve(!error)));
    // A write the server never takes (it stopped reading) is over once it closes the connection.
    if (!(await Promise.race([written, closed.then(() => false)]))) break;
    sent += CHUNK.length;
  }
  if (socat.exitCode === null) {
    if (request.chunked && sent >= request.bytes) socat.stdin.write("0\r\n\r\n");
    // The whole body went out: wait briefly for the answer, then hang up.
    await Promise.race([closed, new Promise((resolve) => setTimeout(resolve, 2_000))]);
    clientEnded = socat.exitCode === null;
    socat.kill();
    await closed;
  }
  const status = /^HTTP\/1\.[01] (\d{3})/.exec(Buffer.concat(answer).toString("latin1"))?.[1];
  return { status: status === undefined ? undefined : Number(status), sent, closedByServer };
}
