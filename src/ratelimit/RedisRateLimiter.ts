/**
 * The token bucket of TokenBucketRateLimiter, kept in Redis so that replicas share one budget
 * per key. One Lua script reads, refills, takes and writes atomically, on Redis's clock (so
 * replicas' clocks need not agree); a bucket's key expires once it would be full again, so
 * idle keys cost nothing.
 */
import { Redis } from "ioredis";
import { ServingError } from "../errors.js";
import type { RateLimiter } from "../types.js";

export interface RedisRateLimiterOptions {
  /** Burst size: tokens a fresh bucket holds (>= 1). */
  capacity: number;
  /** Sustained rate: tokens added per second (> 0). */
  refillPerSecond: number;
  /** Prefix of the bucket keys; default "ratelimit:". */
  keyPrefix?: string;
  /** Most keys whose Retry-After is remembered locally; default 10,000. */
  maxKeys?: number;
  /** Connection errors of a client created from a URL (allow() rejects meanwhile). Default: ignored. */
  onClientError?: (err: Error) => void;
}

// KEYS[1]: bucket. ARGV: capacity, tokens per ms, ttl ms. Returns {allowed (0/1), ms to next token}.
// Time is kept in whole ms so that Lua's number-to-string (%.14g) stays exact.
const TOKEN_BUCKET_LUA = `
if redis.replicate_commands then redis.replicate_commands() end
local capacity = tonumber(ARGV[1])
local per_ms = tonumber(ARGV[2])
local ttl_ms = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if tokens == nil or ts == nil then
  tokens = capacity
  ts = now
end
tokens = math.min(capacity, tokens + math.max(0, now - ts) * per_ms)
local allowed = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], ttl_ms)
local wait_ms = 0
if allowed == 0 then wait_ms = math.ceil((1 - tokens) / per_ms) end
return {allowed, wait_ms}
`;

const COMMAND = "servingTokenBucket";

type TokenBucketCommand = (key: string, capacity: number, perMs: number, ttlMs: number) => Promise<[number, number]>;

export class RedisRateLimiter implements RateLimiter {
  readonly #redis: Redis;
  readonly #ownsClient: boolean;
  readonly #capacity: number;
  readonly #perMs: number;
  readonly #ttlMs: number;
  readonly #keyPrefix: string;
  readonly #maxKeys: number;
  /** Last denial's wait per key, LRU-bounded like the in-memory limiter. */
  readonly #waitMs = new Map<string, number>();

  /** `redis`: an ioredis client (close() leaves it open) or a redis:// URL (the limiter owns that client). */
  constructor(redis: Redis | string, options: RedisRateLimiterOptions) {
    const { capacity, refillPerSecond, keyPrefix = "ratelimit:", maxKeys = 10_000 } = options;
    if (!(Number.isFinite(capacity) && capacity >= 1)) {
      throw new ServingError("ERR_INVALID_ARGUMENT", `capacity must be a finite number >= 1, got ${capacity}`);
    }
    if (!(Number.isFinite(refillPerSecond) && refillPerSecond > 0)) {
      throw new ServingError("ERR_INVALID_ARGUMENT", `refillPerSecond must be a finite number > 0, got ${refillPerSecond}`);
    }
    this.#ownsClient = typeof redis === "string";
    // An owned client gives up quickly when Redis is away: allow() rejects and the HTTP
    // layer fails open, instead of requests queueing behind reconnects.
    if (typeof redis === "string") {
      this.#redis = new Redis(redis, { maxRetriesPerRequest: 1, commandTimeout: 1000 });
      // Without a listener ioredis prints every reconnect failure to stderr.
      this.#redis.on("error", options.onClientError ?? (() => {}));
    } else {
      this.#redis = redis;
    }
    this.#redis.defineCommand(COMMAND, { numberOfKeys: 1, lua: TOKEN_BUCKET_LUA });
    this.#capacity = capacity;
    this.#perMs = refillPerSecond / 1000;
    // Once full again a bucket is indistinguishable from a missing one: let it expire then.
    this.#ttlMs = Math.ceil(capacity / this.#perMs) + 1000;
    this.#keyPrefix = keyPrefix;
    this.#maxKeys = maxKeys;
  }

  async allow(key: string): Promise<boolean> {
    const command = (this.#redis as unknown as Record<string, TokenBucketCommand>)[COMMAND]!;
    const [allowed, waitMs] = await command.call(this.#redis, this.#keyPrefix + key, this.#capacity, this.#perMs, this.#ttlMs);
    this.#waitMs.delete(key);
    if (allowed === 1) return true;
    this.#waitMs.set(key, waitMs);
    if (this.#waitMs.size > this.#maxKeys) this.#waitMs.delete(this.#waitMs.keys().next().value as string);
    return false;
  }

  /** Whole seconds, at least 1, from the last answer Redis gave for this key. */
  retryAfterSeconds(key: string): number {
    const waitMs = this.#waitMs.get(key) ?? 0;
    return Math.max(1, Math.ceil(waitMs / 1000));
  }

  /** Closes the client if the limiter created it from a URL. */
  async close(): Promise<void> {
    if (this.#ownsClient) await this.#redis.quit();
  }
}
