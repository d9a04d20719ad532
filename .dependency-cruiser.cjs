// The architecture of ../shared/DESIGN.md ("Import direction") as rules that `npm test` checks
// (test/architecture/dependency-rules.test.ts): a change that breaks one fails CI. Paths are relative to the
// folder cruised, so the planted violation under fixtures/layering-violation/ is judged by the
// same rules.
const OURS = "^(firmware|server|badge-sim|hil|scripts|test)/";

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    { name: "no-cycles", severity: "error", comment: "a cycle makes two modules one; break it with a smaller module both import", from: {}, to: { circular: true } },
    { name: "firmware-imports-nothing-of-ours", severity: "error", comment: "firmware/ is the contract every side shares", from: { path: "^firmware/" }, to: { path: OURS, pathNot: "^firmware/" } },
    { name: "server-imports-firmware-only", severity: "error", from: { path: "^server/" }, to: { path: "^(badge-sim|hil|scripts|test)/" } },
    { name: "simulator-never-imports-server", severity: "error", comment: "the simulator reaches the server over HTTP only", from: { path: "^badge-sim/" }, to: { path: "^(server|hil|scripts|test)/" } },
    { name: "rig-imports-firmware-and-simulator", severity: "error", from: { path: "^hil/" }, to: { path: "^(server|scripts|test)/" } },
    { name: "nothing-imports-tests", severity: "error", from: { path: "^(firmware|server|badge-sim|hil|scripts)/" }, to: { path: "^test/" } },
    { name: "nothing-imports-entry-points", severity: "error", from: { path: "^(firmware|server|badge-sim|hil)/" }, to: { path: "^scripts/" } },
    {
      name: "routes-call-services-not-the-store",
      severity: "error",
      comment: "a route parses, calls one service and replies; it may name the database handle's type (type-only), never call the store",
      from: { path: "^server/(routes|badge|mcp|fleet-page)/" },
      to: { path: "^server/store/", dependencyTypesNot: ["type-only"] },
    },
    { name: "services-never-import-http", severity: "error", from: { path: "^server/services/" }, to: { path: "^server/http/" } },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    exclude: { path: "^(node_modules|dist)/" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
  },
};
