/**
 * What both apps share: request metrics and ids, /health, /ready, /metrics, /openapi.json, the rate-limit
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
import { rateLimit } from "./rateLimit.js";
import { Readiness } from "./readiness.js";
import { labelRoute, observeRequests } from "./requestContext.js";

export interface ShellOptions {
  rateLimiter?: RateLimiter | null;
  logger?: LoggerLike;
  /** Ready before start() (an app whose model is loaded before it is created). Default false. */
  readyFromCreation?: boolean;
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
  readonly readiness: Readiness;
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

  const readiness = new Readiness();
  if (options.readyFromCreation) readiness.markStarted();

  app.use(observeRequests(metrics, logger));

  // Registered before the limiter: probes and scrapes are never rate limited (spec §4).
  remember("get", "/health");
  remember("get", "/ready");
  remember("get", "/metrics");
  app.get(
    "/health",
    labelRoute("/health", (_req, res) => {
      res.json({ status: "ok" });
    }),
  );
  // Readiness, for load balancers: 503 while loading and from the moment a drain starts.
  app.get(
    "/ready",
    labelRoute("/ready", (_req, res) => {
      if (readiness.ready) {
        res.json({ status: "ready" });
        return;
      }
      sendError(res, new ServingError("ERR_NOT_READY", "not ready: the app is loading or draining"));
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
  // The route label is set in the same router layer as the limiter (or the handler): one
  // layer fewer per request than a separate labelling middleware.
  const guarded = (route: string, handlers: RequestHandler[]): RequestHandler[] => {
    const [first, ...rest] = limiter ? [limiter, ...handlers] : handlers;
    return [labelRoute(route, first!), ...rest];
  };

  return {
    app,
    registry,
    metrics,
    logger,
    readiness,
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
      // Readiness follows the lifespan: ready once started, not ready as soon as stop() begins.
      return Object.assign(app, {
        async start() {
          await lifespan.start();
          readiness.markStarted();
        },
        async stop() {
          readiness.markDraining();
          await lifespan.stop();
        },
        readiness,
      }) as ServingApp;
    },
  };
}
