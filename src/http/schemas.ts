/**
 * Wire schemas (JSON Schema 2020-12, the dialect of OpenAPI 3.1). They are data: validation
 * compiles them once (validation.ts), and the OpenAPI documents embed them (openapi.ts), so
 * what is documented is what is enforced.
 */

/** Largest request body read, bytes. The largest valid generate body (2,000 astral
 * characters written as \uXXXX\uXXXX escapes, 24,000 bytes, plus the other fields) fits
 * well below it; a larger body is refused with 413 before parsing. */
export const MAX_BODY_BYTES = 64 * 1024;

export const PROMPT_MAX_CHARS = 2000;
export const MAX_NEW_TOKENS_MAX = 512;
export const TEMPERATURE_MAX = 5;
export const K_MAX = 100;

export type JsonSchema = { readonly [keyword: string]: unknown };

export const STOP_MAX = 4;
export const STOP_MAX_CHARS = 100;

/**
 * The sampling settings beyond the spec's temperature and top_k, in wire names: one fragment
 * for /generate (as documented extensions) and the /v1 routes. validation.ts turns them into
 * a SamplingSettings with one table (SAMPLING_WIRE_NAMES), the addon reads that value in one
 * function (native/JsArgs.cc ParseSamplingSettings).
 */
export const samplingProperties = deepFreeze({
  seed: {
    type: "integer",
    minimum: 0,
    maximum: Number.MAX_SAFE_INTEGER,
    description: "Extension: makes sampling reproducible (with n > 1, choice i draws with seed + i).",
  },
  top_p: {
    type: "number",
    exclusiveMinimum: 0,
    maximum: 1,
    description: "Extension: sample among the most likely tokens whose probabilities first reach top_p.",
  },
  min_p: {
    type: "number",
    minimum: 0,
    maximum: 1,
    description: "Extension: drop tokens less likely than min_p times the most likely one.",
  },
  presence_penalty: {
    type: "number",
    minimum: -2,
    maximum: 2,
    description: "Extension: subtracted from the logit of every token generated so far.",
  },
  frequency_penalty: {
    type: "number",
    minimum: -2,
    maximum: 2,
    description: "Extension: subtracted from a token's logit once per time it was generated.",
  },
  repetition_penalty: {
    type: "number",
    exclusiveMinimum: 0,
    maximum: 10,
    description: "Extension: divides positive (multiplies negative) logits of tokens in the prompt or generated so far.",
  },
  stop: {
    oneOf: [
      { type: "string", minLength: 1, maxLength: STOP_MAX_CHARS },
      { type: "array", maxItems: STOP_MAX, items: { type: "string", minLength: 1, maxLength: STOP_MAX_CHARS } },
      { type: "null" },
    ],
    description: `Extension: generation ends before the first of these strings (up to ${STOP_MAX}); it is not part of the text.`,
  },
});

export const generateRequestSchema = deepFreeze({
  title: "GenerateRequest",
  description: "A prompt to continue. Unknown fields are ignored; types are strict (no coercion).",
  type: "object",
  required: ["prompt"],
  properties: {
    prompt: {
      type: "string",
      minLength: 1,
      maxLength: PROMPT_MAX_CHARS,
      description: "Text to continue; its length is counted in Unicode code points.",
    },
    max_new_tokens: {
      type: "integer",
      minimum: 1,
      maximum: MAX_NEW_TOKENS_MAX,
      default: 64,
      description: "Most tokens to generate.",
    },
    temperature: {
      type: "number",
      exclusiveMinimum: 0,
      maximum: TEMPERATURE_MAX,
      default: 1.0,
      description: "Sampling temperature; very small values sample greedily.",
    },
    top_k: {
      type: ["integer", "null"],
      minimum: 1,
      default: null,
      description: "Sample among the k most likely tokens; null (or absent) means the whole vocabulary.",
    },
    ...samplingProperties,
  },
});

export const generateResponseSchema = deepFreeze({
  title: "GenerateResponse",
  type: "object",
  required: ["text", "latency_ms"],
  properties: {
    text: { type: "string", description: "The continuation of the prompt." },
    latency_ms: { type: "number", description: "Server-side latency from arrival to response, ms." },
  },
});

export const streamChunkSchema = deepFreeze({
  title: "StreamChunk",
  description:
    "One server-sent event per piece: `data: {\"token\": \"<piece>\"}` and a blank line. The stream " +
    "ends with `data: [DONE]`, or, after an error, with `event: error` and a JSON `{\"detail\", \"code\"}`.",
  type: "object",
  required: ["token"],
  properties: { token: { type: "string", description: "Whole UTF-8 text of one piece." } },
});

export const healthResponseSchema = deepFreeze({
  title: "HealthResponse",
  type: "object",
  required: ["status"],
  properties: { status: { const: "ok" } },
});

export const readyResponseSchema = deepFreeze({
  title: "ReadyResponse",
  type: "object",
  required: ["status"],
  properties: { status: { const: "ready" } },
});

/** Path parameters of GET /recommend/{user_id}, after strict integer parsing of the strings. */
export const recommendPathSchema = deepFreeze({
  title: "RecommendPath",
  type: "object",
  required: ["user_id"],
  properties: {
    user_id: {
      type: "integer",
      minimum: Number.MIN_SAFE_INTEGER,
      maximum: Number.MAX_SAFE_INTEGER,
      description: "The user; an optional minus sign and digits.",
    },
  },
});

/** Query parameters of GET /recommend/{user_id}; a repeated parameter is invalid. */
export const recommendQuerySchema = deepFreeze({
  title: "RecommendQuery",
  type: "object",
  properties: {
    k: { type: "integer", minimum: 1, maximum: K_MAX, default: 10, description: "How many items." },
  },
});

export const recommendResponseSchema = deepFreeze({
  title: "RecommendResponse",
  type: "object",
  required: ["user_id", "items", "fallback"],
  properties: {
    user_id: { type: "integer" },
    items: { type: "array", items: { type: "integer" }, description: "Raw movie identifiers, best first." },
    fallback: {
      type: "boolean",
      description: "True for a fallback result (unknown user, or the model failed or missed its budget).",
    },
  },
});

/** Most movie ids one GET /movies asks for, and most ratings one history returns. */
export const MOVIE_IDS_MAX = 100;
export const HISTORY_N_MAX = 100;

/** Query of GET /movies: `ids` is a comma-separated list, split before validation. */
export const moviesQuerySchema = deepFreeze({
  title: "MoviesQuery",
  type: "object",
  required: ["ids"],
  properties: {
    ids: {
      type: "array",
      minItems: 1,
      maxItems: MOVIE_IDS_MAX,
      items: { type: "integer", minimum: Number.MIN_SAFE_INTEGER, maximum: Number.MAX_SAFE_INTEGER },
      description: `Raw movie ids, comma-separated (1 to ${MOVIE_IDS_MAX}).`,
    },
  },
});

const movieProperties = {
  title: { type: ["string", "null"], description: "Null when the checkpoint has no title for the id." },
  genres: { type: "array", items: { type: "string" } },
};

export const moviesResponseSchema = deepFreeze({
  title: "MoviesResponse",
  type: "object",
  required: ["movies"],
  properties: {
    movies: {
      type: "array",
      description: "One entry per requested id, in the order asked.",
      items: {
        type: "object",
        required: ["id", "title", "genres"],
        properties: { id: { type: "integer" }, ...movieProperties },
      },
    },
  },
});

/** Query of GET /users/{user_id}/history. */
export const historyQuerySchema = deepFreeze({
  title: "HistoryQuery",
  type: "object",
  properties: {
    n: { type: "integer", minimum: 1, maximum: HISTORY_N_MAX, default: 20, description: "Most ratings returned." },
  },
});

export const historyResponseSchema = deepFreeze({
  title: "HistoryResponse",
  type: "object",
  required: ["user_id", "known", "ratings"],
  properties: {
    user_id: { type: "integer" },
    known: { type: "boolean", description: "False for a user the model does not know (no ratings)." },
    ratings: {
      type: "array",
      description: "The user's most recent ratings stored with the model, newest first.",
      items: {
        type: "object",
        required: ["movie_id", "rating", "timestamp", "title", "genres"],
        properties: {
          movie_id: { type: "integer" },
          rating: { type: "number" },
          timestamp: { type: "integer", description: "Unix seconds." },
          ...movieProperties,
        },
      },
    },
  },
});

export const validationErrorSchema = deepFreeze({
  title: "ValidationError",
  description: "422: every violation found, FastAPI-style.",
  type: "object",
  required: ["detail"],
  properties: {
    detail: {
      type: "array",
      items: {
        type: "object",
        required: ["loc", "msg", "type"],
        properties: {
          loc: {
            type: "array",
            items: { type: ["string", "integer"] },
            description: "Where: [\"body\" | \"path\" | \"query\", field...].",
          },
          msg: { type: "string" },
          type: { type: "string", description: "Machine-readable kind, e.g. missing, int_type, less_than_equal." },
        },
      },
    },
    code: { const: "ERR_VALIDATION" },
  },
});

export const errorSchema = deepFreeze({
  title: "Error",
  description: "Any error other than a validation error.",
  type: "object",
  required: ["detail", "code"],
  properties: {
    detail: { type: "string", description: "Human-readable message." },
    code: { type: "string", description: "Error code from the catalogue, e.g. ERR_QUEUE_FULL." },
  },
});

function deepFreeze<T extends object>(value: T): T {
  for (const child of Object.values(value)) {
    if (child !== null && typeof child === "object") deepFreeze(child);
  }
  return Object.freeze(value);
}
