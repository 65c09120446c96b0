export { TokenBucketRateLimiter, type TokenBucketOptions } from "./TokenBucketRateLimiter.js";
export { RedisRateLimiter, type RedisRateLimiterOptions } from "./RedisRateLimiter.js";
