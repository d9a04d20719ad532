// Rig files (fixtures/rigs/*.json): which real badge a rig drives and through what: its serial
// port, its power relay, the server it talks to, the fault proxy it is pointed at, and where the
// rig's events go. The schema is the documentation of the format; fixtures/rigs/README.md
// explains it field by field.
import path from "node:path";
import { z } from "zod";
import { brokerUrlSchema, topicLevelSchema } from "./mqtt-broker.ts";
import { describeIssues, displayName, readJsonFile } from "../badge-sim/json-file.ts";
import { rigNameSchema } from "./rig-events.ts";

/** USB ids as serialport lists them on Linux (lower-case hex); Windows lists them upper-case. */
const usbId = z
  .string()
  .regex(/^[0-9A-Fa-f]{4}$/, 'expected 4 hex digits, such as "303a"')
  .transform((id) => id.toLowerCase());

const PORT_EXPECTED = 'expected a device path such as "/dev/ttyACM0" or "COM3", {"serialNumber": "..."} or {"vid": "303a", "pid": "1001"}';

const port = z.union(
  [
    z.string().min(1, PORT_EXPECTED),
    // The serial number follows the badge from one USB socket to the next; ttyACM numbers do not.
    z.strictObject({ serialNumber: z.string().min(1) }),
    z.strictObject({ vid: usbId, pid: usbId }),
  ],
  { error: PORT_EXPECTED },
);

const serverUrl = z.string().refine((text) => {
  if (!URL.canParse(text)) return false;
  const url = new URL(text);
  return url.protocol === "http:" && url.pathname === "/" && url.search === "" && url.username === "";
}, "expected http://HOST:PORT with no path, such as http://192.168.1.20:8080 (badges speak plain HTTP)");

/** Applies to a value of the wrong type only; problems inside the object keep their own messages. */
const wrongTypeError = (message: string) => (issue: { code?: string }) => (issue.code === "invalid_type" ? message : undefined);

const relay = (what: string) =>
  z.strictObject(
    { broker: brokerUrlSchema, topic: topicLevelSchema },
    { error: wrongTypeError(`expected {"broker": "mqtt://HOST:1883", "topic": "<relay topic>"}, or null for a rig without ${what}`) },
  );

/** Where the provision command takes the device token it writes into the badge. */
export const TOKEN_PLACEHOLDER = "{token}";

export const rigFileSchema = z
  .strictObject({
    name: rigNameSchema,
    port,
    baudRate: z.int({ error: "expected a whole number of bits per second, such as 115200" }).positive().default(115200),
    /** null: the rig has no relay, so scenarios with power faults cannot run on it. */
    power: relay("a relay").nullable(),
    /** A second relay on the badge's USB power: then `power` is its battery, a cut switches both off, and plug/unplug switch this one. */
    usbPower: relay("a USB power relay").nullable().optional(),
    /**
     * How the rig writes a device token into the badge's NVS (esptool and an NVS image on an
     * ESP32), so a scenario can give the badge a revoked token and the rig can give it its own back.
     */
    provision: z
      .strictObject({
        command: z
          .array(z.string().min(1, "expected no empty words"), { error: wrongTypeError(`expected the command as a list of words, such as ["./provision-badge.sh", "${TOKEN_PLACEHOLDER}"]`) })
          .min(1, `expected the command as a list of words, such as ["./provision-badge.sh", "${TOKEN_PLACEHOLDER}"]`)
          .refine((words) => words.some((word) => word.includes(TOKEN_PLACEHOLDER)), `expected ${TOKEN_PLACEHOLDER} in one of the words: where the device token goes`),
        /** true: the relays are off while it runs (the badge's flash is written without it running) */
        powerOff: z.boolean().default(false),
        timeoutMs: z.int().positive().default(120_000),
      })
      .optional(),
    server: z.strictObject({
      url: serverUrl,
      deviceToken: z.string().regex(/^dtk_(test|live)_[A-Za-z0-9_-]+$/, "expected the badge's device token from `badgebench devices add` (dtk_test_... or dtk_live_...)"),
      /** The server's data directory, for publishing a scenario's release; relative to the rig file. */
      dataDir: z.string().min(1).optional(),
    }),
    /** Where the fault proxy listens: the server URL in the badge's NVS points here, not at the server. */
    proxy: z
      .strictObject({
        host: z.string().min(1).default("0.0.0.0"),
        port: z.int().min(1).max(65535),
      })
      .optional(),
    events: z
      .strictObject({
        broker: brokerUrlSchema,
        publish: z.boolean().default(true),
      })
      .optional(),
  })
  .superRefine((rig, context) => {
    if (rig.usbPower && !rig.power) {
      context.addIssue({ code: "custom", path: ["usbPower"], message: "needs `power` as well: the relay on the battery, so a power cut can switch the badge off" });
    }
    if (rig.usbPower && rig.power && rig.usbPower.topic === rig.power.topic && rig.usbPower.broker === rig.power.broker) {
      context.addIssue({ code: "custom", path: ["usbPower", "topic"], message: `expected another topic than power.topic (${rig.power.topic}): two relays, one topic each` });
    }
    if (rig.provision?.powerOff && !rig.power) {
      context.addIssue({ code: "custom", path: ["provision", "powerOff"], message: "needs `power`: the relay that switches the badge off while the command runs" });
    }
  });

type RigFields = z.output<typeof rigFileSchema>;
export type Rig = Omit<RigFields, "provision"> & { provision?: NonNullable<RigFields["provision"]> & { cwd: string }; file: string };

/** A rig file that cannot be used; the message names the file, the field and what was expected. */
export class RigFileError extends Error {
  override name = "RigFileError";
}

export function parseRigFile(json: unknown, file: string): Rig {
  const parsed = rigFileSchema.safeParse(json, {
    error: (issue) => (issue.code === "invalid_type" && issue.input === undefined ? `missing: expected ${issue.expected}` : undefined),
  });
  if (!parsed.success) throw new RigFileError(`${file}: not a valid rig file:\n${describeIssues(parsed.error).join("\n")}`);
  const rig = parsed.data;
  const dataDir = rig.server.dataDir && path.resolve(path.dirname(file), rig.server.dataDir);
  // the provision command runs in the rig file's directory, so a script beside it is ./script
  const provision = rig.provision && { ...rig.provision, cwd: path.resolve(path.dirname(file)) };
  return { ...rig, server: { ...rig.server, dataDir }, provision, file };
}

export function loadRigFile(file: string): Rig {
  return parseRigFile(readJsonFile(file, (message) => new RigFileError(message)), displayName(file));
}
