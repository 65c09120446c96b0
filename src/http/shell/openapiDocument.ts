/** The OpenAPI 3.1 document of an app, built from the route descriptors it registered. */
import { PROJECT_ERRORS } from "./errorResponse.js";
import { RETRY_AFTER, json, ref, type RouteDescriptor } from "./routes.js";
import { healthResponseSchema, readyResponseSchema, validationErrorSchema, type JsonSchema } from "./schemas.js";

export interface DocumentOptions {
  title: string;
  /** Guarded routes list 429 (the app has a limiter). */
  rateLimited: boolean;
  /** Guarded routes list 401 (the app has API keys). */
  authenticated: boolean;
}

/** Schemas every document carries. */
const SHARED_SCHEMAS: Record<string, JsonSchema> = {
  HealthResponse: healthResponseSchema,
  ReadyResponse: readyResponseSchema,
  ValidationError: validationErrorSchema,
};

/** The document of the routes registered, in registration order. */
export function openApiDocument(routes: readonly RouteDescriptor[], options: DocumentOptions): object {
  const paths: Record<string, Record<string, object>> = {};
  const schemas: Record<string, JsonSchema> = {};
  for (const route of routes) {
    if (!route.doc) continue;
    const errors = route.errors ?? PROJECT_ERRORS;
    Object.assign(schemas, route.schemas, { [errors.schemaName]: errors.schema });
    const responses = { ...route.doc.responses };
    const error = (description: string) => ({ description, content: json(ref(errors.schemaName)) });
    if (!route.open && options.authenticated) {
      responses["401"] = error("No API key, or an unknown one (send Authorization: Bearer <key> or X-API-Key).");
    }
    if (!route.open && options.rateLimited) {
      responses["429"] = { ...error("The rate limiter denied the request."), headers: RETRY_AFTER };
    }
    const path = route.path.replace(/:(\w+)/g, "{$1}");
    (paths[path] ??= {})[route.method] = { ...route.doc, responses };
  }
  return {
    openapi: "3.1.0",
    info: { title: options.title, version: "0.1.0" },
    paths,
    components: { schemas: { ...schemas, ...SHARED_SCHEMAS, [PROJECT_ERRORS.schemaName]: PROJECT_ERRORS.schema } },
  };
}
