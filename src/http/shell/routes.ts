/**
 * Routes as descriptors: each route declares its method, path, OpenAPI operation, the
 * component schemas that operation refers to, its error format and its handlers once; the
 * app shell registers the list, and the OpenAPI document (openapiDocument.ts), the 405/Allow
 * answers and each request's error format are derived from it, so no path is written twice.
 */
import type { RequestHandler } from "express";
import type { ErrorFormat } from "./errorResponse.js";
import { MAX_BODY_BYTES, type JsonSchema } from "./schemas.js";

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
  /** Component schemas `doc` refers to (`ref(name)`), by name. */
  schemas?: Record<string, JsonSchema>;
  /** How the route answers errors, the shell's own 401, 405 and 429 included. Default: the project's. */
  errors?: ErrorFormat;
  /** Open routes skip API keys and the rate limiter (/health, /metrics). */
  open?: boolean;
  handlers: RequestHandler[];
}

export const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
/** A JSON body of `schema`; `example`, when given, is a valid one (the fuzz cases send it too). */
export const json = (schema: object, example?: object) => ({ "application/json": example === undefined ? { schema } : { schema, example } });
export const errorResponse = (description: string) => ({ description, content: json(ref("Error")) });
export const RETRY_AFTER = {
  "Retry-After": { description: "Seconds to wait before retrying (whole, at least 1).", schema: { type: "integer", minimum: 1 } },
};

/** What a spec route (and /recommend) may answer besides 200, 401 and 429. */
export const COMMON_ERRORS: Record<string, object> = {
  "422": { description: "Invalid body or parameter: every violation is listed.", content: json(ref("ValidationError")) },
  "500": errorResponse("Internal failure: the engine or recommender failed (for /generate, that batch only)."),
  "503": { ...errorResponse("Not serving (before start, after stop) or the queue is full."), headers: RETRY_AFTER },
};

export const TOO_LARGE: Record<string, object> = { "413": errorResponse(`Body larger than ${MAX_BODY_BYTES} bytes.`) };
