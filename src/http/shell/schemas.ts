/**
 * Wire schemas (JSON Schema 2020-12, the dialect of OpenAPI 3.1) that both apps share. Schemas
 * are data: validation compiles them once (validation.ts), and the OpenAPI documents embed
 * them, so what is documented is what is enforced. Each app keeps its own beside it
 * (text/schemas.ts, recsys/schemas.ts).
 */

/** Largest request body read, bytes. The largest valid generate body (2,000 astral
 * characters written as \uXXXX\uXXXX escapes, 24,000 bytes, plus the other fields) fits
 * well below it; a larger body is refused with 413 before parsing. */
export const MAX_BODY_BYTES = 64 * 1024;

export type JsonSchema = { readonly [keyword: string]: unknown };

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

/** Freezes a schema and everything in it: compiled once, shared by every app. */
export function deepFreeze<T extends object>(value: T): T {
  for (const child of Object.values(value)) {
    if (child !== null && typeof child === "object") deepFreeze(child);
  }
  return Object.freeze(value);
}
