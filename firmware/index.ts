// The badge contract in one import: `import { parseVersion, inspectAppImage } from "./index.ts"`.
export * from "./version.ts";
export * from "./line-codec.ts";
export * from "./manifest.ts";
export * from "./app-image.ts";
export * from "./console.ts";
export * from "./badge-protocol.ts";
export * from "./signature.ts";
