/**
 * Every error leaves as JSON, in the error format of the route that answers (a route
 * descriptor's `errors`): by default `{"detail": [issues], "code": "ERR_VALIDATION"}` for 422
 * and `{"detail": "message", "code": "ERR_..."}` otherwise (FastAPI-like). Messages of
 * internal failures stay in the log, not on the wire.
 */
import type { ErrorRequestHandler, Response } from "express";
import { ServingError, asServingError } from "../../errors.js";
import type { LoggerLike } from "./logger.js";
import { errorFormatOf, requestIdOf } from "./requestContext.js";
import { errorSchema, type JsonSchema } from "./schemas.js";
import { invalid } from "./validation.js";

/** How a route answers errors: a status and JSON body for each, and the schema documenting them. */
export interface ErrorFormat {
  answer(err: ServingError): { status: number; body: unknown };
  /** The component schema of its bodies in the OpenAPI document. */
  readonly schemaName: string;
  readonly schema: JsonSchema;
}

export interface ErrorBody {
  detail: unknown;
  code: string;
}

/** Seconds a client should wait before retrying a 503 (queue full, not serving). */
const RETRY_AFTER_UNAVAILABLE_S = 1;

export function errorBody(err: ServingError): ErrorBody {
  if (err.code === "ERR_VALIDATION") return { detail: err.detail ?? [], code: err.code };
  const exposed = err.status < 500 || err.status === 503;
  return { detail: exposed ? err.message : "Internal Server Error", code: err.code };
}

/** The project's format, of every route that names no other. */
export const PROJECT_ERRORS: ErrorFormat = {
  answer: (err) => ({ status: err.status, body: errorBody(err) }),
  schemaName: "Error",
  schema: errorSchema,
};

/** Answers `err` in the format of the request's route. */
export function sendError(res: Response, err: ServingError): void {
  if (err.status === 503 && !res.hasHeader("Retry-After")) {
    res.setHeader("Retry-After", String(RETRY_AFTER_UNAVAILABLE_S));
  }
  const { status, body } = (errorFormatOf(res) ?? PROJECT_ERRORS).answer(err);
  res.status(status).json(body);
}

/** Anything thrown: ours by its code; an addon error by its `.code`; a 4xx from Express
 * itself (a path that fails to decode) as 422; the rest 500. */
export function toServingError(err: unknown): ServingError {
  if (err instanceof ServingError) return err;
  const status = (err as { status?: unknown; statusCode?: unknown } | null)?.status
    ?? (err as { statusCode?: unknown } | null)?.statusCode;
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== "string" && typeof status === "number" && status >= 400 && status < 500) {
    const message = err instanceof Error ? err.message : String(err);
    return invalid([{ loc: ["request"], msg: message, type: "bad_request" }]);
  }
  return asServingError(err);
}

/** The app's last middleware: a JSON answer for every error, never an HTML page. */
export function errorHandler(logger: LoggerLike): ErrorRequestHandler {
  return (err: unknown, req, res, _next) => {
    const serving = toServingError(err);
    if (serving.status >= 500 && serving.status !== 503) {
      logger.error({ err, code: serving.code, requestId: requestIdOf(res), method: req.method, url: req.originalUrl }, "request failed");
    }
    if (res.headersSent) {
      // Too late for a status: end what was started rather than leave it hanging.
      if (!res.writableEnded) res.end();
      return;
    }
    sendError(res, serving);
  };
}
