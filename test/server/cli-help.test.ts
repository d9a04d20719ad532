// The command line's help and start (issue 21 rows 11 and 12): every option and positional of
// every command says what it is for, and `badgebench` runs from its JavaScript bundle, loading
// for --help neither TypeScript nor the server, and for `keys list` not the server's HTTP side.
import { describe, expect, it } from "vitest";
import { DEFAULT_STALL_TIMEOUT_MS } from "../../badge-sim/runners/scenario-runner.ts";
import { DEFAULT_SERVER_TIMEOUT_MS } from "../../scripts/harness/remote-server.ts";
import { SIM_ROOM } from "../../scripts/harness/sim-server.ts";
import { WIFI_PASSWORD_ENV } from "../../server/releases/publishing.ts";
import { ROOT, run, storeIn, tempDirs } from "./cli-process.ts";

const tempDir = tempDirs("help");

async function help(command: string[]): Promise<string> {
  const result = await run([...command, "--help"], { timeoutMs: 60_000 });
  expect(result.code, `badgebench ${command.join(" ")} --help\n${result.stderr}`).toBe(0);
  return result.stdout;
}

/** The lines of one section ("Commands:", "Options:", "Positionals:") of a help text. */
function section(text: string, title: string): string[] {
  const lines = text.split("\n");
  const start = lines.indexOf(title);
  if (start < 0) return [];
  const end = lines.findIndex((line, i) => i > start && line === "");
  return lines.slice(start + 1, end < 0 ? undefined : end);
}

/** The subcommands a help text lists, as the words to type after `badgebench` (words are one space apart, columns two). */
const subcommands = (text: string): string[][] =>
  section(text, "Commands:").flatMap((line) => {
    const words = /^ {2}badgebench ([a-z][\w-]*(?: [a-z][\w-]*)*)/.exec(line)?.[1];
    return words ? [words.split(" ")] : [];
  });

/** Each option or positional of a help text with its description (empty when it has none). */
function entries(text: string): { name: string; description: string }[] {
  return [...section(text, "Options:"), ...section(text, "Positionals:")]
    .filter((line) => /^ {2}\S/.test(line))
    .map((line) => {
      const [, name = "", rest = ""] = /^ {2}(\S+(?:, \S+)*)(.*)$/.exec(line) ?? [];
      return { name, description: rest.replace(/\[[^\]]*\]/g, "").trim() };
    });
}

/** Every command reachable from `badgebench --help`, with its help text. */
async function walk(): Promise<Map<string, string>> {
  const helps = new Map<string, string>();
  let level: string[][] = [[]];
  while (level.length > 0) {
    const texts: string[] = [];
    // A few at a time: on a busy machine a whole level at once could outlast the timeouts.
    for (let i = 0; i < level.length; i += 4) texts.push(...(await Promise.all(level.slice(i, i + 4).map(help))));
    const next: string[][] = [];
    level.forEach((command, i) => {
      helps.set(command.join(" "), texts[i]!);
      for (const sub of subcommands(texts[i]!)) next.push(sub);
    });
    level = next;
  }
  return helps;
}

describe("badgebench --help of every command", () => {
  it("describes every option and positional", { timeout: 300_000 }, async () => {
    const helps = await walk();
    for (const command of ["keys create", "devices add", "serve", "import", "webhooks listen", "sim run", "hil run", "publish", "release promote"]) {
      expect([...helps.keys()], "the walk reached it").toContain(command);
    }
    const undescribed = [...helps].flatMap(([command, text]) => entries(text).filter((e) => e.description === "").map((e) => `badgebench ${command} ${e.name}`));
    expect(undescribed).toEqual([]);
    // Named in the option tables without loading the modules that own them (cli.ts); they must agree.
    expect(helps.get("sim run")).toContain(`[default: ${DEFAULT_STALL_TIMEOUT_MS}]`);
    for (const command of ["sim run", "sim fleet"]) {
      expect(helps.get(command)).toContain(`[default: ${SIM_ROOM}]`);
      expect(helps.get(command)).toContain(`[default: ${DEFAULT_SERVER_TIMEOUT_MS}]`);
    }
    expect(helps.get("publish")).toContain(`$${WIFI_PASSWORD_ENV}`);
  });
});

/**
 * Runs the command with a module loader hook that prints every module it resolves, and returns
 * those inside the project (relative to it).
 */
async function projectModulesLoaded(args: string[]): Promise<string[]> {
  const hook = `import { writeSync } from "node:fs";
export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context);
  writeSync(2, "module " + resolved.url + "\\n");
  return resolved;
}`;
  const preload = `import { register } from "node:module"; register(${JSON.stringify(`data:text/javascript,${encodeURIComponent(hook)}`)});`;
  const result = await run(args, { program: ["--import", `data:text/javascript,${encodeURIComponent(preload)}`, "scripts/cli/badgebench.js"] });
  expect(result.code, result.stderr).toBe(0);
  const prefix = `module file://${ROOT}/`;
  return [...new Set(result.stderr.split("\n").filter((line) => line.startsWith(prefix)).map((line) => line.slice(prefix.length)))];
}

const packagesOf = (modules: string[]) => new Set(modules.filter((m) => m.startsWith("node_modules/")).map((m) => m.split("/")[1]!));

describe("badgebench runs from its bundle", () => {
  it("--help loads no TypeScript and no module of the server, the simulator or the rig", async () => {
    const modules = await projectModulesLoaded(["--help"]);
    expect(modules).toContain("dist/cli/cli.js");
    expect(modules.filter((m) => !m.startsWith("node_modules/") && !m.startsWith("dist/cli/") && !m.startsWith("scripts/cli/"))).toEqual([]);
    expect(modules.filter((m) => m.endsWith(".ts"))).toEqual([]);
    const packages = packagesOf(modules);
    for (const heavy of ["tsx", "express", "kysely", "better-sqlite3", "xstate", "zod", "pino", "mqtt", "serialport"]) expect(packages).not.toContain(heavy);
  });

  it("keys list opens the store without loading the HTTP server, the simulator or the rig", async () => {
    const data = await storeIn(tempDir("keys"));
    expect((await run(["keys", "create", "--mode", "test", "--scope", "attendance:read", "--data", data])).code).toBe(0);
    const modules = await projectModulesLoaded(["keys", "list", "--data", data]);
    expect(modules.filter((m) => m.endsWith(".ts"))).toEqual([]);
    const packages = packagesOf(modules);
    expect(packages).toContain("better-sqlite3");
    for (const heavy of ["tsx", "express", "xstate", "pino", "mqtt", "serialport"]) expect(packages).not.toContain(heavy);
  });
});
