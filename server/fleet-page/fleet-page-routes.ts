// The fleet page at /fleet: static files that hold no data and need no key to load (the
// page asks for an API key and calls /v1 with it, SPEC 5.2). The Content-Security-Policy lets
// the page run only its own script and talk only to this server, so even a badge name that
// slipped into the page as markup could not run.
import path from "node:path";
import { Router, type Response } from "express";
import { PACKAGE_ROOT } from "../package-root.ts";

const PAGE_DIR = path.join(PACKAGE_ROOT, "server/fleet-page");
const ASSETS = new Set(["fleet.js", "dom.js", "rollout.js", "fleet.css"]);

const POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join("; ");

function setPageHeaders(res: Response) {
  res.set({
    "Content-Security-Policy": POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    // Revalidated on every load, so a server upgrade never leaves an old script beside new HTML.
    "Cache-Control": "no-cache",
  });
}

/** Serves the page's own files only (not this module's source beside them); anything else falls through to the 404. */
export function fleetPageRoutes(): Router {
  const router = Router();
  router.get("/", (_req, res) => {
    setPageHeaders(res);
    res.sendFile(path.join(PAGE_DIR, "index.html"));
  });
  router.get("/:asset", (req, res, next) => {
    if (!ASSETS.has(req.params.asset)) return next();
    setPageHeaders(res);
    res.sendFile(path.join(PAGE_DIR, req.params.asset));
  });
  return router;
}
