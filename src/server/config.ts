/**
 * The one reader of the environment: every documented variable is parsed and checked here,
 * with an error naming the variable, and nowhere else. The server entry (readServerConfig)
 * and the `*FromEnv` factories (readEngineEnv, readRecommenderEnv) all read through it, so a
 * variable means the same everywhere. README "Configuration" lists them all.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { ServingError } from "../errors.js";
import { parseApiKeys } from "../http/shell/apiKeys.js";

export type RuntimeChoice = "auto" | "native" | "torchscript";
export type KernelsCap = "auto" | "amx" | "avx512_bf16" | "avx512" | "avx2" | "baseline";

/** The language model's variables. */
export interface EngineEnv {
  /** SERVICE_CKPT; undefined when unset. */
  checkpoint: string | undefined;
  /** SERVICE_DEVICE: "cpu" (default), "cuda" or "cuda:N". */
  device: string;
  /** SERVICE_THREADS; undefined: the engine's default. */
  threads: number | undefined;
  /** SERVICE_RUNTIME: "auto" (default), "native" or "torchscript". */
  runtime: RuntimeChoice;
  /** SERVICE_KERNELS: the highest kernel family the native runtime may use; "auto" (default). */
  kernels: KernelsCap;
  /** SERVICE_TORCHSCRIPT_COMPUTE: what the TorchScript runtime computes a 16-bit checkpoint in on the CPU; "auto" (default). */
  torchscriptCompute: "auto" | "checkpoint" | "float32";
  /** SERVICE_TORCHSCRIPT_DEQUANTIZE: when the TorchScript runtime dequantizes a quantized checkpoint's weights; "auto" (default). */
  torchscriptDequantize: "auto" | "once" | "every-call";
  /** SERVICE_TORCHSCRIPT_OPTIMIZE: whether the TorchScript runtime runs torch's graph optimiser; "auto" (default). */
  torchscriptOptimize: "auto" | "on" | "off";
  /** SERVICE_KV_BUDGET_MB: memory for the KV cache of either runtime, in MiB; undefined: the engine's default. */
  kvBudgetMb: number | undefined;
  /** SERVICE_STEP_TOKENS: tokens one decode step may feed; 0: unchunked; undefined: the default (256). */
  stepTokens: number | undefined;
  /** SERVICE_PREFIX_CACHE: "on" (default) reuses cached prompt prefixes; "off" prefills every prompt whole. */
  prefixCache: "on" | "off";
  /**
   * SERVICE_MMAP: "on" (default) reads the checkpoint's weights where they lie, in a mapping of
   * the file under a read lease (the CPU only); "off" reads them into the process's own memory.
   */
  mmap: "on" | "off";
  /**
   * SERVICE_LOAD_CHECK_CACHE: the directory where verdicts of the native runtime's load-time check
   * are remembered (default $XDG_CACHE_HOME/torchserve-node/load-checks, else
   * ~/.cache/torchserve-node/load-checks); "off": none, every load checks.
   */
  loadCheckCache: string | undefined;
  /**
   * SERVICE_LAYOUT_CACHE: the directory of the native kernels' layout files (docs/operations.md
   * "Layout files"; default $XDG_CACHE_HOME/torchserve-node/layouts, else
   * ~/.cache/torchserve-node/layouts); "off": none, every load rewrites those rows.
   */
  layoutCache: string | undefined;
  /** SERVICE_LOAD_CHECK: "cached" (default) trusts a remembered verdict; "always" checks on every load. */
  loadCheck: "cached" | "always";
  /**
   * SERVICE_CPU_VENDOR: whose measured kernel variants the native runtime runs: "auto" (default:
   * the CPU's vendor), "intel" or "amd" (docs/operations.md). The addon reads the variable
   * itself, once per process; it is checked here so that a wrong value stops the server.
   */
  cpuVendor: "auto" | "intel" | "amd";
  /**
   * SERVICE_BF16_WEIGHTS: how the native runtime holds a bf16 checkpoint's matrices: "packed"
   * (default: copied into the kernels' panels at load) or "in-place" (multiplied where they lie
   * in the checkpoint: no copy, so a first load writes no 2.5 GB of fresh memory for a 1B model,
   * at a cost in batched decode and prefill; docs/operations.md). Read by the addon itself;
   * checked here.
   */
  bf16Weights: "packed" | "in-place";
}

/** The recommender's variables. */
export interface RecommenderEnv {
  /** RECSYS_CKPT; undefined when unset. */
  checkpoint: string | undefined;
  /** RECSYS_DEVICE, default "cpu". */
  device: string;
  /** RECSYS_LATENCY_BUDGET_MS, default 100. */
  latencyBudgetMs: number;
}

export interface ServerConfig {
  host: string;
  port: number;
  recsysPort: number;
  /** The language model's variables (a checkpoint left undefined: `npm start` serves the demo model). */
  engine: EngineEnv;
  /** The recommender's variables (likewise). */
  recommender: RecommenderEnv;
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
  /** API_KEYS and API_KEYS_FILE together; empty: no authentication. */
  apiKeys: string[];
  /** SERVICE_MODEL_NAME: the model id of /v1; undefined: the checkpoint's file name without .pt. */
  modelName: string | undefined;
  /** Most concurrent streams; undefined: derived from the engine's KV budget. */
  maxActiveStreams: number | undefined;
  /** Node server timeouts, ms: all request headers, the whole request (body included), idle keep-alive. */
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  keepAliveTimeoutMs: number;
  /** RESPONSES_STORE_MB and RESPONSES_STORE_TTL_S: the bounds of /v1/responses' in-memory store. */
  responseStore: { maxBytes: number; ttlMs: number };
}

/** "true"/"false", a hop count, or addresses/subnets as Express takes them. */
function trustProxy(env: NodeJS.ProcessEnv): boolean | number | string {
  const raw = text(env, "TRUST_PROXY");
  if (raw === undefined || raw === "false") return false;
  if (raw === "true") return true;
  if (/^\d+$/.test(raw)) return Number(raw);
  return raw;
}

/** API_KEYS (comma-separated) plus API_KEYS_FILE (one key a line); a file that cannot be read is a startup error. */
function apiKeys(env: NodeJS.ProcessEnv): string[] {
  const file = text(env, "API_KEYS_FILE");
  let fileText: string | undefined;
  if (file !== undefined) {
    try {
      fileText = readFileSync(file, "utf8");
    } catch (err) {
      throw new ServingError("ERR_CONFIG", `API_KEYS_FILE cannot be read: ${(err as Error).message}`);
    }
  }
  const keys = parseApiKeys(text(env, "API_KEYS"), fileText);
  if (file !== undefined && keys.length === 0) throw new ServingError("ERR_CONFIG", `API_KEYS_FILE ${file} holds no key`);
  return keys;
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
const wholeNumber = (n: number) => Number.isInteger(n) && n >= 0;

function oneOf<T extends string>(env: NodeJS.ProcessEnv, name: string, choices: readonly T[], fallback: T): T {
  const raw = text(env, name);
  if (raw === undefined) return fallback;
  if (!(choices as readonly string[]).includes(raw)) {
    throw new ServingError("ERR_CONFIG", `${name} must be ${choices.map((c) => `"${c}"`).join(", ")}, got "${raw}"`);
  }
  return raw as T;
}

export function readEngineEnv(env: NodeJS.ProcessEnv = process.env): EngineEnv {
  return {
    checkpoint: text(env, "SERVICE_CKPT"),
    device: text(env, "SERVICE_DEVICE") ?? "cpu",
    threads: number(env, "SERVICE_THREADS", undefined, positiveInt, "a positive integer"),
    runtime: oneOf(env, "SERVICE_RUNTIME", ["auto", "native", "torchscript"] as const, "auto"),
    kernels: oneOf(env, "SERVICE_KERNELS", ["auto", "amx", "avx512_bf16", "avx512", "avx2", "baseline"] as const, "auto"),
    torchscriptCompute: oneOf(env, "SERVICE_TORCHSCRIPT_COMPUTE", ["auto", "checkpoint", "float32"] as const, "auto"),
    torchscriptDequantize: oneOf(env, "SERVICE_TORCHSCRIPT_DEQUANTIZE", ["auto", "once", "every-call"] as const, "auto"),
    torchscriptOptimize: oneOf(env, "SERVICE_TORCHSCRIPT_OPTIMIZE", ["auto", "on", "off"] as const, "auto"),
    kvBudgetMb: number(env, "SERVICE_KV_BUDGET_MB", undefined, positiveInt, "a positive whole number of MiB"),
    stepTokens: number(env, "SERVICE_STEP_TOKENS", undefined, wholeNumber, "a whole number >= 0 (0: unchunked prefill)"),
    prefixCache: oneOf(env, "SERVICE_PREFIX_CACHE", ["on", "off"] as const, "on"),
    mmap: oneOf(env, "SERVICE_MMAP", ["on", "off"] as const, "on"),
    loadCheckCache: loadCheckCache(env),
    layoutCache: cacheDir(env, "SERVICE_LAYOUT_CACHE", "layouts"),
    loadCheck: oneOf(env, "SERVICE_LOAD_CHECK", ["cached", "always"] as const, "cached"),
    cpuVendor: oneOf(env, "SERVICE_CPU_VENDOR", ["auto", "intel", "amd"] as const, "auto"),
    bf16Weights: oneOf(env, "SERVICE_BF16_WEIGHTS", ["packed", "in-place"] as const, "packed"),
  };
}

function loadCheckCache(env: NodeJS.ProcessEnv): string | undefined {
  return cacheDir(env, "SERVICE_LOAD_CHECK_CACHE", "load-checks");
}

/** `name`'s directory: "off" none, else as given, by default `<XDG_CACHE_HOME or ~/.cache>/torchserve-node/<leaf>`. */
function cacheDir(env: NodeJS.ProcessEnv, name: string, leaf: string): string | undefined {
  const raw = text(env, name);
  if (raw === "off") return undefined;
  if (raw !== undefined) return raw;
  const base = text(env, "XDG_CACHE_HOME") ?? (text(env, "HOME") ? join(text(env, "HOME")!, ".cache") : undefined);
  return base === undefined ? undefined : join(base, "torchserve-node", leaf);
}

export function readRecommenderEnv(env: NodeJS.ProcessEnv = process.env): RecommenderEnv {
  return {
    checkpoint: text(env, "RECSYS_CKPT"),
    device: text(env, "RECSYS_DEVICE") ?? "cpu",
    latencyBudgetMs: number(env, "RECSYS_LATENCY_BUDGET_MS", 100, positive, "a positive number of milliseconds"),
  };
}

export function readServerConfig(env: NodeJS.ProcessEnv = process.env): ServerConfig {
  const config: ServerConfig = {
    host: text(env, "HOST") ?? "0.0.0.0",
    port: number(env, "PORT", 8000, port, "a port number (0-65535)"),
    recsysPort: number(env, "RECSYS_PORT", 8001, port, "a port number (0-65535)"),
    engine: readEngineEnv(env),
    recommender: readRecommenderEnv(env),
    maxBatchSize: number(env, "MAX_BATCH_SIZE", 8, positiveInt, "a positive integer"),
    maxWaitMs: number(env, "MAX_WAIT_MS", 5, nonNegative, "a number of milliseconds >= 0"),
    maxQueueSize: number(env, "MAX_QUEUE_SIZE", 1024, positiveInt, "a positive integer"),
    rateLimitPerSecond: number(env, "RATE_LIMIT_PER_SECOND", undefined, positive, "a positive number"),
    rateLimitBurst: number(env, "RATE_LIMIT_BURST", undefined, positiveInt, "a positive integer"),
    redisUrl: text(env, "REDIS_URL"),
    logLevel: text(env, "LOG_LEVEL") ?? "info",
    shutdownTimeoutMs: number(env, "SHUTDOWN_TIMEOUT_MS", 30000, nonNegative, "a number of milliseconds >= 0"),
    trustProxy: trustProxy(env),
    apiKeys: apiKeys(env),
    modelName: text(env, "SERVICE_MODEL_NAME"),
    maxActiveStreams: number(env, "MAX_ACTIVE_STREAMS", undefined, positiveInt, "a positive integer"),
    headersTimeoutMs: number(env, "HEADERS_TIMEOUT_MS", 10000, positiveInt, "a positive integer number of milliseconds"),
    requestTimeoutMs: number(env, "REQUEST_TIMEOUT_MS", 30000, positiveInt, "a positive integer number of milliseconds"),
    keepAliveTimeoutMs: number(env, "KEEP_ALIVE_TIMEOUT_MS", 65000, positiveInt, "a positive integer number of milliseconds"),
    responseStore: {
      maxBytes: number(env, "RESPONSES_STORE_MB", 64, nonNegative, "a number of MiB >= 0 (0: keep no responses)") * 1024 * 1024,
      ttlMs: number(env, "RESPONSES_STORE_TTL_S", 3600, positive, "a positive number of seconds") * 1000,
    },
  };
  if (config.rateLimitBurst !== undefined && config.rateLimitPerSecond === undefined) {
    throw new ServingError("ERR_CONFIG", "RATE_LIMIT_BURST is set but RATE_LIMIT_PER_SECOND is not: set both to enable rate limiting");
  }
  if (config.headersTimeoutMs > config.requestTimeoutMs) {
    throw new ServingError("ERR_CONFIG", "HEADERS_TIMEOUT_MS must not exceed REQUEST_TIMEOUT_MS (the headers are part of the request)");
  }
  return config;
}
