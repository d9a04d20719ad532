// Rig files (fixtures/rigs/*.json): which real badge a rig drives and through what: its serial
// port, its power relay, the server it talks to, the fault proxy it is pointed at, and where the
// rig's events go. The schema is the documentation of the format; fixtures/rigs/README.md
// explains it field by field.
import path from "node:path";
import { z } from "zod";
import { brokerUrlSchema, topicLevelSchema } from "./mqtt-broker.ts";
import { describeIssues, displayName, readJsonFile } from "../badge-sim/runners/json-file.ts";
import { SCENARIO_KEY_NAMES } from "../badge-sim/runners/scenario-keys.ts";
import { rigNameSchema } from "./rig-events.ts";
import { elfSchema, type ElfConfig } from "./panic-decoder.ts";

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

const DEVICE_TOKEN = /^dtk_(test|live)_[A-Za-z0-9_-]+$/;
const DEVICE_TOKEN_EXPECTED = "expected the badge's device token from `badgebench devices add` (dtk_test_... or dtk_live_...)";

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

/**
 * A command of the rig's as a list of words (no shell), run in the rig file's directory;
 * `placeholder` must be in one word (`why`, when given, says what it stands for).
 */
const rigCommand = (placeholder: string, example: string, why?: string) =>
  z
    .array(z.string().min(1, "expected no empty words"), { error: wrongTypeError(`expected the command as a list of words, such as ${example}`) })
    .min(1, `expected the command as a list of words, such as ${example}`)
    .refine((words) => words.some((word) => word.includes(placeholder)), `expected ${placeholder} in one of the words${why ? `: ${why}` : ""}`);

/** Where the badge's version goes in its setup command. */
export const VERSION_PLACEHOLDER = "{version}";

/** What one badge of a rig is wired to: the fields a one-badge rig file has at its top, a farm's in each of `badges`. */
const badgeFields = {
  /** `simulated`: `badgebench sim serial` on the port, set up and powered by console commands on its own clock */
  badge: z.enum(["real", "simulated"], { error: 'expected "real" (the default) or "simulated" (badgebench sim serial on the port)' }).default("real"),
  port,
  baudRate: z.int({ error: "expected a whole number of bits per second, such as 115200" }).positive().default(115200),
  /**
   * How many times faster than the wall the badge's clock runs: 1 (the default) for a real
   * badge; the reference badge's host build runs faster with `--clock-factor`, and the rig then
   * scales its waits, the settle before `status` and the time without power after a cut to match.
   */
  clockFactor: z.int({ error: "expected a whole number from 1 to 1000: how many times faster than the wall the badge's clock runs (1 for a real badge)" }).min(1).max(1000).default(1),
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
      command: rigCommand(TOKEN_PLACEHOLDER, `["./provision-badge.sh", "${TOKEN_PLACEHOLDER}"]`, "where the device token goes"),
      /** true: the relays are off while it runs (the badge's flash is written without it running) */
      powerOff: z.boolean().default(false),
      timeoutMs: z.int().positive().default(120_000),
    })
    .optional(),
  /**
   * How the rig brings the badge to a scenario's start (esptool writing the version's image, a lab
   * supply set): `{version}`, `{mv}` and `{power}` are replaced. hil run runs it only when the
   * badge does not stand where the next scenario starts; without it, the badge must.
   */
  setup: z
    .strictObject({
      command: rigCommand(VERSION_PLACEHOLDER, `["./flash-badge.sh", "${VERSION_PLACEHOLDER}", "{mv}", "{power}"]`),
      powerOff: z.boolean().default(true),
      timeoutMs: z.int().positive().default(300_000),
    })
    .optional(),
  /**
   * The scenario release keys (fixtures/signing-keys) the firmware the setup flashes trusts: none
   * by default. A real badge plays a scenario only when its firmware trusts exactly the keys the
   * scenario's badge does; the simulated badge is given them.
   */
  trustedKeys: z
    .array(z.enum(SCENARIO_KEY_NAMES, { error: `expected a key of fixtures/signing-keys: ${SCENARIO_KEY_NAMES.join(", ")}` }))
    .max(2)
    .default([]),
  /** Where the fault proxy listens: the server URL in the badge's NVS points here, not at the server. */
  proxy: z
    .strictObject({
      host: z.string().min(1).default("0.0.0.0"),
      port: z.int().min(1).max(65535),
    })
    .optional(),
};

const serverField = z.strictObject({
  url: serverUrl,
  deviceToken: z.string().regex(DEVICE_TOKEN, DEVICE_TOKEN_EXPECTED),
  /** The server's data directory, for publishing a scenario's release; relative to the rig file. */
  dataDir: z.string().min(1).optional(),
});

const commonFields = {
  name: rigNameSchema,
  events: z
    .strictObject({
      broker: brokerUrlSchema,
      publish: z.boolean().default(true),
    })
    .optional(),
  /** The firmware's ELF per release, to decode a panic's backtrace: hil/panic-decoder.ts. */
  elf: elfSchema.optional(),
};

type BadgeFieldsIn = { badge: "real" | "simulated"; clockFactor: number; usbPower?: { topic: string; broker: string } | null; power: { topic: string; broker: string } | null; provision?: { powerOff: boolean }; setup?: { powerOff: boolean } };

function checkBadgeWiring(badge: BadgeFieldsIn, context: z.RefinementCtx, at: Array<string | number> = []): void {
  if (badge.usbPower && !badge.power) {
    context.addIssue({ code: "custom", path: [...at, "usbPower"], message: "needs `power` as well: the relay on the battery, so a power cut can switch the badge off" });
  }
  if (badge.usbPower && badge.power && badge.usbPower.topic === badge.power.topic && badge.usbPower.broker === badge.power.broker) {
    context.addIssue({ code: "custom", path: [...at, "usbPower", "topic"], message: `expected another topic than power.topic (${badge.power.topic}): two relays, one topic each` });
  }
  if (badge.badge === "simulated" && badge.clockFactor !== 1) {
    context.addIssue({ code: "custom", path: [...at, "clockFactor"], message: "is for a badge on the wall clock: the simulated badge lives on its own simulated clock (leave it out)" });
  }
  for (const what of ["provision", "setup"] as const) {
    if (badge[what]?.powerOff && !badge.power) {
      context.addIssue({ code: "custom", path: [...at, what, "powerOff"], message: "needs `power`: the relay that switches the badge off while the command runs" });
    }
  }
}

export const rigFileSchema = z
  .strictObject({ ...commonFields, ...badgeFields, server: serverField })
  .superRefine((rig, context) => checkBadgeWiring(rig, context));

const farmBadgeSchema = z.strictObject({
  name: rigNameSchema,
  ...badgeFields,
  /** this badge's device on the rig's server; each real badge has its own */
  deviceToken: z.string().regex(DEVICE_TOKEN, DEVICE_TOKEN_EXPECTED),
});

/** A rig of several badges (a board farm): `hil run --parallel` spreads the scenarios over them. */
export const farmFileSchema = z
  .strictObject({
    ...commonFields,
    badges: z.array(farmBadgeSchema).min(1, "expected at least one badge"),
    server: serverField.omit({ deviceToken: true }),
  })
  .superRefine((rig, context) => {
    rig.badges.forEach((badge, index) => checkBadgeWiring(badge, context, ["badges", index]));
    checkFarmWiring(rig.badges, context);
  });

/** One port, one relay topic, one device token and one name per badge: two badges on one would switch or read each other. */
function checkFarmWiring(badges: Array<z.output<typeof farmBadgeSchema>>, context: z.RefinementCtx): void {
  const seen = new Map<string, string>();
  const claim = (key: string, at: Array<string | number>, message: (other: string) => string, owner: string) => {
    const other = seen.get(key);
    if (other === undefined) seen.set(key, owner);
    else context.addIssue({ code: "custom", path: at, message: message(other) });
  };
  badges.forEach((badge, index) => {
    const at = ["badges", index];
    claim(`name ${badge.name}`, [...at, "name"], () => `${badge.name} names another badge as well: one name per badge`, badge.name);
    claim(`port ${JSON.stringify(badge.port)}`, [...at, "port"], (other) => `${describePort(badge.port)} is badge ${other}'s port as well: one badge per port`, badge.name);
    for (const which of ["power", "usbPower"] as const) {
      const relayOf = badge[which];
      if (!relayOf) continue;
      claim(`relay ${relayOf.broker} ${relayOf.topic}`, [...at, which, "topic"], (other) => `the relay ${relayOf.topic} on ${relayOf.broker} is badge ${other}'s as well: one relay per badge, or a cut would switch both off`, badge.name);
    }
    if (badge.badge === "real") claim(`token ${badge.deviceToken}`, [...at, "deviceToken"], (other) => `is badge ${other}'s device token as well: each real badge keeps its own in NVS`, badge.name);
  });
}

const describePort = (value: z.output<typeof port>) => (typeof value === "string" ? value : JSON.stringify(value));

type BadgeOfRig = Omit<z.output<typeof farmBadgeSchema>, "provision"> & { provision?: NonNullable<z.output<typeof farmBadgeSchema>["provision"]> & { cwd: string } };
/** One badge of a rig: its wiring, and its device token on the rig's server. */
export type RigBadge = BadgeOfRig & { setup?: { cwd: string } };
type Common = { name: string; events?: z.output<typeof commonFields.events>; elf?: ElfConfig; file: string };
/**
 * A rig: its server and its badges. A one-badge rig file keeps its badge's fields at the top as
 * well (`rig.port`, `rig.power`), as `badges[0]` named after the rig.
 */
export type Rig = Common & {
  server: { url: string; deviceToken?: string; dataDir?: string };
  badges: RigBadge[];
} & Partial<Omit<RigBadge, "name" | "deviceToken">>;

/** A rig file that cannot be used; the message names the file, the field and what was expected. */
export class RigFileError extends Error {
  override name = "RigFileError";
}

export function parseRigFile(json: unknown, file: string): Rig {
  const farm = typeof json === "object" && json !== null && "badges" in json;
  const parsed = (farm ? farmFileSchema : rigFileSchema).safeParse(json, {
    error: (issue) => (issue.code === "invalid_type" && issue.input === undefined ? `missing: expected ${issue.expected}` : undefined),
  });
  if (!parsed.success) {
    const problems = describeIssues(parsed.error).map((line) => line.replace(/: unknown field$/, ": unknown field (a typo? fixtures/rigs/README.md lists the fields; remove it)"));
    throw new RigFileError(`${file}: not a valid rig file:\n${problems.join("\n")}`);
  }
  const dir = path.resolve(path.dirname(file));
  // the provision and setup commands run in the rig file's directory, so a script beside it is ./script
  const withCwd = <T extends { provision?: object; setup?: object }>(badge: T) => ({
    ...badge,
    provision: badge.provision && { ...badge.provision, cwd: dir },
    setup: badge.setup && { ...badge.setup, cwd: dir },
  });
  const rig = parsed.data;
  const dataDir = rig.server.dataDir && path.resolve(dir, rig.server.dataDir);
  const elf = rig.elf && { ...rig.elf, path: path.resolve(dir, rig.elf.path) };
  if ("badges" in rig) {
    return { name: rig.name, events: rig.events, elf, file, server: { ...rig.server, dataDir }, badges: rig.badges.map(withCwd) as RigBadge[] };
  }
  const { name, events, server, elf: _elf, ...wiring } = rig;
  const badge = withCwd({ ...wiring, name, deviceToken: server.deviceToken }) as RigBadge;
  return { ...withCwd(wiring), name, events, elf, file, server: { ...server, dataDir }, badges: [badge] } as Rig;
}

export function loadRigFile(file: string): Rig {
  return parseRigFile(readJsonFile(file, (message) => new RigFileError(message)), displayName(file));
}
