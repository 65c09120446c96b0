/**
 * Routes as descriptors: each route declares its method, path, OpenAPI operation and
 * handlers once; the app shell registers the list, and the OpenAPI document and the
 * 405/Allow answers are derived from it (appShell.ts), so no path is written twice.
 */
import type { RequestHandler } from "express";
import { isOpenAiPath } from "./openai/errors.js";
import {
  MAX_BODY_BYTES,
  errorSchema,
  healthResponseSchema,
  readyResponseSchema,
  validationErrorSchema,
  type JsonSchema,
} from "./schemas.js";

/** An OpenAPI 3.1 operation, less what the shell adds (401 and 429 on guarded routes). */
export interface OperationDoc {
  summary: string;
  operationId: string;
  requestBody?: object;
  parameters?: object[];
  responses: Record<string, object>;
}

export interface RouteDescriptor {
  method: "get" | "post";
  /** Express path template; `:name` parameters become `{name}` in the document. */
  path: string;
  /** Absent: served but not documented (the playground's files). */
  doc?: OperationDoc;
  /** Open routes skip API keys and the rate limiter (/health, /metrics). */
  open?: boolean;
  handlers: RequestHandler[];
}

export const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
export const json = (schema: object) => ({ "application/json": { schema } });
export const errorResponse = (description: string) => ({ description, content: json(ref("Error")) });
export const RETRY_AFTER = {
  "Retry-After": { description: "Seconds to wait before retrying (whole, at least 1).", schema: { type: "integer", minimum: 1 } },
};

export interface DocumentOptions {
  title: string;
  /** Component schemas the operations refer to. */
  schemas: Record<string, JsonSchema>;
  /** Guarded routes list 429 (the app has a limiter). */
  rateLimited: boolean;
  /** Guarded routes list 401 (the app has API keys). */
  authenticated: boolean;
}

/** The OpenAPI document of the routes registered, in registration order. */
export function openApiDocument(routes: readonly RouteDescriptor[], options: DocumentOptions): object {
  const paths: Record<string, Record<string, object>> = {};
  for (const route of routes) {
    if (!route.doc) continue;
    const responses = { ...route.doc.responses };
    // /v1 answers errors in OpenAI's shape.
    const error = (description: string) =>
      isOpenAiPath(route.path) ? { description, content: json(ref("OpenAiError")) } : errorResponse(description);
    if (!route.open && options.authenticated) {
      responses["401"] = error("No API key, or an unknown one (send Authorization: Bearer <key> or X-API-Key).");
    }
    if (!route.open && options.rateLimited) {
      responses["429"] = { ...error("The rate limiter denied the request."), headers: RETRY_AFTER };
    }
    const path = route.path.replace(/:(\w+)/g, "{$1}");
    (paths[path] ??= {})[route.method] = { ...route.doc, responses };
  }
  return { openapi: "3.1.0", info: { title: options.title, version: "0.1.0" }, paths, components: { schemas: options.schemas } };
}

/** Schemas every document carries. */
export const SHARED_SCHEMAS: Record<string, JsonSchema> = {
  HealthResponse: healthResponseSchema,
  ReadyResponse: readyResponseSchema,
  ValidationError: validationErrorSchema,
  Error: errorSchema,
};

/** What a spec route (and /recommend) may answer besides 200, 401 and 429. */
export const COMMON_ERRORS: Record<string, object> = {
  "422": { description: "Invalid body or parameter: every violation is listed.", content: json(ref("ValidationError")) },
  "500": errorResponse("Internal failure: the engine or recommender failed (for /generate, that batch only)."),
  "503": { ...errorResponse("Not serving (before start, after stop) or the queue is full."), headers: RETRY_AFTER },
};

export const TOO_LARGE: Record<string, object> = { "413": errorResponse(`Body larger than ${MAX_BODY_BYTES} bytes.`) };
