/**
 * The server's settings, from the environment, each checked with an error naming the
 * variable. README "Configuration" lists them all.
 */
import { ServingError } from "../errors.js";

export interface ServerConfig {
  host: string;
  port: number;
  recsysPort: number;
  /** Undefined: `npm start` falls back to the demo model. */
  serviceCkpt: string | undefined;
  serviceDevice: string;
  serviceThreads: number | undefined;
  recsysCkpt: string | undefined;
  recsysDevice: string;
  recsysLatencyBudgetMs: number;
  maxBatchSize: number;
  maxWaitMs: number;
  maxQueueSize: number;
  /** Requests per second per key; undefined: no rate limit. */
  rateLimitPerSecond: number | undefined;
  rateLimitBurst: number | undefined;
  redisUrl: string | undefined;
  logLevel: string;
  shutdownTimeoutMs: number;
  /** Express "trust proxy": whom to believe in X-Forwarded-For for the client address. */
  trustProxy: boolean | number | string;
  /** Most concurrent streams; undefined: derived from the engine's KV budget. */
  maxActiveStreams: number | undefined;
  /** KV cache budget of concurrent rows, MiB: the default of maxActiveStreams. */
  serviceKvBudgetMb: number;
  /** Node server timeouts, ms: all request headers, the whole request (body included), idle keep-alive. */
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  keepAliveTimeoutMs: number;
}

/** "true"/"false", a hop count, or addresses/subnets as Express takes them. */
function trustProxy(env: NodeJS.ProcessEnv): boolean | number | string {
  const raw = text(env, "TRUST_PROXY");
  if (raw === undefined || raw === "false") return false;
  if (raw === "true") return true;
  if (/^\d+$/.test(raw)) return Number(raw);
  return raw;
}

function text(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const value = env[name]?.trim();
  return value ? value : undefined;
}

function number(env: NodeJS.ProcessEnv, name: string, fallback: number, check: (n: number) => boolean, rule: string): number;
function number(env: NodeJS.ProcessEnv, name: string, fallback: undefined, check: (n: number) => boolean, rule: string): number | undefined;
function number(env: NodeJS.ProcessEnv, name: string, fallback: number | undefined, check: (n: number) => boolean, rule: string): number | undefined {
  const raw = text(env, name);
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || !check(value)) {
    throw new ServingError("ERR_CONFIG", `${name} must be ${rule}, got "${raw}"`);
  }
  return value;
}

const port = (n: number) => Number.isInteger(n) && n >= 0 && n <= 65535;
const positiveInt = (n: number) => Number.isInteger(n) && n >= 1;
const positive = (n: number) => n > 0;
const nonNegative = (n: number) => n >= 0;

export function readServerConfig(env: NodeJS.ProcessEnv = process.env): ServerConfig {
  const config: ServerConfig = {
    host: text(env, "HOST") ?? "0.0.0.0",
    port: number(env, "PORT", 8000, port, "a port number (0-65535)"),
    recsysPort: number(env, "RECSYS_PORT", 8001, port, "a port number (0-65535)"),
    serviceCkpt: text(env, "SERVICE_CKPT"),
    serviceDevice: text(env, "SERVICE_DEVICE") ?? "cpu",
    serviceThreads: number(env, "SERVICE_THREADS", undefined, positiveInt, "a positive integer"),
    recsysCkpt: text(env, "RECSYS_CKPT"),
    recsysDevice: text(env, "RECSYS_DEVICE") ?? "cpu",
    recsysLatencyBudgetMs: number(env, "RECSYS_LATENCY_BUDGET_MS", 100, positive, "a positive number of milliseconds"),
    maxBatchSize: number(env, "MAX_BATCH_SIZE", 8, positiveInt, "a positive integer"),
    maxWaitMs: number(env, "MAX_WAIT_MS", 5, nonNegative, "a number of milliseconds >= 0"),
    maxQueueSize: number(env, "MAX_QUEUE_SIZE", 1024, positiveInt, "a positive integer"),
    rateLimitPerSecond: number(env, "RATE_LIMIT_PER_SECOND", undefined, positive, "a positive number"),
    rateLimitBurst: number(env, "RATE_LIMIT_BURST", undefined, positiveInt, "a positive integer"),
    redisUrl: text(env, "REDIS_URL"),
    logLevel: text(env, "LOG_LEVEL") ?? "info",
    shutdownTimeoutMs: number(env, "SHUTDOWN_TIMEOUT_MS", 30000, nonNegative, "a number of milliseconds >= 0"),
    trustProxy: trustProxy(env),
    maxActiveStreams: number(env, "MAX_ACTIVE_STREAMS", undefined, positiveInt, "a positive integer"),
    serviceKvBudgetMb: number(env, "SERVICE_KV_BUDGET_MB", 256, positive, "a positive number of MiB"),
    headersTimeoutMs: number(env, "HEADERS_TIMEOUT_MS", 10000, positiveInt, "a positive integer number of milliseconds"),
    requestTimeoutMs: number(env, "REQUEST_TIMEOUT_MS", 30000, positiveInt, "a positive integer number of milliseconds"),
    keepAliveTimeoutMs: number(env, "KEEP_ALIVE_TIMEOUT_MS", 65000, positiveInt, "a positive integer number of milliseconds"),
  };
  if (config.rateLimitBurst !== undefined && config.rateLimitPerSecond === undefined) {
    throw new ServingError("ERR_CONFIG", "RATE_LIMIT_BURST is set but RATE_LIMIT_PER_SECOND is not: set both to enable rate limiting");
  }
  if (config.headersTimeoutMs > config.requestTimeoutMs) {
    throw new ServingError("ERR_CONFIG", "HEADERS_TIMEOUT_MS must not exceed REQUEST_TIMEOUT_MS (the headers are part of the request)");
  }
  return config;
}
