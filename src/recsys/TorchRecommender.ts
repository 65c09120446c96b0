/**
 * The movie recommender served from a TorchScript checkpoint (docs/recommender.md).
 *
 * Concurrent `recommend` calls are coalesced by a Batcher into one batched `recommend`
 * module call (one matmul), which the addon runs off the JS thread. Unknown users, a
 * failing model and a missed latency budget all answer with the most popular items and
 * `fallback: true`; the popular list is read once at load, so the fallback needs no model.
 */
import { endianness } from "node:os";
import { performance } from "node:perf_hooks";
import { Batcher, DEADLINE_SLOP_MS } from "../batching/Batcher.js";
import { verifyChecksum } from "../checkpoint/verify.js";
import { ServingError, asServingError } from "../errors.js";
import { loadAddon } from "../native/binding.js";
import type { RawAddon, RawModule, RawTensor, RawValue } from "../native/types.js";
import type { Recommendation, Recommender } from "../types.js";

export const RECOMMENDER_FORMAT = "torchserve-node/recommender";
export const RECOMMENDER_INTERFACE_VERSION = 1;

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

/** A catalogue entry from the checkpoint's movies.json; unknown ids have a null title. */
export interface MovieInfo {
  id: number;
  title: string | null;
  genres: string[];
}

/** One of a user's most recent ratings, as stored in the checkpoint (newest first). */
export interface RatingEvent {
  movieId: number;
  rating: number;
  /** Unix seconds, as in ratings.csv. */
  timestamp: number;
}

export interface UserHistory {
  /** False for a user the model does not know: no ratings to show. */
  known: boolean;
  ratings: RatingEvent[];
}

/** Contents of the checkpoint's config.json that the server relies on. */
export interface RecommenderConfig {
  format: string;
  interface_version: number;
  counts: { users: number; items: number; interactions?: number };
  [key: string]: unknown;
}

interface Query {
  readonly index: number;
  readonly k: number;
  /** Set when its latency budget ran out: a batch that still holds it skips it. */
  expired: boolean;
}

/** A request waiting for its answer under a latency budget. */
interface Waiter {
  readonly query: Query;
  /** performance.now() past which it answers with popular items. */
  readonly deadline: number;
  /** Answered (scored, failed or expired): the first of these wins. */
  done: boolean;
  expire(): void;
}

/** int64 ids are read and written through their int32 halves where the host allows it. */
const LITTLE_ENDIAN = endianness() === "LE";

const DEFAULTS = { device: "cpu", latencyBudgetMs: 100, maxBatchSize: 64, maxWaitMs: 1, maxQueueSize: 4096, threads: 1 };

export class TorchRecommender implements Recommender {
  readonly config: RecommenderConfig;
  readonly #module: RawModule;
  readonly #userIndex: Map<number, number>;
  readonly #popular: number[];
  readonly #itemCount: number;
  readonly #movies: Map<number, { title: string; genres: string[] }>;
  /** Whether the module stores recent history (`history_length` in config.json). */
  readonly #hasHistory: boolean;
  readonly #batcher: Batcher<Query, number[]>;
  readonly #latencyBudgetMs: number | null;
  readonly #logger: RecommenderLogger | undefined;
  readonly #onFallback: ((reason: FallbackReason) => void) | undefined;
  readonly #stats: RecommenderStats = {
    requests: 0,
    modelCalls: 0,
    fallbacks: { unknown_user: 0, model_error: 0, latency_budget: 0, overloaded: 0 },
  };
  #disposing: Promise<void> | null = null;
  // Latency budgets: one timer for all requests, not one each. The budget is the same for
  // every request, so arrival order is deadline order and a FIFO suffices.
  #waiters: (Waiter | undefined)[] = [];
  #waitersHead = 0;
  #budgetTimer: NodeJS.Timeout | null = null;

  private constructor(
    module: RawModule,
    config: RecommenderConfig,
    userIds: BigInt64Array,
    popular: BigInt64Array,
    movies: Map<number, { title: string; genres: string[] }>,
    options: TorchRecommenderOptions,
  ) {
    this.#module = module;
    this.config = config;
    this.#userIndex = new Map();
    userIds.forEach((id, index) => this.#userIndex.set(Number(id), index));
    this.#popular = Array.from(popular, Number);
    this.#itemCount = config.counts.items;
    this.#movies = movies;
    this.#hasHistory = Number.isSafeInteger(config["history_length"]);
    const budget = options.latencyBudgetMs === undefined ? DEFAULTS.latencyBudgetMs : options.latencyBudgetMs;
    this.#latencyBudgetMs = budget === null || !Number.isFinite(budget) ? null : budget;
    this.#logger = options.logger;
    this.#onFallback = options.onFallback;
    this.#batcher = new Batcher<Query, number[]>((queries) => this.#scoreBatch(queries), {
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
      const config = parseConfig(module.extraFiles["config.json"]);
      const movies = parseMovies(module.extraFiles["movies.json"]);
      const version = await module.run("interface_version", []);
      if (version !== RECOMMENDER_INTERFACE_VERSION) {
        throw interfaceError(`module interface_version() is ${String(version)}, expected ${RECOMMENDER_INTERFACE_VERSION}`);
      }
      const userIds = int64Vector(await module.run("user_ids", []), "user_ids()");
      const popular = int64Vector(await module.run("popular", [config.counts.items]), "popular(k)");
      if (userIds.length !== config.counts.users || popular.length !== config.counts.items) {
        throw interfaceError(
          `config.json counts (${config.counts.users} users, ${config.counts.items} items) disagree with the ` +
            `module (${userIds.length} users, ${popular.length} popular items)`,
        );
      }
      // TorchScript's profiling executor optimises on the first calls of a shape (the first
      // call costs ~100 ms): pay that at load, for a lone request and for a full batch.
      const k = Math.min(10, config.counts.items);
      const sizes = new Set([1, Math.min(options.maxBatchSize ?? DEFAULTS.maxBatchSize, userIds.length)]);
      for (const size of userIds.length > 0 ? sizes : []) {
        const probe: RawTensor = { dtype: "int64", shape: [size], data: BigInt64Array.from({ length: size }, (_, i) => BigInt(i)) };
        for (let i = 0; i < 2; i++) {
          const result = await module.run("recommend", [probe, k]);
          try {
            recommendIds(result, size, k);
          } catch (err) {
            throw interfaceError((err as Error).message);
          }
        }
      }
      return new TorchRecommender(module, config, userIds, popular, movies, options);
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
    return this.#movies.size > 0;
  }

  /** Titles and genres of raw movie ids, in the order asked; unknown ids have a null title. */
  movies(ids: readonly number[]): MovieInfo[] {
    return ids.map((id) => {
      const movie = this.#movies.get(id);
      return { id, title: movie?.title ?? null, genres: movie ? [...movie.genres] : [] };
    });
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
    let value: RawValue;
    try {
      value = await this.#module.run("history", [index, n]);
    } catch (err) {
      throw asServingError(err, "ERR_INFERENCE");
    }
    if (!Array.isArray(value) || value.length !== 3 || !value.every(isTensor)) {
      throw new ServingError("ERR_INFERENCE", "history() must return (ids, ratings, timestamps) tensors");
    }
    const [ids, ratings, times] = value as RawTensor[];
    const idData = ids!.data as BigInt64Array;
    const ratingData = ratings!.data as Float32Array;
    const timeData = times!.data as BigInt64Array;
    return {
      known: true,
      ratings: Array.from(idData, (id, j) => ({ movieId: Number(id), rating: ratingData[j]!, timestamp: Number(timeData[j]) })),
    };
  }

  /** Counters since load, for metrics. */
  stats(): RecommenderStats {
    return { ...this.#stats, fallbacks: { ...this.#stats.fallbacks } };
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
    const budget = this.#latencyBudgetMs;
    if (budget === null) {
      try {
        return { items: await this.#batcher.submit(query), fallback: false };
      } catch (err) {
        return this.#failed(err, userId, k);
      }
    }
    return new Promise<TorchRecommendation>((resolve) => {
      const waiter: Waiter = {
        query,
        deadline: performance.now() + budget,
        done: false,
        expire: () => resolve(this.#fallback(k, "latency_budget")),
      };
      this.#waiters.push(waiter);
      if (this.#budgetTimer === null) this.#armBudgetTimer(budget);
      this.#batcher.submit(query).then(
        (items) => {
          if (waiter.done) return; // answered with popular items already; the result is dropped
          waiter.done = true;
          resolve({ items, fallback: false });
        },
        (err: unknown) => {
          if (waiter.done) return;
          waiter.done = true;
          resolve(this.#failed(err, userId, k));
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

  #armBudgetTimer(delayMs: number): void {
    this.#budgetTimer = setTimeout(() => this.#expireOverdue(), Math.max(0, delayMs));
  }

  /** Answers every request past its deadline with popular items (a batch still holding one skips it). */
  #expireOverdue(): void {
    this.#budgetTimer = null;
    const now = performance.now();
    const waiters = this.#waiters;
    let head = this.#waitersHead;
    for (; head < waiters.length; head++) {
      const waiter = waiters[head]!;
      if (!waiter.done) {
        if (waiter.deadline > now + DEADLINE_SLOP_MS) break;
        waiter.done = true;
        waiter.query.expired = true;
        waiter.expire();
      }
      waiters[head] = undefined;
    }
    if (head === waiters.length) {
      this.#waiters = [];
      this.#waitersHead = 0;
      return;
    }
    if (head > 1024 && head * 2 > waiters.length) {
      this.#waiters = waiters.slice(head);
      head = 0;
    }
    this.#waitersHead = head;
    this.#armBudgetTimer(this.#waiters[head]!.deadline - now);
  }

  /** Finishes queued requests, then releases the module. Idempotent. */
  dispose(): Promise<void> {
    this.#disposing ??= (async () => {
      await this.#batcher.stop();
      // Every request has its answer now; no deadline is left to watch.
      if (this.#budgetTimer !== null) clearTimeout(this.#budgetTimer);
      this.#budgetTimer = null;
      this.#waiters = [];
      this.#waitersHead = 0;
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

  /** One module call for the batch's live requests, as wide as their largest k (capped at the catalogue). */
  async #scoreBatch(batch: Query[]): Promise<number[][]> {
    // Requests whose budget ran out while queued have their answer; they are not scored.
    const queries = batch.some((q) => q.expired) ? batch.filter((q) => !q.expired) : batch;
    if (queries.length === 0) return batch.map(() => []);
    const width = Math.min(this.#itemCount, queries.reduce((max, q) => Math.max(max, q.k), 0));
    // int64 words written as (low, high) int32 pairs: no BigInt per user (little-endian hosts).
    const data = new BigInt64Array(queries.length);
    if (LITTLE_ENDIAN) {
      const words = new Int32Array(data.buffer);
      queries.forEach((q, row) => (words[2 * row] = q.index));
    } else {
      queries.forEach((q, row) => (data[row] = BigInt(q.index)));
    }
    const users: RawTensor = { dtype: "int64", shape: [queries.length], data };
    this.#stats.modelCalls++;
    let ids: BigInt64Array;
    try {
      ids = recommendIds(await this.#module.run("recommend", [users, width]), queries.length, width);
    } catch (err) {
      throw asServingError(err, "ERR_INFERENCE");
    }
    const words = new Int32Array(ids.buffer, ids.byteOffset, ids.length * 2);
    const rows = queries.map((q, row) => {
      const items: number[] = [];
      const end = row * width + Math.min(q.k, width);
      for (let j = row * width; j < end; j++) {
        // Ids are read from their int32 halves (a BigInt per id costs an allocation);
        // one beyond int32 takes the slow path.
        const high = words[2 * j + 1]!;
        const id = LITTLE_ENDIAN && high === 0 ? words[2 * j]! >>> 0 : Number(ids[j]);
        // Padding (id -1) only ever trails a row: a user who has seen almost everything.
        if (id < 0) break;
        items.push(id);
      }
      return items;
    });
    if (queries === batch) return rows;
    let next = 0;
    return batch.map((q) => (q.expired ? [] : rows[next++]!));
  }
}

function interfaceError(message: string): ServingError {
  return new ServingError("ERR_CHECKPOINT_INTERFACE", `not a ${RECOMMENDER_FORMAT} checkpoint: ${message}`);
}

function parseConfig(text: string | undefined): RecommenderConfig {
  if (text === undefined) throw interfaceError("config.json is missing from the archive");
  let config: RecommenderConfig;
  try {
    config = JSON.parse(text) as RecommenderConfig;
  } catch (err) {
    throw interfaceError(`config.json is not JSON (${(err as Error).message})`);
  }
  if (config?.format !== RECOMMENDER_FORMAT) throw interfaceError(`config.json format is ${String(config?.format)}`);
  if (config.interface_version !== RECOMMENDER_INTERFACE_VERSION) {
    throw interfaceError(
      `config.json interface_version is ${String(config.interface_version)}, this server speaks ${RECOMMENDER_INTERFACE_VERSION}`,
    );
  }
  const { users, items } = config.counts ?? {};
  if (!Number.isSafeInteger(users) || !Number.isSafeInteger(items) || users < 0 || items < 0) {
    throw interfaceError("config.json counts.users / counts.items are missing");
  }
  return config;
}

/** movies.json: {"<raw id>": {"title", "genres"}}; absent in checkpoints trained without movies.csv. */
function parseMovies(text: string | undefined): Map<number, { title: string; genres: string[] }> {
  const movies = new Map<number, { title: string; genres: string[] }>();
  if (text === undefined) return movies;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw interfaceError(`movies.json is not JSON (${(err as Error).message})`);
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
    throw interfaceError("movies.json must be an object keyed by raw movie id");
  }
  for (const [key, entry] of Object.entries(parsed as Record<string, { title?: unknown; genres?: unknown }>)) {
    const id = Number(key);
    if (!Number.isSafeInteger(id) || typeof entry?.title !== "string") continue;
    const genres = Array.isArray(entry.genres) ? entry.genres.filter((g): g is string => typeof g === "string") : [];
    movies.set(id, { title: entry.title, genres });
  }
  return movies;
}

function isTensor(value: RawValue): value is RawTensor {
  return typeof value === "object" && value !== null && !Array.isArray(value) && "dtype" in value;
}

function int64Vector(value: RawValue, what: string): BigInt64Array {
  if (!isTensor(value) || value.dtype !== "int64" || value.shape.length !== 1) {
    throw interfaceError(`${what} must return a 1-D int64 tensor`);
  }
  return value.data as BigInt64Array;
}

/** The ids of `recommend`'s (ids[B,k] int64, scores[B,k] float32) result, shape-checked. */
function recommendIds(value: RawValue, rows: number, width: number): BigInt64Array {
  if (!Array.isArray(value) || value.length !== 2 || !isTensor(value[0]!) || !isTensor(value[1]!)) {
    throw new ServingError("ERR_INFERENCE", "recommend() must return a (ids, scores) tuple of tensors");
  }
  const ids = value[0];
  if (ids.dtype !== "int64" || ids.shape.length !== 2 || ids.shape[0] !== rows || ids.shape[1] !== width) {
    throw new ServingError(
      "ERR_INFERENCE",
      `recommend() returned ids ${ids.dtype}[${ids.shape.join(",")}], expected int64[${rows},${width}]`,
    );
  }
  return ids.data as BigInt64Array;
}
