/**
 * What both apps share: request metrics and ids, /health, /ready, /metrics, /openapi.json, API
 * keys and the rate-limit middleware in front of every other route, a JSON 404, 405 with
 * Allow, a JSON error handler, and the start()/stop() lifespan hooks. Routes are registered
 * as descriptors (routes.ts); the OpenAPI document, the 405 answers and the error format of
 * each request come from that list.
 */
import express, { type RequestHandler } from "express";
import type { Registry } from "prom-client";
import { ServingError } from "../../errors.js";
import type { RateLimiter, ServingApp } from "../../types.js";
import { PROJECT_ERRORS, errorHandler, sendError, type ErrorFormat } from "./errorResponse.js";
import { silentLogger, type LoggerLike } from "./logger.js";
import { UNMATCHED_ROUTE, createHttpMetrics, createRegistry, type HttpMetrics } from "./metrics.js";
import { apiKeyAuth } from "./apiKeys.js";
import { rateLimit } from "./rateLimit.js";
import { Readiness } from "./readiness.js";
import { labelRoute, observeRequests } from "./requestContext.js";
import { openApiDocument } from "./openapiDocument.js";
import { json, ref, type RouteDescriptor } from "./routes.js";

export interface ShellOptions {
  rateLimiter?: RateLimiter | null;
  logger?: LoggerLike;
  /** When non-empty, every route but /health, /ready and /metrics needs one. */
  apiKeys?: readonly string[] | null;
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
  /** Every route registered so far, in order. */
  readonly routes: readonly RouteDescriptor[];
  /** Registers routes (guarded unless `open`), each labelled in metrics by its template. */
  register(routes: readonly RouteDescriptor[]): void;
  /** Adds /openapi.json (of every route registered, titled `title`), the 404 and the error handler, and the lifespan: the app is done. */
  finish(title: string, lifespan: Lifespan): ServingApp;
}

/** The route descriptors an app made by the shell registered, in order (empty for any other app). */
export function routesOf(app: express.Express): readonly RouteDescriptor[] {
  return (app.locals["routes"] as readonly RouteDescriptor[] | undefined) ?? [];
}

export function createAppShell(options: ShellOptions = {}): AppShell {
  const logger = options.logger ?? silentLogger;
  const registry = createRegistry();
  const metrics = createHttpMetrics(registry);
  // Every route's path as a pattern, with its methods and error format: a known path asked
  // with another method is a 405 with Allow (in that path's format), not a 404.
  const known: { pattern: RegExp; methods: Set<string>; errors: ErrorFormat }[] = [];
  const routes: RouteDescriptor[] = [];
  const remember = (route: RouteDescriptor) => {
    const { method, path } = route;
    const source = `^${path.replace(/[.*+?^${}()|[\]\\]/g, "\\$&").replace(/:\w+/g, "[^/]+")}$`;
    let entry = known.find((k) => k.pattern.source === source);
    if (!entry) known.push((entry = { pattern: new RegExp(source), methods: new Set(), errors: route.errors ?? PROJECT_ERRORS }));
    entry.methods.add(method.toUpperCase());
    if (method === "get") entry.methods.add("HEAD");
  };
  const knownPath = (path: string) => known.find((k) => k.pattern.test(path));
  const app = express();
  app.disable("x-powered-by");
  app.set("etag", false);

  const readiness = new Readiness();
  if (options.readyFromCreation) readiness.markStarted();

  app.use(observeRequests(metrics, logger));

  const limiter = options.rateLimiter ? rateLimit(options.rateLimiter, metrics, logger) : null;
  // API keys first: the limiter is keyed by the authenticated key.
  const auth = options.apiKeys && options.apiKeys.length > 0 ? apiKeyAuth(options.apiKeys) : null;
  const front = [auth, limiter].filter((handler): handler is RequestHandler => handler !== null);
  // The route label is set in the same router layer as the first handler: one layer fewer
  // per request than a separate labelling middleware.
  const guarded = (
    route: string,
    errors: Parameters<typeof labelRoute>[1],
    handlers: RequestHandler[],
  ): RequestHandler[] => {
    const [first, ...rest] = [...front, ...handlers];
    return [labelRoute(route, errors, first!), ...rest];
  };

  const register = (list: readonly RouteDescriptor[]): void => {
    for (const route of list) {
      routes.push(route);
      remember(route);
      const errors = route.errors ?? PROJECT_ERRORS;
      const handlers = route.open
        ? [labelRoute(route.path, errors, route.handlers[0]!), ...route.handlers.slice(1)]
        : guarded(route.path, errors, route.handlers);
      app[route.method](route.path, ...handlers);
    }
  };

  // Before anything guarded: probes and scrapes are never authenticated nor rate limited (spec §4).
  register([
    {
      method: "get",
      path: "/health",
      open: true,
      doc: {
        summary: "Liveness; answers whatever the lifespan state. Never rate limited.",
        operationId: "health",
        responses: { "200": { description: "Alive.", content: json(ref("HealthResponse")) } },
      },
      handlers: [
        (_req, res) => {
          res.json({ status: "ok" });
        },
      ],
    },
    {
      method: "get",
      path: "/ready",
      open: true,
      doc: {
        summary:
          "Readiness, for load balancers: 200 once the model is loaded and warmed up, 503 before and from the moment a drain starts. Never rate limited.",
        operationId: "ready",
        responses: {
          "200": { description: "Ready for traffic.", content: json(ref("ReadyResponse")) },
          "503": { description: "Loading or draining (code ERR_NOT_READY): send traffic elsewhere.", content: json(ref("Error")) },
        },
      },
      handlers: [
        (_req, res) => {
          if (readiness.ready) {
            res.json({ status: "ready" });
            return;
          }
          sendError(res, new ServingError("ERR_NOT_READY", "not ready: the app is loading or draining"));
        },
      ],
    },
    {
      method: "get",
      path: "/metrics",
      open: true,
      doc: {
        summary: "Prometheus metrics of this app and its process. Never rate limited.",
        operationId: "metrics",
        responses: {
          "200": { description: "Text exposition format.", content: { "text/plain": { schema: { type: "string" } } } },
        },
      },
      handlers: [
        async (_req, res) => {
          const text = await registry.metrics();
          res.setHeader("Content-Type", registry.contentType);
          res.send(text);
        },
      ],
    },
  ]);

  return {
    app,
    registry,
    metrics,
    logger,
    readiness,
    register,
    routes,
    finish(title, lifespan) {
      let openapi: object | undefined;
      register([
        {
          method: "get",
          path: "/openapi.json",
          doc: {
            summary: "This document.",
            operationId: "openapi",
            responses: { "200": { description: "OpenAPI 3.1 document.", content: json({ type: "object" }) } },
          },
          handlers: [
            (_req, res) => {
              res.json(openapi);
            },
          ],
        },
      ]);
      openapi = openApiDocument(routes, { title, rateLimited: limiter !== null, authenticated: auth !== null });
      app.locals["openapi"] = openapi;
      app.locals["routes"] = routes;
      const unmatched: RequestHandler = (req, res) => {
        const allowed = knownPath(req.path)?.methods;
        if (allowed) {
          res.setHeader("Allow", [...allowed].join(", "));
          sendError(res, new ServingError("ERR_METHOD_NOT_ALLOWED", `${req.method} is not allowed on ${req.path}`));
          return;
        }
        sendError(res, new ServingError("ERR_NOT_FOUND", `No route for ${req.method} ${req.path}`));
      };
      app.use(...guarded(UNMATCHED_ROUTE, (req) => knownPath(req.path)?.errors ?? PROJECT_ERRORS, [unmatched]));
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
