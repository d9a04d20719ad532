#!/usr/bin/env node
// The `badgebench` command (package.json "bin"): runs the command line's bundle (dist/cli/cli.js,
// plain JavaScript built by build-cli.js), rebuilt first if a source changed since.
import { pathToFileURL } from "node:url";
import { upToDateCliBundle } from "./build-cli.js";

const { runCli } = await import(pathToFileURL(await upToDateCliBundle()).href);
await runCli(process.argv.slice(2));
