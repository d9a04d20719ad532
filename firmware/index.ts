// The badge contract in one import: `import { parseVersion, inspectAppImage } from "../firmware/index.ts"`.
export * from "./version.ts";
export * from "./line-codec.ts";
export * from "./manifest.ts";
export * from "./app-image.ts";
export * from "./console.ts";
