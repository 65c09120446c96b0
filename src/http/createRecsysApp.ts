/**
 * The recommendation app: GET /recommend/:user_id?k=, the playground at GET /, the
 * read-only display routes the playground uses (GET /movies?ids=, GET
 * /users/:user_id/history?n=), and the shell. It serves from creation (start() is optional, so the app works as a plain Express
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
import { parseHistoryRequest, parseMoviesRequest, parseRecommendRequest } from "./validation.js";

/**
 * What a recommender may add for display (TorchRecommender does, from its checkpoint).
 * Without it /movies answers null titles and /users/:user_id/history no ratings.
 */
export interface RecommenderCatalogue {
  movies(ids: readonly number[]): { id: number; title: string | null; genres: string[] }[];
  history(
    userId: number,
    n: number,
  ): Promise<{ known: boolean; ratings: { movieId: number; rating: number; timestamp: number }[] }>;
}

function catalogueOf(recommender: Recommender): RecommenderCatalogue | null {
  const r = recommender as Partial<RecommenderCatalogue>;
  return typeof r.movies === "function" && typeof r.history === "function" ? (recommender as unknown as RecommenderCatalogue) : null;
}

export interface RecsysAppOptions extends CreateRecsysAppOptions {
  /** pino-compatible; silent by default. */
  logger?: LoggerLike;
}

export function createRecsysApp(recommender: Recommender, options: RecsysAppOptions = {}): ServingApp {
  const rateLimiter = options.rateLimiter ?? null;
  const shell = createAppShell({ rateLimiter, logger: options.logger });
  const metrics = createRecsysMetrics(shell.registry);
  const calls = new InFlight();
  let serving = true;

  shell.route("get", "/recommend/:user_id", recommendHandler(recommender, metrics, calls, () => serving));
  const catalogue = catalogueOf(recommender);
  shell.route("get", "/movies", moviesHandler(catalogue));
  shell.route("get", "/users/:user_id/history", historyHandler(catalogue, calls, () => serving));
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

function describe(catalogue: RecommenderCatalogue | null, ids: readonly number[]) {
  return catalogue ? catalogue.movies(ids) : ids.map((id) => ({ id, title: null, genres: [] as string[] }));
}

function moviesHandler(catalogue: RecommenderCatalogue | null): RequestHandler {
  return (req, res) => {
    const { ids } = parseMoviesRequest(req.query as Record<string, unknown>);
    res.json({ movies: describe(catalogue, ids) });
  };
}

function historyHandler(catalogue: RecommenderCatalogue | null, calls: InFlight, isServing: () => boolean): RequestHandler {
  return async (req, res) => {
    const { userId, n } = parseHistoryRequest(req.params, req.query as Record<string, unknown>);
    if (!isServing()) throw new ServingError("ERR_NOT_SERVING", "not serving: the app is stopped");
    const leave = calls.enter();
    let history: Awaited<ReturnType<RecommenderCatalogue["history"]>>;
    try {
      history = catalogue ? await catalogue.history(userId, n) : { known: false, ratings: [] };
    } finally {
      leave();
    }
    const movies = describe(catalogue, history.ratings.map((r) => r.movieId));
    res.json({
      user_id: userId,
      known: history.known,
      ratings: history.ratings.map((r, j) => ({
        movie_id: r.movieId,
        rating: r.rating,
        timestamp: r.timestamp,
        title: movies[j]!.title,
        genres: movies[j]!.genres,
      })),
    });
  };
}
