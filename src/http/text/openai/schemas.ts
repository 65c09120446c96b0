/**
 * Request schemas of the OpenAI-compatible routes: the fields of OpenAI's completions and
 * chat completions APIs this server honours, with the shared sampling fragment
 * (samplingProperties) and its extensions (top_k, min_p, repetition_penalty, as vLLM
 * accepts them). Unknown fields are ignored, as on the spec's routes.
 */
import { responseFormatSchema } from "../responseFormat.js";
import { MAX_NEW_TOKENS_MAX, samplingProperties } from "../schemas.js";
import { structuredOutputsProperties } from "../structuredOutputs.js";

/** Most choices one request may ask for (prompts x n). */
export const MAX_CHOICES = 16;
export const MAX_LOGPROBS_COMPLETIONS = 5;
export const MAX_TOP_LOGPROBS = 20;
/** max_tokens when the request gives none: OpenAI's 16 for completions; a chat reply gets more room. */
export const DEFAULT_MAX_TOKENS = { completions: 16, chat: 256 } as const;

const nullable = (schema: object) => ({ anyOf: [schema, { type: "null" }] });

const common = {
  model: { type: "string", minLength: 1, description: "The served model's id (GET /v1/models)." },
  max_tokens: nullable({ type: "integer", minimum: 1, maximum: MAX_NEW_TOKENS_MAX }),
  temperature: nullable({ type: "number", minimum: 0, maximum: 2, description: "0 samples greedily. Default 1." }),
  top_k: nullable({ type: "integer", minimum: 0, description: "Extension: 0 or absent means the whole vocabulary." }),
  n: nullable({ type: "integer", minimum: 1, maximum: MAX_CHOICES, description: "Choices per prompt, sharing one prefill." }),
  stream: nullable({ type: "boolean" }),
  stream_options: nullable({
    type: "object",
    properties: { include_usage: { type: "boolean" } },
  }),
  user: { type: "string", description: "Accepted and ignored (not logged)." },
  response_format: responseFormatSchema,
  ...structuredOutputsProperties,
  ...samplingProperties,
} as const;

const tokenIds = { type: "array", minItems: 1, items: { type: "integer", minimum: 0 } } as const;

export const completionRequestSchema = {
  title: "CompletionRequest",
  type: "object",
  required: ["model", "prompt"],
  properties: {
    ...common,
    prompt: {
      anyOf: [
        { type: "string", minLength: 1 },
        { type: "array", minItems: 1, maxItems: MAX_CHOICES, items: { type: "string", minLength: 1 } },
        tokenIds,
        { type: "array", minItems: 1, maxItems: MAX_CHOICES, items: tokenIds },
      ],
      description: "A string, strings, token ids, or lists of token ids.",
    },
    logprobs: nullable({ type: "integer", minimum: 0, maximum: MAX_LOGPROBS_COMPLETIONS }),
    echo: nullable({ type: "boolean" }),
  },
} as const;

const contentPart = {
  type: "object",
  required: ["type"],
  properties: { type: { const: "text" }, text: { type: "string" } },
} as const;

const toolSchema = {
  type: "object",
  required: ["type", "function"],
  properties: {
    type: { const: "function" },
    function: {
      type: "object",
      required: ["name"],
      properties: {
        name: { type: "string", minLength: 1, maxLength: 64, pattern: "^[A-Za-z0-9_.-]+$" },
        description: { type: "string" },
        parameters: { type: "object" },
        strict: nullable({ type: "boolean" }),
      },
    },
  },
} as const;

const toolCallSchema = {
  type: "object",
  required: ["function"],
  properties: {
    id: { type: "string" },
    type: { const: "function" },
    function: { type: "object", required: ["name", "arguments"], properties: { name: { type: "string" }, arguments: { type: "string" } } },
  },
} as const;

export const chatCompletionRequestSchema = {
  title: "ChatCompletionRequest",
  type: "object",
  required: ["model", "messages"],
  properties: {
    ...common,
    messages: {
      type: "array",
      minItems: 1,
      items: {
        type: "object",
        required: ["role"],
        properties: {
          role: { enum: ["system", "developer", "user", "assistant", "tool"] },
          content: { anyOf: [{ type: "string" }, { type: "array", items: contentPart }, { type: "null" }] },
          name: { type: "string" },
          tool_calls: nullable({ type: "array", items: toolCallSchema }),
          tool_call_id: { type: "string" },
        },
      },
    },
    tools: nullable({ type: "array", items: toolSchema }),
    tool_choice: nullable({
      anyOf: [
        { enum: ["none", "auto", "required"] },
        { type: "object", required: ["type", "function"], properties: { type: { const: "function" }, function: { type: "object", required: ["name"], properties: { name: { type: "string" } } } } },
      ],
    }),
    parallel_tool_calls: nullable({ type: "boolean" }),
    max_completion_tokens: nullable({ type: "integer", minimum: 1, maximum: MAX_NEW_TOKENS_MAX }),
    logprobs: nullable({ type: "boolean" }),
    top_logprobs: nullable({ type: "integer", minimum: 0, maximum: MAX_TOP_LOGPROBS }),
  },
} as const;
