/**
 * What both apps share: request metrics, /health, /metrics, /openapi.json, the rate-limit
 * middleware in front of every other route, a JSON 404 and a JSON error handler, and the
 * start()/stop() lifespan hooks.
 */
import express, { type RequestHandler } from "express";
import type { Registry } from "prom-client";
import { ServingError } from "../errors.js";
import type { RateLimiter, ServingApp } from "../types.js";
import { errorHandler, sendError } from "./errorResponse.js";
import { silentLogger, type LoggerLike } from "./logger.js";
import { UNMATCHED_ROUTE, createHttpMetrics, createRegistry, type HttpMetrics } from "./metrics.js";
import { apiKeyAuth } from "./apiKeys.js";
import { rateLimit } from "./rateLimit.js";
import { labelRoute, observeRequests } from "./requestContext.js";

export interface ShellOptions {
  rateLimiter?: RateLimiter | null;
  logger?: LoggerLike;
  /** When non-empty, every route registered through route() (all but /health, /metrics) needs one. */
  apiKeys?: readonly string[] | null;
}

export interface Lifespan {
  start(): Promise<void>;
  stop(): Promise<void>;
}

export interface AppShell {
  readonly app: express.Express;
  readonly registry: Registry;
  readonly metrics: HttpMetrics;
  readonly logger: LoggerLike;
  /** Registers a rate-limited route, labelled in metrics by its template. */
  route(method: "get" | "post", path: string, ...handlers: RequestHandler[]): void;
  /** Adds /openapi.json, the 404 and the error handler, and the lifespan: the app is done. */
  finish(openapi: object, lifespan: Lifespan): ServingApp;
}

export function createAppShell(options: ShellOptions = {}): AppShell {
  const logger = options.logger ?? silentLogger;
  const registry = createRegistry();
  const metrics = createHttpMetrics(registry);
  // Every route's path as a pattern, with its methods: a known path asked with another
  // method is a 405 with Allow, not a 404.
  const known: { pattern: RegExp; methods: Set<string> }[] = [];
  const remember = (method: string, path: string) => {
    const source = `^${path.replace(/[.*+?^${}()|[\]\\]/g, "\\$&").replace(/:\w+/g, "[^/]+")}$`;
    let entry = known.find((k) => k.pattern.source === source);
    if (!entry) known.push((entry = { pattern: new RegExp(source), methods: new Set() }));
    entry.methods.add(method.toUpperCase());
    if (method === "get") entry.methods.add("HEAD");
  };
  const app = express();
  app.disable("x-powered-by");
  app.set("etag", false);

  app.use(observeRequests(metrics));

  // Registered before the limiter: probes and scrapes are never rate limited (spec §4).
  remember("get", "/health");
  remember("get", "/metrics");
  app.get(
    "/health",
    labelRoute("/health", (_req, res) => {
      res.json({ status: "ok" });
    }),
  );
  app.get(
    "/metrics",
    labelRoute("/metrics", async (_req, res) => {
      const text = await registry.metrics();
      res.setHeader("Content-Type", registry.contentType);
      res.send(text);
    }),
  );

  const limiter = options.rateLimiter ? rateLimit(options.rateLimiter, metrics, logger) : null;
  // API keys first: the limiter is keyed by the authenticated key.
  const auth = options.apiKeys && options.apiKeys.length > 0 ? apiKeyAuth(options.apiKeys) : null;
  const front = [auth, limiter].filter((handler): handler is RequestHandler => handler !== null);
  // The route label is set in the same router layer as the first handler: one layer fewer
  // per request than a separate labelling middleware.
  const guarded = (route: string, handlers: RequestHandler[]): RequestHandler[] => {
    const [first, ...rest] = [...front, ...handlers];
    return [labelRoute(route, first!), ...rest];
  };

  return {
    app,
    registry,
    metrics,
    logger,
    route(method, path, ...handlers) {
      remember(method, path);
      app[method](path, ...guarded(path, handlers));
    },
    finish(openapi, lifespan) {
      remember("get", "/openapi.json");
      app.get(
        "/openapi.json",
        ...guarded("/openapi.json", [
          (_req, res) => {
            res.json(openapi);
          },
        ]),
      );
      const unmatched: RequestHandler = (req, res) => {
        const allowed = known.find((k) => k.pattern.test(req.path))?.methods;
        if (allowed) {
          res.setHeader("Allow", [...allowed].join(", "));
          sendError(res, new ServingError("ERR_METHOD_NOT_ALLOWED", `${req.method} is not allowed on ${req.path}`));
          return;
        }
        sendError(res, new ServingError("ERR_NOT_FOUND", `No route for ${req.method} ${req.path}`));
      };
      app.use(...guarded(UNMATCHED_ROUTE, [unmatched]));
      app.use(errorHandler(logger));
      return Object.assign(app, lifespan) as ServingApp;
    },
  };
}
