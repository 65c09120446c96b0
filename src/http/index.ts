/** Public surface of the HTTP layer; the package's main entry re-exports it. */
export { createApp, type GenerateAppOptions } from "./text/createApp.js";
export { createRecsysApp, type RecsysAppOptions } from "./recsys/createRecsysApp.js";
export { generateOpenApi, recsysOpenApi, type OpenApiOptions } from "./openapi.js";
export { silentLogger, type LoggerLike } from "./shell/logger.js";
export { parseGenerateRequest } from "./text/validation.js";
export { parseRecommendRequest } from "./recsys/validation.js";
export type { ValidationIssue } from "./shell/validation.js";
export { rateLimitKey } from "./shell/rateLimit.js";
export * as schemas from "./schemas.js";
export { Batcher, type BatcherHooks, type BatcherOptions } from "../batching/index.js";
export {
  RedisRateLimiter,
  TokenBucketRateLimiter,
  type RedisRateLimiterOptions,
  type TokenBucketOptions,
} from "../ratelimit/index.js";
