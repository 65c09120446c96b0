/**
 * The registry and the HTTP metrics of both apps. Each app owns its own Registry (several
 * apps share a process); each adds its own metrics to it (text/metrics.ts, recsys/metrics.ts).
 */
import { Counter, Histogram, Registry, collectDefaultMetrics } from "prom-client";

/** Label of requests that matched no route: raw paths would explode cardinality. */
export const UNMATCHED_ROUTE = "unmatched";

export const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
export const SHORT_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

export interface HttpMetrics {
  readonly requests: Counter<"method" | "route" | "status">;
  readonly latency: Histogram<"route">;
  readonly rateLimited: Counter<"route">;
  readonly rateLimiterErrors: Counter<"route">;
}

/** prom-client gauges named like counters; each is only the sum of its labelled sibling
 * (nodejs_active_handles{type} and so on), and `promtool check metrics` rejects the names. */
const REDUNDANT_DEFAULT_METRICS = ["nodejs_active_handles_total", "nodejs_active_requests_total", "nodejs_active_resources_total"];

/** A registry with the Node process metrics (CPU, memory, event loop lag, GC, handles). */
export function createRegistry(): Registry {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  for (const name of REDUNDANT_DEFAULT_METRICS) registry.removeSingleMetric(name);
  return registry;
}

export function createHttpMetrics(registry: Registry): HttpMetrics {
  const registers = [registry];
  return {
    requests: new Counter({
      name: "http_requests_total",
      help: "HTTP requests answered, by method, route template and status (499: client went away first).",
      labelNames: ["method", "route", "status"] as const,
      registers,
    }),
    latency: new Histogram({
      name: "request_latency_seconds",
      help: "Time from a request's arrival to the end of its response, by route template.",
      labelNames: ["route"] as const,
      buckets: LATENCY_BUCKETS,
      registers,
    }),
    rateLimited: new Counter({
      name: "rate_limited_total",
      help: "Requests refused with 429 by the rate limiter, by route template.",
      labelNames: ["route"] as const,
      registers,
    }),
    rateLimiterErrors: new Counter({
      name: "rate_limiter_errors_total",
      help: "Rate limiter calls that threw or rejected; those requests were served (fail open).",
      labelNames: ["route"] as const,
      registers,
    }),
  };
}
