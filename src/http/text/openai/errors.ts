/**
 * Errors of the /v1 routes in OpenAI's shape, `{"error": {"message", "type", "param",
 * "code"}}`, so the official clients raise their own error classes (BadRequestError,
 * AuthenticationError, NotFoundError, RateLimitError, ...). A validation error, malformed
 * JSON included, is a 400 there (the spec's routes keep their 422).
 */
import type { ServingError } from "../../../errors.js";
import type { ErrorFormat } from "../../shell/errorResponse.js";
import type { ValidationIssue } from "../../shell/validation.js";

export interface OpenAiErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

/** Status and body of `err` on a /v1 route. */
export function openAiError(err: ServingError): { status: number; body: OpenAiErrorBody } {
  const body = (type: string, message: string, code: string | null, param: string | null = null): OpenAiErrorBody => ({
    error: { message, type, param, code },
  });
  switch (err.code) {
    case "ERR_VALIDATION": {
      const issues = (err.detail ?? []) as ValidationIssue[];
      const first = issues[0];
      // "body.messages.0.content" -> "messages.0.content"; OpenAI names the offending field.
      const param = first ? first.loc.slice(1).join(".") || null : null;
      return { status: 400, body: body("invalid_request_error", err.message, first?.type ?? null, param) };
    }
    case "ERR_UNAUTHORIZED":
      return { status: 401, body: body("invalid_request_error", err.message, "invalid_api_key") };
    case "ERR_NOT_FOUND": {
      // A stored object (a response) that is not there; its field when the body named it.
      const first = ((err.detail ?? []) as ValidationIssue[])[0];
      return { status: 404, body: body("invalid_request_error", err.message, "not_found", first ? first.loc.slice(1).join(".") : null) };
    }
    case "ERR_MODEL_NOT_FOUND":
      return { status: 404, body: body("invalid_request_error", err.message, "model_not_found", "model") };
    case "ERR_RATE_LIMITED":
      return { status: 429, body: body("rate_limit_error", err.message, "rate_limit_exceeded") };
    case "ERR_QUEUE_FULL":
    case "ERR_NOT_SERVING":
    case "ERR_DISPOSED":
      return { status: 503, body: body("server_error", err.message, "overloaded") };
    default: {
      const exposed = err.status < 500;
      const type = err.status < 500 ? "invalid_request_error" : "server_error";
      return {
        status: err.status,
        body: body(type, exposed ? err.message : "Internal Server Error", err.code.toLowerCase().replace(/^err_/, "")),
      };
    }
  }
}

/** The error format of the /v1 routes (their descriptors' `errors`). */
export const OPENAI_ERRORS: ErrorFormat = {
  answer: openAiError,
  schemaName: "OpenAiError",
  schema: {
    title: "OpenAiError",
    description: "Errors of the /v1 routes, in OpenAI's shape (what the OpenAI clients raise as their error classes).",
    type: "object",
    required: ["error"],
    properties: {
      error: {
        type: "object",
        required: ["message", "type", "param", "code"],
        properties: {
          message: { type: "string" },
          type: { type: "string", description: "invalid_request_error, rate_limit_error or server_error." },
          param: { type: ["string", "null"], description: "The offending field, when one is." },
          code: { type: ["string", "null"], description: "e.g. invalid_api_key, model_not_found, rate_limit_exceeded, overloaded." },
        },
      },
    },
  },
};
