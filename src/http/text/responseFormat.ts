/**
 * OpenAI's `response_format` (and its schema on the wire) as an engine constraint, shared by
 * /v1/chat/completions, /v1/completions and, as an extension, /generate and /generate/stream.
 */
import { ServingError } from "../../errors.js";
import type { GenerationConstraint } from "../../types.js";

export const responseFormatSchema = {
  anyOf: [
    {
      type: "object",
      required: ["type"],
      properties: {
        type: { enum: ["text", "json_object", "json_schema"] },
        json_schema: {
          type: "object",
          properties: {
            name: { type: "string" },
            description: { type: "string" },
            schema: { type: ["object", "boolean"] },
            strict: { type: ["boolean", "null"] },
          },
        },
      },
      description:
        '`{"type": "json_object"}`: any JSON object; `{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}`: JSON matching the schema. Enforced token by token.',
    },
    { type: "null" },
  ],
} as const;

/** The constraint `response_format` asks for; undefined for text (or none). */
export function constraintOfResponseFormat(value: unknown): GenerationConstraint | undefined {
  if (value === null || value === undefined) return undefined;
  const format = value as { type: string; json_schema?: { schema?: unknown; strict?: boolean | null } };
  if (format.type === "json_object") return { type: "json_object" };
  if (format.type !== "json_schema") return undefined;
  const schema = format.json_schema?.schema;
  if (schema === undefined) {
    throw new ServingError("ERR_VALIDATION", "response_format: json_schema.schema is required", {
      detail: [{ loc: ["body", "response_format", "json_schema", "schema"], msg: "json_schema.schema is required", type: "missing" }],
    });
  }
  return { type: "json_schema", schema: schema as Record<string, unknown> | boolean, strict: format.json_schema?.strict !== false };
}
