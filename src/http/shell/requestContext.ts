/**
 * Per-request facts shared by the middlewares: the route template (the metrics label), the
 * route's error format, and the arrival time (latency_ms, time to first token), plus the
 * request metrics themselves.
 */
import { randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";
import type { Request, RequestHandler, Response } from "express";
import type { ErrorFormat } from "./errorResponse.js";
import { silentLogger, type LoggerLike } from "./logger.js";
import { UNMATCHED_ROUTE, type HttpMetrics } from "./metrics.js";

const ROUTE = "route";
const ERRORS = "errors";
const ARRIVED_AT = "arrivedAt";
const REQUEST_ID = "requestId";

/** A client's (or proxy's) id is kept when it is short and plain; anything else is replaced,
 * so a hostile value never reaches the logs or the response headers. */
const SANE_REQUEST_ID = /^[A-Za-z0-9._:\/+=-]{1,128}$/;

/** The X-Request-Id of this request (the client's when sane, else generated). */
export function requestIdOf(res: Response): string | undefined {
  const id: unknown = res.locals[REQUEST_ID];
  return typeof id === "string" ? id : undefined;
}

/** Route template of this request, or UNMATCHED_ROUTE. */
export function routeOf(res: Response): string {
  const route: unknown = res.locals[ROUTE];
  return typeof route === "string" ? route : UNMATCHED_ROUTE;
}

/** performance.now() when the request's headers arrived. */
export function arrivalOf(res: Response): number {
  const at: unknown = res.locals[ARRIVED_AT];
  return typeof at === "number" ? at : performance.now();
}

/** The error format of the request's route; undefined before it is known. */
export function errorFormatOf(res: Response): ErrorFormat | undefined {
  return res.locals[ERRORS] as ErrorFormat | undefined;
}

/**
 * `handler`, first marking the request with its route template, for labels (never the raw
 * path), and with the route's error format (or, for the requests no route matched, the one
 * their path calls for).
 */
export function labelRoute(
  route: string,
  errors: ErrorFormat | ((req: Request) => ErrorFormat),
  handler: RequestHandler,
): RequestHandler {
  return (req, res, next) => {
    res.locals[ROUTE] = route;
    res.locals[ERRORS] = typeof errors === "function" ? errors(req) : errors;
    return handler(req, res, next);
  };
}

/** First middleware: names (X-Request-Id), counts, times and logs every request, whatever answers it. */
export function observeRequests(metrics: HttpMetrics, logger: LoggerLike = silentLogger): RequestHandler {
  return (req, res, next) => {
    const arrivedAt = performance.now();
    res.locals[ARRIVED_AT] = arrivedAt;
    const sent = req.headers["x-request-id"];
    const requestId = typeof sent === "string" && SANE_REQUEST_ID.test(sent) ? sent : randomUUID();
    res.locals[REQUEST_ID] = requestId;
    res.setHeader("X-Request-Id", requestId);
    // "close" comes once per response: after "finish" when it was sent, or when the
    // connection went first (one listener per request, not two).
    res.once("close", () => {
      const route = routeOf(res);
      // 499 (nginx's "client closed request"): the client left before any answer.
      const status = res.headersSent ? String(res.statusCode) : "499";
      metrics.requests.inc({ method: req.method, route, status });
      const seconds = (performance.now() - arrivedAt) / 1000;
      metrics.latency.observe({ route }, seconds);
      logger.info(
        { requestId, method: req.method, route, status: Number(status), latencyMs: Math.round(seconds * 1e4) / 10 },
        "request",
      );
    });
    next();
  };
}
