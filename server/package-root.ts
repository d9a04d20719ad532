// The package's root folder, found by walking up from this module to the nearest package.json.
// Files shipped beside the code (the fleet page, the demo school) are located from here, because
// `import.meta.url` is this file under tsx but the bundle's file (dist/) under `npm start`.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

function findPackageRoot(from: string): string {
  for (let dir = from; ; dir = path.dirname(dir)) {
    if (fs.existsSync(path.join(dir, "package.json"))) return dir;
    if (path.dirname(dir) === dir) throw new Error(`no package.json above ${from}`);
  }
}

export const PACKAGE_ROOT = findPackageRoot(path.dirname(fileURLToPath(import.meta.url)));
