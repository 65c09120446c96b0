/**
 * In-memory token buckets, one per key: the single-process default. Each bucket holds up to
 * `capacity` tokens and gains `refillPerSecond`; a request takes one. Memory is bounded: past
 * `maxKeys` the least recently used bucket is forgotten (it comes back full, which only
 * errs on the side of serving).
 */
import { performance } from "node:perf_hooks";
import { ServingError } from "../errors.js";
import type { RateLimiter } from "../types.js";

export interface TokenBucketOptions {
  /** Burst size: tokens a fresh bucket holds (>= 1). */
  capacity: number;
  /** Sustained rate: tokens added per second (> 0). */
  refillPerSecond: number;
  /** Most keys remembered; default 10,000. */
  maxKeys?: number;
  /** Milliseconds from any fixed origin; injectable for tests. Default performance.now. */
  now?: () => number;
}

interface Bucket {
  tokens: number;
  updatedAt: number;
}

export class TokenBucketRateLimiter implements RateLimiter {
  readonly #capacity: number;
  readonly #refillPerMs: number;
  readonly #maxKeys: number;
  readonly #now: () => number;
  /** Map iteration order is insertion order: re-inserting on use keeps it LRU-first. */
  readonly #buckets = new Map<string, Bucket>();

  constructor(options: TokenBucketOptions) {
    const { capacity, refillPerSecond, maxKeys = 10_000, now = () => performance.now() } = options;
    if (!(Number.isFinite(capacity) && capacity >= 1)) {
      throw new ServingError("ERR_INVALID_ARGUMENT", `capacity must be a finite number >= 1, got ${capacity}`);
    }
    if (!(Number.isFinite(refillPerSecond) && refillPerSecond > 0)) {
      throw new ServingError("ERR_INVALID_ARGUMENT", `refillPerSecond must be a finite number > 0, got ${refillPerSecond}`);
    }
    if (!(Number.isInteger(maxKeys) && maxKeys >= 1)) {
      throw new ServingError("ERR_INVALID_ARGUMENT", `maxKeys must be an integer >= 1, got ${maxKeys}`);
    }
    this.#capacity = capacity;
    this.#refillPerMs = refillPerSecond / 1000;
    this.#maxKeys = maxKeys;
    this.#now = now;
  }

  /** Keys currently remembered (at most maxKeys). */
  get size(): number {
    return this.#buckets.size;
  }

  allow(key: string): boolean {
    const now = this.#now();
    const bucket = this.#buckets.get(key) ?? { tokens: this.#capacity, updatedAt: now };
    bucket.tokens = this.#tokensAt(bucket, now);
    bucket.updatedAt = now;
    this.#buckets.delete(key);
    this.#buckets.set(key, bucket);
    if (this.#buckets.size > this.#maxKeys) {
      const oldest = this.#buckets.keys().next().value as string;
      this.#buckets.delete(oldest);
    }
    if (bucket.tokens < 1) return false;
    bucket.tokens -= 1;
    return true;
  }

  /** Whole seconds until the key's next token, at least 1. */
  retryAfterSeconds(key: string): number {
    const bucket = this.#buckets.get(key);
    if (bucket === undefined) return 1;
    const missing = 1 - this.#tokensAt(bucket, this.#now());
    return Math.max(1, Math.ceil(missing / this.#refillPerMs / 1000));
  }

  #tokensAt(bucket: Bucket, now: number): number {
    const elapsed = Math.max(0, now - bucket.updatedAt);
    return Math.min(this.#capacity, bucket.tokens + elapsed * this.#refillPerMs);
  }
}
