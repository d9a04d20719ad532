// `npx tsx scripts/cli/publish.ts IMAGE VERSION [NOTE ...] [--mode test|live] [--canary dev_...] [--display S] [--data DIR] [--json]`:
// the operator's publish script (SPEC 4.10); the same command as `badgebench publish`.
import { runCli } from "./cli.ts";

await runCli(["publish", ...process.argv.slice(2)]);
