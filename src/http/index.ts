/** Public surface of the HTTP layer; the package's main entry re-exports it. */
export { createApp, type GenerateAppOptions } from "./createApp.js";
export { createRecsysApp, type RecsysAppOptions } from "./createRecsysApp.js";
export { generateOpenApi, recsysOpenApi, type OpenApiOptions } from "./openapi.js";
export { silentLogger, type LoggerLike } from "./logger.js";
export { parseGenerateRequest, parseRecommendRequest, type ValidationIssue } from "./validation.js";
export { rateLimitKey } from "./rateLimit.js";
export * as schemas from "./schemas.js";
export { Batcher, type BatcherHooks, type BatcherOptions } from "../batching/index.js";
export {
  RedisRateLimiter,
  TokenBucketRateLimiter,
  type RedisRateLimiterOptions,
  type TokenBucketOptions,
} from "../ratelimit/index.js";
