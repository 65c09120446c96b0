/**
 * Public contracts of the serving layer. Any object of these shapes works: the HTTP apps
 * accept hand-written engines, recommenders and limiters as readily as the libtorch ones.
 */
import type { Express } from "express";

/** One text-generation request, camelCase inside TypeScript (snake_case on the wire). */
export interface GenerateRequest {
  prompt: string;
  maxNewTokens: number;
  temperature: number;
  /** Sample among the k most likely tokens; null samples from the whole vocabulary. */
  topK: number | null;
  /** Makes sampling reproducible when set. */
  seed?: number;
  /** Aborts this request's generation (a disconnected client); engines may ignore it. */
  signal?: AbortSignal;
}

/** Running totals an engine may report; the HTTP app exposes them as metrics. */
export interface EngineUsage {
  promptTokens: number;
  generatedTokens: number;
}

export interface TextGenerationEngine {
  /** One continuation per request, same order. Runs once per batch. */
  generateBatch(requests: readonly GenerateRequest[]): Promise<string[]>;
  /** Pieces of the continuation as they are produced; stops early when `signal` aborts. */
  generateStream(request: GenerateRequest, signal?: AbortSignal): AsyncIterable<string>;
  /** Token counts since the engine was created. Optional for hand-written engines. */
  usage?(): EngineUsage;
  /** Releases native resources; idempotent. Optional for hand-written engines. */
  dispose?(): Promise<void>;
  /**
   * What the engine can hold at once: the default limit of concurrent streams. Optional;
   * without it the app uses a fixed default (64).
   */
  capacity?(): EngineCapacity;
}

export interface EngineCapacity {
  /** Rows (requests) decoding at once that fit the engine's memory budget. */
  maxActiveRows: number;
}

export interface Recommendation {
  items: number[];
  fallback: boolean;
}

export interface Recommender {
  recommend(userId: number, k: number): Recommendation | Promise<Recommendation>;
  dispose?(): Promise<void>;
}

export interface RateLimiter {
  allow(key: string): boolean | Promise<boolean>;
  /** Used for Retry-After (whole seconds, at least 1) when present. */
  retryAfterSeconds?(key: string): number;
}

export interface ServingApp extends Express {
  /** Lifespan begins: the batcher runs. */
  start(): Promise<void>;
  /** Lifespan ends: stop admitting, drain queued work, stop. */
  stop(): Promise<void>;
  /** What GET /ready answers. */
  readonly readiness: ReadinessControl;
}

export interface ReadinessControl {
  readonly ready: boolean;
  /** Not ready from now on (a drain is starting); stop() does it too. */
  markDraining(): void;
  /** An extra condition for readiness (the server entry: every app is listening). */
  setGate(gate: () => boolean): void;
}

export interface CreateAppOptions {
  /** Most requests in one engine call. Default 8. */
  maxBatchSize?: number;
  /** Longest a batch waits for company after its first request arrives, ms. Default 5. */
  maxWaitMs?: number;
  rateLimiter?: RateLimiter | null;
  /** Most requests waiting for a batch; beyond it /generate answers 503. Default 1024. */
  maxQueueSize?: number;
  /**
   * Most streams at once; beyond it a new stream answers 503 with Retry-After. Default: the
   * engine's `capacity().maxActiveRows`, else 64.
   */
  maxActiveStreams?: number;
}

export interface CreateRecsysAppOptions {
  rateLimiter?: RateLimiter | null;
}
