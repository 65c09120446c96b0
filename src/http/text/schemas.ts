/**
 * Wire schemas of the text app's spec routes, POST /generate and POST /generate/stream, and
 * the sampling fragment the /v1 schemas share (openai/schemas.ts).
 */
import { samplingSchemas } from "../../engine/sampling.js";
import { deepFreeze } from "../shell/schemas.js";
import { responseFormatSchema } from "./responseFormat.js";
import { structuredOutputsProperties } from "./structuredOutputs.js";

export const PROMPT_MAX_CHARS = 2000;
export const MAX_NEW_TOKENS_MAX = 512;
export const TEMPERATURE_MAX = 5;

export const STOP_MAX = 4;
export const STOP_MAX_CHARS = 100;

/**
 * The request fields beyond the spec's temperature and top_k, in wire names: one fragment for
 * /generate (as documented extensions) and the /v1 routes. The sampling settings' schemas
 * come from their one table (src/engine/sampling.ts SAMPLING_SETTINGS); `stop` is matched
 * on the text by the engine.
 */
export const samplingProperties = deepFreeze({
  ...samplingSchemas(),
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
    response_format: { ...responseFormatSchema, description: "Extension (OpenAI's field): the continuation is JSON, any object or one matching a JSON Schema." },
    ...structuredOutputsProperties,
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
