/**
 * Per-request facts shared by the middlewares: the route template (the metrics label) and
 * the arrival time (latency_ms, time to first token), plus the request metrics themselves.
 */
import { performance } from "node:perf_hooks";
import type { RequestHandler, Response } from "express";
import { UNMATCHED_ROUTE, type HttpMetrics } from "./metrics.js";

const ROUTE = "route";
const ARRIVED_AT = "arrivedAt";

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

/** `handler`, first marking the request with its route template, for labels (never the raw path). */
export function labelRoute(route: string, handler: RequestHandler): RequestHandler {
  return (req, res, next) => {
    res.locals[ROUTE] = route;
    return handler(req, res, next);
  };
}

/** First middleware: counts and times every request, whatever answers it. */
export function observeRequests(metrics: HttpMetrics): RequestHandler {
  return (req, res, next) => {
    const arrivedAt = performance.now();
    res.locals[ARRIVED_AT] = arrivedAt;
    // "close" comes once per response: after "finish" when it was sent, or when the
    // connection went first (one listener per request, not two).
    res.once("close", () => {
      const route = routeOf(res);
      // 499 (nginx's "client closed request"): the client left before any answer.
      const status = res.headersSent ? String(res.statusCode) : "499";
      metrics.requests.inc({ method: req.method, route, status });
      metrics.latency.observe({ route }, (performance.now() - arrivedAt) / 1000);
    });
    next();
  };
}
