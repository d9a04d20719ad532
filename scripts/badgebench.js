#!/usr/bin/env node
// The `badgebench` command (package.json "bin"): runs the TypeScript CLI through tsx.
import { register } from "tsx/esm/api";

register();
await import("./cli.ts");
