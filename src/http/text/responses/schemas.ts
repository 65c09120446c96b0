/**
 * The request schema of POST /v1/responses: the fields of OpenAI's Responses API this server
 * honours, with the shared sampling fragment (samplingProperties). Unlike the other /v1
 * routes, a field this server does not know is a 400 naming it (requests.ts KNOWN_FIELDS), as
 * OpenAI answers an unknown parameter: the Responses API keeps growing, and a field silently
 * ignored would change what the client asked for.
 */
import { MAX_NEW_TOKENS_MAX, samplingProperties } from "../schemas.js";

const nullable = (schema: object) => ({ anyOf: [schema, { type: "null" }] });

/** Text content parts of a message item (input_text; output_text when an assistant turn is replayed). */
const textPart = {
  type: "object",
  required: ["type", "text"],
  properties: {
    type: { enum: ["input_text", "output_text", "text"] },
    text: { type: "string" },
  },
} as const;

const messageItem = {
  type: "object",
  required: ["role", "content"],
  properties: {
    type: { const: "message" },
    role: { enum: ["user", "system", "developer", "assistant"] },
    content: { anyOf: [{ type: "array", items: textPart }, { type: "string" }] },
    id: { type: "string" },
    status: { type: "string" },
  },
} as const;

const functionCallItem = {
  type: "object",
  required: ["type", "call_id", "name", "arguments"],
  properties: {
    type: { const: "function_call" },
    call_id: { type: "string", minLength: 1 },
    name: { type: "string", minLength: 1 },
    arguments: { type: "string" },
    id: { type: "string" },
    status: { type: "string" },
  },
} as const;

const functionCallOutputItem = {
  type: "object",
  required: ["type", "call_id", "output"],
  properties: {
    type: { const: "function_call_output" },
    call_id: { type: "string", minLength: 1 },
    output: { anyOf: [{ type: "array", items: textPart }, { type: "string" }] },
    id: { type: "string" },
    status: { type: "string" },
  },
} as const;

export const responseRequestSchema = {
  title: "ResponseRequest",
  type: "object",
  required: ["model", "input"],
  properties: {
    model: { type: "string", minLength: 1, description: "The served model's id (GET /v1/models)." },
    input: {
      anyOf: [
        { type: "string", minLength: 1 },
        {
          type: "array",
          minItems: 1,
          items: {
            type: "object",
            description: "A message item (role, text content), a function_call or a function_call_output item.",
          },
        },
      ],
      description:
        "A string (one user message) or a list of items: messages with text content, function_call items " +
        "and their function_call_output (tool results).",
    },
    instructions: nullable({ type: "string", description: "A system message put first; not carried to a continuation." }),
    max_output_tokens: nullable({ type: "integer", minimum: 1, maximum: MAX_NEW_TOKENS_MAX }),
    temperature: nullable({ type: "number", minimum: 0, maximum: 2, description: "0 samples greedily. Default 1." }),
    top_k: nullable({ type: "integer", minimum: 0, description: "Extension: 0 or absent means the whole vocabulary." }),
    stream: nullable({ type: "boolean" }),
    store: nullable({ type: "boolean", description: "Keep the response for GET and previous_response_id. Default true." }),
    previous_response_id: nullable({ type: "string", minLength: 1, description: "Continue a stored response's conversation." }),
    metadata: nullable({ type: "object", maxProperties: 16, additionalProperties: { type: "string", maxLength: 512 } }),
    user: { type: "string", description: "Accepted and ignored (not logged)." },
    parallel_tool_calls: nullable({ type: "boolean", description: "false: at most one call per response. Default true." }),
    tools: nullable({
      type: "array",
      items: {
        type: "object",
        required: ["type", "name"],
        properties: {
          type: { const: "function" },
          name: { type: "string", minLength: 1, maxLength: 64, pattern: "^[A-Za-z0-9_.-]+$" },
          description: nullable({ type: "string" }),
          parameters: nullable({ type: "object" }),
          strict: nullable({ type: "boolean" }),
        },
      },
      description: "Function tools (Responses' flat form); calls are parsed from the model's output in its template's format.",
    }),
    tool_choice: nullable({
      anyOf: [
        { enum: ["none", "auto", "required"] },
        { type: "object", required: ["type", "name"], properties: { type: { const: "function" }, name: { type: "string" } } },
      ],
      description: "\"required\" or a named function is enforced token by token (constrained decoding).",
    }),
    text: nullable({
      type: "object",
      properties: {
        format: nullable({
          type: "object",
          required: ["type"],
          properties: {
            type: { enum: ["text", "json_object", "json_schema"] },
            name: { type: "string" },
            description: { type: "string" },
            schema: { type: ["object", "boolean"] },
            strict: nullable({ type: "boolean" }),
          },
        }),
        verbosity: nullable({ enum: ["low", "medium", "high"] }),
      },
      description: "`format`: json_object or json_schema output, enforced token by token.",
    }),
    ...samplingProperties,
  },
} as const;

/** The item schemas, checked one by one so a 400 names `input.N.field` of the item's own kind. */
export const inputItemSchemas = { message: messageItem, function_call: functionCallItem, function_call_output: functionCallOutputItem } as const;
