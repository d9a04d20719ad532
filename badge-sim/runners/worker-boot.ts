// Starting a worker thread on a TypeScript module, as the fleet and the sweep benchmark do.
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

/**
 * The JavaScript a worker thread is started from (`new Worker(code, { eval: true })`) to run the
 * TypeScript module `moduleUrl`: Node 20 gives a worker none of the parent's loader hooks, so the
 * line registers tsx in the worker's own thread first, then imports the module. tsx's register
 * must be its ES module build, which sits beside the CommonJS one that require.resolve finds
 * (import.meta.resolve would name it, but vitest does not provide it).
 */
export function typeScriptWorkerCode(moduleUrl: URL): string {
  const tsxApi = pathToFileURL(createRequire(import.meta.url).resolve("tsx/esm/api").replace(/\.cjs$/, ".mjs")).href;
  return `import(${JSON.stringify(tsxApi)}).then(({ register }) => register()).then(() => import(${JSON.stringify(moduleUrl.href)}));`;
}
