/**
 * The recommendation app: GET /recommend/:user_id?k=, the playground at GET /, and the
 * shell. It serves from creation (start() is optional, so the app works as a plain Express
 * app); after stop() /recommend answers 503 until start() is called again; stop() waits for
 * calls in flight.
 */
import { performance } from "node:perf_hooks";
import type { RequestHandler } from "express";
import { ServingError } from "../errors.js";
import type { CreateRecsysAppOptions, Recommender, ServingApp } from "../types.js";
import { createAppShell } from "./appShell.js";
import { InFlight } from "./inFlight.js";
import type { LoggerLike } from "./logger.js";
import { createRecsysMetrics, type RecsysMetrics } from "./metrics.js";
import { recsysOpenApi } from "./openapi.js";
import { mountPlayground } from "./playground/index.js";
import { parseRecommendRequest } from "./validation.js";

export interface RecsysAppOptions extends CreateRecsysAppOptions {
  /** pino-compatible; silent by default. */
  logger?: LoggerLike;
}

export function createRecsysApp(recommender: Recommender, options: RecsysAppOptions = {}): ServingApp {
  const rateLimiter = options.rateLimiter ?? null;
  // The recommender is loaded (and warmed) before the app is made: ready from creation.
  const shell = createAppShell({ rateLimiter, logger: options.logger, readyFromCreation: true });
  const metrics = createRecsysMetrics(shell.registry);
  const calls = new InFlight();
  let serving = true;

  shell.route("get", "/recommend/:user_id", recommendHandler(recommender, metrics, calls, () => serving));
  mountPlayground(shell, "recsys");

  return shell.finish(recsysOpenApi({ rateLimited: rateLimiter !== null }), {
    async start() {
      serving = true;
    },
    async stop() {
      serving = false;
      await calls.idle();
    },
  });
}

function recommendHandler(
  recommender: Recommender,
  metrics: RecsysMetrics,
  calls: InFlight,
  isServing: () => boolean,
): RequestHandler {
  return async (req, res) => {
    const { userId, k } = parseRecommendRequest(req.params, req.query as Record<string, unknown>);
    if (!isServing()) throw new ServingError("ERR_NOT_SERVING", "not serving: the app is stopped");
    const leave = calls.enter();
    const started = performance.now();
    try {
      const result = await recommender.recommend(userId, k);
      const items = Array.isArray(result.items) ? result.items : Array.from(result.items);
      const fallback = result.fallback === true;
      if (fallback) metrics.fallbacks.inc();
      res.json({ user_id: userId, items, fallback });
    } finally {
      metrics.latency.observe((performance.now() - started) / 1000);
      leave();
    }
  };
}
