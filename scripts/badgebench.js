#!/usr/bin/env node
// The `badgebench` command (package.json "bin"): runs the TypeScript CLI through tsx.
import { register } from "tsx/esm/api";

register();
const { runCli } = await import("./cli.ts");
await runCli(process.argv.slice(2));
