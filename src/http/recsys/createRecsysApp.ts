/**
 * The recommendation app: GET /recommend/:user_id?k=, the playground at GET /, the
 * read-only display routes the playground uses (GET /movies?ids=, GET
 * /users/:user_id/history?n=), and the shell. It serves from creation (start() is optional, so the app works as a plain Express
 * app); after stop() /recommend answers 503 until start() is called again; stop() waits for
 * calls in flight.
 */
import { performance } from "node:perf_hooks";
import type { RequestHandler } from "express";
import { ServingError } from "../../errors.js";
import type { CreateRecsysAppOptions, Recommender, ServingApp } from "../../types.js";
import { createAppShell } from "../shell/appShell.js";
import { InFlight } from "../shell/inFlight.js";
import type { LoggerLike } from "../shell/logger.js";
import { createRecsysMetrics, type RecsysMetrics } from "./metrics.js";
import { COMMON_ERRORS, json, ref } from "../shell/routes.js";
import {
  historyQuerySchema,
  historyResponseSchema,
  moviesQuerySchema,
  moviesResponseSchema,
  recommendPathSchema,
  recommendQuerySchema,
  recommendResponseSchema,
} from "./schemas.js";
import type { JsonSchema } from "../shell/schemas.js";
import { mountPlayground } from "../playground/index.js";
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
  // The recommender is loaded (and warmed) before the app is made: ready from creation.
  const shell = createAppShell({ rateLimiter, logger: options.logger, apiKeys: options.apiKeys ?? null, readyFromCreation: true });
  const metrics = createRecsysMetrics(shell.registry);
  const calls = new InFlight();
  let serving = true;

  const userId = (recommendPathSchema.properties as Record<string, JsonSchema>)["user_id"]!;
  const k = (recommendQuerySchema.properties as Record<string, JsonSchema>)["k"]!;
  const ids = (moviesQuerySchema.properties as Record<string, JsonSchema>)["ids"]!;
  const n = (historyQuerySchema.properties as Record<string, JsonSchema>)["n"]!;
  const catalogue = catalogueOf(recommender);
  shell.register([
    {
      method: "get",
      path: "/recommend/:user_id",
      schemas: { RecommendResponse: recommendResponseSchema },
      doc: {
        summary: "Recommend movies for a user.",
        operationId: "recommend",
        parameters: [
          { name: "user_id", in: "path", required: true, schema: userId, description: userId["description"] },
          { name: "k", in: "query", required: false, schema: k, description: k["description"] },
        ],
        responses: {
          "200": { description: "Recommended items.", content: json(ref("RecommendResponse")) },
          ...COMMON_ERRORS,
        },
      },
      handlers: [recommendHandler(recommender, metrics, calls, () => serving)],
    },
    {
      method: "get",
      path: "/movies",
      schemas: { MoviesResponse: moviesResponseSchema },
      doc: {
        summary: "Titles and genres of movies (read-only, for display).",
        operationId: "movies",
        parameters: [
          // Comma-separated (`form` style, not exploded): ?ids=1,2,3.
          { name: "ids", in: "query", required: true, style: "form", explode: false, schema: ids, description: ids["description"] },
        ],
        responses: {
          "200": { description: "One entry per id, in the order asked.", content: json(ref("MoviesResponse")) },
          ...COMMON_ERRORS,
        },
      },
      handlers: [moviesHandler(catalogue)],
    },
    {
      method: "get",
      path: "/users/:user_id/history",
      schemas: { HistoryResponse: historyResponseSchema },
      doc: {
        summary: "A user's most recent ratings stored with the model (read-only, for display).",
        operationId: "userHistory",
        parameters: [
          { name: "user_id", in: "path", required: true, schema: userId, description: userId["description"] },
          { name: "n", in: "query", required: false, schema: n, description: n["description"] },
        ],
        responses: {
          "200": { description: "Newest first; empty for an unknown user.", content: json(ref("HistoryResponse")) },
          ...COMMON_ERRORS,
        },
      },
      handlers: [historyHandler(catalogue, calls, () => serving)],
    },
  ]);
  mountPlayground(shell, "recsys");

  return shell.finish("Recommendations", {
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
