/**
 * The one rate-limit middleware of both apps (spec §4): runs first on every route but
 * /health and /metrics. Key: the X-API-Key header when present and non-empty, else the
 * client host (req.ip; with Express's default trust proxy that is the socket address).
 * A limiter that throws or rejects fails open: the request is served, the error logged and
 * counted in rate_limiter_errors_total, so a Redis outage does not take the service down.
 */
import type { Request, RequestHandler } from "express";
import { ServingError } from "../../errors.js";
import type { RateLimiter } from "../../types.js";
import { authenticatedClient } from "./apiKeys.js";
import { sendError } from "./errorResponse.js";
import type { LoggerLike } from "./logger.js";
import type { HttpMetrics } from "./metrics.js";
import { routeOf } from "./requestContext.js";

const DEFAULT_RETRY_AFTER_S = 1;

export function rateLimitKey(req: Request): string {
  // With API keys configured: a digest of the authenticated key (apiKeys.ts).
  const client = req.res ? authenticatedClient(req.res) : undefined;
  if (client !== undefined) return client;
  const apiKey = req.get("x-api-key");
  if (apiKey !== undefined && apiKey !== "") return apiKey;
  const host = req.ip ?? req.socket.remoteAddress ?? "unknown";
  // A dual-stack socket reports IPv4 clients as ::ffff:a.b.c.d; the client's host is a.b.c.d
  // (one client, one key, whichever socket the server listens on).
  return host.startsWith("::ffff:") && host.includes(".") ? host.slice("::ffff:".length) : host;
}

/** Whole seconds, at least 1, from the limiter when it can tell. */
export function retryAfterSeconds(limiter: RateLimiter, key: string): number {
  try {
    const seconds = limiter.retryAfterSeconds?.(key);
    if (typeof seconds === "number" && Number.isFinite(seconds)) return Math.max(1, Math.ceil(seconds));
  } catch {
    // The limiter's hint is optional; a broken one costs only precision.
  }
  return DEFAULT_RETRY_AFTER_S;
}

export function rateLimit(limiter: RateLimiter, metrics: HttpMetrics, logger: LoggerLike): RequestHandler {
  return async (req, res, next) => {
    const key = rateLimitKey(req);
    const route = routeOf(res);
    let allowed: boolean;
    try {
      allowed = Boolean(await limiter.allow(key));
    } catch (err) {
      metrics.rateLimiterErrors.inc({ route });
      logger.error({ err, route }, "rate limiter failed; serving the request (fail open)");
      next();
      return;
    }
    if (allowed) {
      next();
      return;
    }
    metrics.rateLimited.inc({ route });
    res.setHeader("Retry-After", String(retryAfterSeconds(limiter, key)));
    sendError(res, new ServingError("ERR_RATE_LIMITED", "Too many requests"));
  };
}
