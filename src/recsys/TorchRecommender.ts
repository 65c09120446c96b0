/**
 * The movie recommender served from a TorchScript checkpoint (docs/recommender.md).
 *
 * Concurrent `recommend` calls are coalesced by a Batcher into one batched `recommend`
 * module call (one matmul, scoring.ts), which the addon runs off the JS thread. Unknown
 * users, a failing model and a missed latency budget (deadlines.ts) all answer with the most
 * popular items and `fallback: true`; the popular list is read once at load (checkpoint.ts),
 * so the fallback needs no model. Titles and histories for display: catalogue.ts.
 */
import { Batcher } from "../batching/Batcher.js";
import { rejectForeignCheckpoint } from "../checkpoint/foreignFormats.js";
import { verifyChecksum } from "../checkpoint/verify.js";
import { ServingError, asServingError } from "../errors.js";
import { loadAddon } from "../native/binding.js";
import type { RawAddon, RawModule } from "../native/types.js";
import type { Recommendation, Recommender } from "../types.js";
import { MovieCatalogue, readHistory, type MovieInfo, type UserHistory } from "./catalogue.js";
import { readCheckpoint, type RecommenderConfig } from "./checkpoint.js";
import { Deadlines } from "./deadlines.js";
import { Scorer, type Query } from "./scoring.js";

/** Why a result is a fallback; `recommend_fallback_total` counts them all. */
export type FallbackReason = "unknown_user" | "model_error" | "latency_budget" | "overloaded";

export interface TorchRecommendation extends Recommendation {
  /** Present when `fallback` is true. */
  fallbackReason?: FallbackReason;
}

/** A pino logger fits. */
export interface RecommenderLogger {
  warn(obj: object, msg?: string): void;
}

export interface TorchRecommenderOptions {
  /** "cpu", "cuda" or "cuda:N". Default "cpu". */
  device?: string;
  /** Past this many ms from the call a request answers with popular items. Default 100; null: none. */
  latencyBudgetMs?: number | null;
  /** Most users scored in one module call. Default 64. */
  maxBatchSize?: number;
  /** Longest a batch waits for company after its first request, ms. Default 1. */
  maxWaitMs?: number;
  /** Most requests waiting for a batch; beyond it requests fall back ("overloaded"). Default 4096. */
  maxQueueSize?: number;
  /** Intra-op threads of the model's inference thread. Default 1: one small matmul per batch. */
  threads?: number;
  /** Receives a warning per model failure. Silent by default. */
  logger?: RecommenderLogger;
  /** Called once per fallback result, e.g. to label a metric by reason. */
  onFallback?(reason: FallbackReason): void;
  /** The binding to load the checkpoint with; default: the built addon. */
  addon?: RawAddon;
}

export interface RecommenderStats {
  requests: number;
  /** Batched `recommend` module calls (the warm-up at load is not counted). */
  modelCalls: number;
  fallbacks: Record<FallbackReason, number>;
}

const DEFAULTS = { device: "cpu", latencyBudgetMs: 100, maxBatchSize: 64, maxWaitMs: 1, maxQueueSize: 4096, threads: 1 };

export class TorchRecommender implements Recommender {
  readonly config: RecommenderConfig;
  readonly #module: RawModule;
  readonly #userIndex: Map<number, number>;
  readonly #popular: number[];
  readonly #itemCount: number;
  readonly #catalogue: MovieCatalogue;
  /** Whether the module stores recent history (`history_length` in config.json). */
  readonly #hasHistory: boolean;
  readonly #scorer: Scorer;
  readonly #batcher: Batcher<Query, number[]>;
  /** Null: no latency budget. */
  readonly #deadlines: Deadlines | null;
  readonly #logger: RecommenderLogger | undefined;
  readonly #onFallback: ((reason: FallbackReason) => void) | undefined;
  readonly #stats: Omit<RecommenderStats, "modelCalls"> = {
    requests: 0,
    fallbacks: { unknown_user: 0, model_error: 0, latency_budget: 0, overloaded: 0 },
  };
  #disposing: Promise<void> | null = null;

  private constructor(
    module: RawModule,
    config: RecommenderConfig,
    userIds: BigInt64Array,
    popular: BigInt64Array,
    catalogue: MovieCatalogue,
    hasHistory: boolean,
    options: TorchRecommenderOptions,
  ) {
    this.#module = module;
    this.config = config;
    this.#userIndex = new Map();
    userIds.forEach((id, index) => this.#userIndex.set(Number(id), index));
    this.#popular = Array.from(popular, Number);
    this.#itemCount = config.counts.items;
    this.#catalogue = catalogue;
    this.#hasHistory = hasHistory;
    const budget = options.latencyBudgetMs === undefined ? DEFAULTS.latencyBudgetMs : options.latencyBudgetMs;
    this.#deadlines = budget === null || !Number.isFinite(budget) ? null : new Deadlines(budget);
    this.#logger = options.logger;
    this.#onFallback = options.onFallback;
    this.#scorer = new Scorer(module, this.#itemCount);
    this.#batcher = new Batcher<Query, number[]>((queries) => this.#scorer.score(queries), {
      maxBatchSize: options.maxBatchSize ?? DEFAULTS.maxBatchSize,
      maxWaitMs: options.maxWaitMs ?? DEFAULTS.maxWaitMs,
      maxQueueSize: options.maxQueueSize ?? DEFAULTS.maxQueueSize,
    });
    this.#batcher.start();
  }

  /**
   * Loads a checkpoint: verifies `<path>.sha256` when present, loads the module through the
   * addon, checks its format and interface version, reads the user ids and the popular
   * items once, and warms the scoring path up.
   */
  static async load(path: string, options: TorchRecommenderOptions = {}): Promise<TorchRecommender> {
    rejectForeignCheckpoint(path, "recommender"); // a GGUF file, a directory, ...: named
    await verifyChecksum(path); // ERR_CHECKPOINT_NOT_FOUND, or ERR_CHECKPOINT_INVALID on a mismatch
    const addon = options.addon ?? (await loadAddon());
    let module: RawModule;
    try {
      module = await addon.loadModule(path, {
        device: options.device ?? DEFAULTS.device,
        extraFiles: ["config.json", "movies.json"],
        threads: options.threads ?? DEFAULTS.threads,
      });
    } catch (err) {
      throw asServingError(err, "ERR_CHECKPOINT_INVALID");
    }
    return TorchRecommender.fromModule(module, options);
  }

  /** Wraps an already loaded module (it must carry config.json). Takes ownership: disposes it on failure. */
  static async fromModule(module: RawModule, options: TorchRecommenderOptions = {}): Promise<TorchRecommender> {
    try {
      const { config, userIds, popular, hasHistory } = await readCheckpoint(module, options.maxBatchSize ?? DEFAULTS.maxBatchSize);
      const catalogue = MovieCatalogue.parse(module.extraFiles["movies.json"]);
      return new TorchRecommender(module, config, userIds, popular, catalogue, hasHistory, options);
    } catch (err) {
      await module.dispose().catch(() => undefined);
      throw asServingError(err, "ERR_CHECKPOINT_INTERFACE");
    }
  }

  get userCount(): number {
    return this.#userIndex.size;
  }

  get itemCount(): number {
    return this.#itemCount;
  }

  /** Whether the checkpoint carries titles (a movies.csv sat beside the ratings it was trained on). */
  get hasTitles(): boolean {
    return this.#catalogue.hasTitles;
  }

  /** Titles and genres of raw movie ids, in the order asked; unknown ids have a null title. */
  movies(ids: readonly number[]): MovieInfo[] {
    return this.#catalogue.movies(ids);
  }

  /**
   * A known user's `n` most recent ratings stored in the checkpoint, newest first (one
   * module call, not batched: a page view, not the hot path). Unknown users and checkpoints
   * without stored history give none.
   */
  async history(userId: number, n: number): Promise<UserHistory> {
    if (this.#disposing) throw new ServingError("ERR_DISPOSED", "the recommender has been disposed");
    if (!Number.isSafeInteger(userId)) {
      throw new ServingError("ERR_INVALID_ARGUMENT", `userId must be an integer, got ${userId}`);
    }
    if (!Number.isSafeInteger(n) || n < 0) {
      throw new ServingError("ERR_INVALID_ARGUMENT", `n must be an integer >= 0, got ${n}`);
    }
    const index = this.#userIndex.get(userId);
    if (index === undefined) return { known: false, ratings: [] };
    if (!this.#hasHistory || n === 0) return { known: true, ratings: [] };
    return { known: true, ratings: await readHistory(this.#module, index, n) };
  }

  /** Counters since load, for metrics. */
  stats(): RecommenderStats {
    return { ...this.#stats, modelCalls: this.#scorer.calls, fallbacks: { ...this.#stats.fallbacks } };
  }

  /** Top-k unseen raw movie ids for a known user; the k most popular, flagged, otherwise. */
  async recommend(userId: number, k: number): Promise<TorchRecommendation> {
    if (this.#disposing) throw new ServingError("ERR_DISPOSED", "the recommender has been disposed");
    if (!Number.isSafeInteger(userId)) {
      throw new ServingError("ERR_INVALID_ARGUMENT", `userId must be an integer, got ${userId}`);
    }
    if (!Number.isSafeInteger(k) || k < 1) {
      throw new ServingError("ERR_INVALID_ARGUMENT", `k must be an integer >= 1, got ${k}`);
    }
    this.#stats.requests++;
    const index = this.#userIndex.get(userId);
    if (index === undefined) return this.#fallback(k, "unknown_user");

    const query: Query = { index, k, expired: false };
    const deadlines = this.#deadlines;
    if (deadlines === null) {
      try {
        return { items: await this.#batcher.submit(query), fallback: false };
      } catch (err) {
        return this.#failed(err, userId, k);
      }
    }
    return new Promise<TorchRecommendation>((resolve) => {
      const deadline = deadlines.add(() => {
        query.expired = true; // a batch that still holds it skips it
        resolve(this.#fallback(k, "latency_budget"));
      });
      // A result after the deadline answered with popular items is dropped.
      this.#batcher.submit(query).then(
        (items) => {
          if (deadline.settle()) resolve({ items, fallback: false });
        },
        (err: unknown) => {
          if (deadline.settle()) resolve(this.#failed(err, userId, k));
        },
      );
    });
  }

  #failed(err: unknown, userId: number, k: number): TorchRecommendation {
    const code = (err as { code?: unknown } | null)?.code;
    if (code === "ERR_QUEUE_FULL") return this.#fallback(k, "overloaded");
    this.#logger?.warn({ err, userId }, "recommender model call failed; answering with popular items");
    return this.#fallback(k, "model_error");
  }

  /** Finishes queued requests, then releases the module. Idempotent. */
  dispose(): Promise<void> {
    this.#disposing ??= (async () => {
      await this.#batcher.stop();
      // Every request has its answer now; no deadline is left to watch.
      this.#deadlines?.clear();
      await this.#module.dispose();
    })();
    return this.#disposing;
  }

  #fallback(k: number, reason: FallbackReason): TorchRecommendation {
    this.#stats.fallbacks[reason]++;
    try {
      this.#onFallback?.(reason);
    } catch {
      // a metrics hook must not turn a fallback into an error
    }
    return { items: this.#popular.slice(0, k), fallback: true, fallbackReason: reason };
  }
}
