// `badgebench sim serial --port PATH --server URL --token T [--version V]`: a simulated badge on
// a serial port, so `hil monitor` and `hil run` can be tried without hardware. The badge end of
// the line is PATH: one end of a socat pty pair (the host opens the other), or a real port wired
// to the host's with a null-modem cable. The virtual badge (badge-sim/) speaks the badge test
// console there (hil/sim-serial-badge.ts), talks to the server at URL with the device token T,
// runs version V from ota_0, and sits on USB power, charging. It powers on at the first line the
// host sends (a pty cannot tell when its other end opens) and keeps its flash and NVS until the
// command ends, across host sessions; `reboot` restarts it from them.
import { parseVersion } from "../../firmware/index.ts";
import { benchBadgeMaker, serveOnPort, type SimSerialBadge } from "../../hil/sim-serial-badge.ts";
import { SimSetupError } from "../harness/sim-server.ts";

export interface SimSerialOptions {
  /** the badge end of the serial line */
  port: string;
  /** the badgebench server the badge talks to, http://HOST:PORT */
  serverUrl: string;
  /** the badge's device token, from `badgebench devices add` */
  token: string;
  /** the firmware version in ota_0 (default 1.4.0) */
  version?: string;
}

export interface SimSerialBadgeHandle {
  bridge: SimSerialBadge;
  close(): Promise<void>;
}

/** Serves the simulated badge on `options.port` until close(). */
export async function serveSimSerial(options: SimSerialOptions): Promise<SimSerialBadgeHandle> {
  const version = options.version ?? "1.4.0";
  if (!parseVersion(version)) throw new SimSetupError(`--version ${JSON.stringify(version)} is not three dotted numbers, like 1.4.0`);
  if (!URL.canParse(options.serverUrl) || new URL(options.serverUrl).protocol !== "http:") {
    throw new SimSetupError(`--server ${JSON.stringify(options.serverUrl)} is not http://HOST:PORT (badges speak plain HTTP)`);
  }
  if (options.token === "") throw new SimSetupError("--token is empty: give the badge's device token from `badgebench devices add`");
  const makeBadge = benchBadgeMaker({ serverUrl: options.serverUrl, token: options.token, version, battery: { volts: 3.95, charging: true, externalPower: true } });
  try {
    return await serveOnPort(options.port, makeBadge);
  } catch (error) {
    throw new SimSetupError(`cannot open serial port ${options.port}: ${(error as Error).message}`);
  }
}

/** The command: serves until SIGINT or SIGTERM, then exits 0. */
export async function runSimSerial(options: SimSerialOptions): Promise<number> {
  const served = await serveSimSerial(options);
  process.stderr.write(
    `simulated badge ${options.version ?? "1.4.0"} on ${options.port}, server ${options.serverUrl}; ` +
      `it powers on at the first line the host sends (e.g. status or reboot); Ctrl-C to end\n`,
  );
  await new Promise<void>((resolve) => {
    process.once("SIGINT", resolve);
    process.once("SIGTERM", resolve);
  });
  await served.close();
  return 0;
}
