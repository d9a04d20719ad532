// Holds every /v1 answer the HTTP tests receive to the OpenAPI document (harness.ts calls
// `checkAgainstOpenApi` on each): the operation must exist for the path and method, the status
// must be one it lists (or a 4XX/5XX range, which carry the one error shape), and the body must
// validate against that response's schema (JSON Schema 2020-12, as OpenAPI 3.1 has it). A
// request to a path the document does not name may only be refused, in the error shape.
import type { Ajv } from "ajv";
import { Ajv2020 } from "ajv/dist/2020.js";
import addFormatsModule from "ajv-formats";
import { openApiDocument } from "../../server/openapi/openapi-document.ts";

type Responses = Record<string, { content?: Record<string, { schema: unknown }>; $ref?: string }>;
const document = openApiDocument() as { paths: Record<string, Record<string, { responses: Responses }>>; components: { responses: Responses } };

// ajv-formats is CommonJS with its function as the default export.
export const addFormats = addFormatsModule as unknown as <A extends Ajv>(ajv: A) => A;
const ajv = new Ajv2020({ strict: false, allErrors: false });
addFormats(ajv);
const DOCUMENT_ID = "https://badgebench.invalid/openapi.json";
ajv.addSchema({ ...document, $id: DOCUMENT_ID });

const pointerPart = (part: string) => part.replaceAll("~", "~0").replaceAll("/", "~1");

const templates = Object.keys(document.paths).map((template) => ({
  template,
  pattern: new RegExp(`^${template.replace(/\{\w+\}/g, "[^/]+").replaceAll(".", "\\.")}$`),
  params: (template.match(/\{/g) ?? []).length,
}));

export class OpenApiMismatch extends Error {
  override name = "OpenApiMismatch";
}

function validate(pointer: string, body: unknown, what: string): void {
  const check = ajv.getSchema(`${DOCUMENT_ID}#${pointer}`);
  if (!check) throw new OpenApiMismatch(`${what}: no schema at ${pointer}`);
  if (!check(body)) throw new OpenApiMismatch(`${what} does not match the OpenAPI document: ${ajv.errorsText(check.errors)}; body ${JSON.stringify(body).slice(0, 300)}`);
}

/** Throws OpenApiMismatch when the document does not describe this answer. */
export function checkAgainstOpenApi(method: string, urlPath: string, status: number, body: unknown): void {
  const path = new URL(urlPath, "http://x").pathname;
  const what = `${method} ${path} -> ${status}`;
  const match = templates.filter((t) => t.pattern.test(path)).sort((a, b) => a.params - b.params)[0];
  const operation = match && document.paths[match.template]![method.toLowerCase()];
  if (!match || !operation) {
    // A path or method the document does not name: the server may only refuse it, in the error shape.
    if (status < 400) throw new OpenApiMismatch(`${what}: the OpenAPI document has no such operation`);
    validate("/components/schemas/Error", body, what);
    return;
  }
  const key = String(status) in operation.responses ? String(status) : `${String(status)[0]}XX`;
  const response = operation.responses[key];
  if (!response) throw new OpenApiMismatch(`${what}: the document lists no such status for this operation`);
  if (response.$ref) {
    validate("/components/schemas/Error", body, what);
    return;
  }
  const schema = response.content?.["application/json"];
  if (!schema) throw new OpenApiMismatch(`${what}: the document lists no JSON body`);
  validate(`/paths/${pointerPart(match.template)}/${method.toLowerCase()}/responses/${key}/content/application~1json/schema`, body, what);
}

/** Throws OpenApiMismatch when a delivered event is not the payload the document's `webhooks` section gives its type. */
export function checkWebhookPayload(event: { type: string; [field: string]: unknown }): void {
  validate(`/webhooks/${pointerPart(event.type)}/post/requestBody/content/application~1json/schema`, event, `webhook ${event.type}`);
}
