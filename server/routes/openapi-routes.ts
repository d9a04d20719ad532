// GET /v1/openapi.json: the OpenAPI document of /v1 (server/openapi/), for any valid key.
import { Router } from "express";
import { openApiDocument } from "../openapi/openapi-document.ts";

export function openApiRoutes(): Router {
  const router = Router();
  router.get("/openapi.json", (_req, res) => {
    res.json(openApiDocument());
  });
  return router;
}
