/**
 * OpenAPI 3.1 documents of the two apps, built from the same schemas validation compiles:
 * one source of truth for what is enforced and what is documented.
 */
import {
  MAX_BODY_BYTES,
  errorSchema,
  generateRequestSchema,
  generateResponseSchema,
  healthResponseSchema,
  readyResponseSchema,
  recommendPathSchema,
  recommendQuerySchema,
  recommendResponseSchema,
  streamChunkSchema,
  validationErrorSchema,
  type JsonSchema,
} from "./schemas.js";

export interface OpenApiOptions {
  /** List 429 on rate-limited routes (when the app has a limiter). Default true. */
  rateLimited?: boolean;
}

type Responses = Record<string, object>;

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const json = (schema: object) => ({ "application/json": { schema } });
const errorResponse = (description: string) => ({ description, content: json(ref("Error")) });

const RETRY_AFTER = {
  "Retry-After": { description: "Seconds to wait before retrying (whole, at least 1).", schema: { type: "integer", minimum: 1 } },
};

const COMMON_ERRORS: Responses = {
  "422": { description: "Invalid body or parameter: every violation is listed.", content: json(ref("ValidationError")) },
  "500": errorResponse("Internal failure: the engine or recommender failed (for /generate, that batch only)."),
  "503": { ...errorResponse("Not serving (before start, after stop) or the queue is full."), headers: RETRY_AFTER },
};

const STREAM_ERRORS: Responses = {
  ...COMMON_ERRORS,
  "503": {
    ...errorResponse("Not serving (before start, after stop), or MAX_ACTIVE_STREAMS streams are already running (code ERR_TOO_MANY_STREAMS)."),
    headers: RETRY_AFTER,
  },
};

const RATE_LIMITED: Responses = {
  "429": { ...errorResponse("The rate limiter denied the request."), headers: RETRY_AFTER },
};

const SHARED_PATHS = {
  "/health": {
    get: {
      summary: "Liveness; answers whatever the lifespan state. Never rate limited.",
      operationId: "health",
      responses: { "200": { description: "Alive.", content: json(ref("HealthResponse")) } },
    },
  },
  "/ready": {
    get: {
      summary: "Readiness, for load balancers: 200 once the model is loaded and warmed up, 503 before and from the moment a drain starts. Never rate limited.",
      operationId: "ready",
      responses: {
        "200": { description: "Ready for traffic.", content: json(ref("ReadyResponse")) },
        "503": { ...errorResponse("Loading or draining (code ERR_NOT_READY): send traffic elsewhere."), headers: RETRY_AFTER },
      },
    },
  },
  "/metrics": {
    get: {
      summary: "Prometheus metrics of this app and its process. Never rate limited.",
      operationId: "metrics",
      responses: {
        "200": { description: "Text exposition format.", content: { "text/plain": { schema: { type: "string" } } } },
      },
    },
  },
};

function document(title: string, paths: object, schemas: Record<string, JsonSchema>, limited: Responses): object {
  return {
    openapi: "3.1.0",
    info: { title, version: "0.1.0" },
    paths: {
      ...SHARED_PATHS,
      ...paths,
      "/openapi.json": {
        get: {
          summary: "This document.",
          operationId: "openapi",
          responses: { "200": { description: "OpenAPI 3.1 document.", content: json({ type: "object" }) }, ...limited },
        },
      },
    },
    components: {
      schemas: { ...schemas, HealthResponse: healthResponseSchema, ReadyResponse: readyResponseSchema, ValidationError: validationErrorSchema, Error: errorSchema },
    },
  };
}

export function generateOpenApi(options: OpenApiOptions = {}): object {
  const limited = options.rateLimited === false ? {} : RATE_LIMITED;
  const body = { required: true, content: json(ref("GenerateRequest")) };
  const tooLarge = { "413": errorResponse(`Body larger than ${MAX_BODY_BYTES} bytes.`) };
  return document(
    "Text generation",
    {
      "/generate": {
        post: {
          summary: "Continue a prompt. Requests are grouped into batches for the engine.",
          operationId: "generate",
          requestBody: body,
          responses: {
            "200": { description: "The continuation.", content: json(ref("GenerateResponse")) },
            ...tooLarge,
            ...limited,
            ...COMMON_ERRORS,
          },
        },
      },
      "/generate/stream": {
        post: {
          summary: "Continue a prompt, piece by piece, as server-sent events. Not batched.",
          operationId: "generateStream",
          requestBody: body,
          responses: {
            "200": {
              description: `${streamChunkSchema.description}`,
              content: { "text/event-stream": { schema: { type: "string" } } },
            },
            ...tooLarge,
            ...limited,
            ...STREAM_ERRORS,
          },
        },
      },
    },
    { GenerateRequest: generateRequestSchema, GenerateResponse: generateResponseSchema, StreamChunk: streamChunkSchema },
    limited,
  );
}

export function recsysOpenApi(options: OpenApiOptions = {}): object {
  const limited = options.rateLimited === false ? {} : RATE_LIMITED;
  const userId = (recommendPathSchema.properties as Record<string, JsonSchema>)["user_id"]!;
  const k = (recommendQuerySchema.properties as Record<string, JsonSchema>)["k"]!;
  return document(
    "Recommendations",
    {
      "/recommend/{user_id}": {
        get: {
          summary: "Recommend movies for a user.",
          operationId: "recommend",
          parameters: [
            { name: "user_id", in: "path", required: true, schema: userId, description: userId["description"] },
            { name: "k", in: "query", required: false, schema: k, description: k["description"] },
          ],
          responses: {
            "200": { description: "Recommended items.", content: json(ref("RecommendResponse")) },
            ...limited,
            ...COMMON_ERRORS,
          },
        },
      },
    },
    { RecommendResponse: recommendResponseSchema },
    limited,
  );
}
