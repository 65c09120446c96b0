/**
 * The environment factories: a language model or a recommender built from the variables the
 * server entry reads (config.ts, the one reader), for a process configured the way `npm start`
 * is. They live with the server entry, so engines and recommenders never read configuration:
 * they take options.
 */
import { ServingError } from "../errors.js";
import { TorchEngine, type TorchEngineOptions } from "../engine/TorchEngine.js";
import { TorchRecommender, type TorchRecommenderOptions } from "../recsys/TorchRecommender.js";
import { readEngineEnv, readRecommenderEnv, type EngineEnv } from "./config.js";

/** The engine's options from its variables (the checkpoint apart). */
export function engineOptions(settings: EngineEnv): TorchEngineOptions {
  const { device, threads, runtime, kernels, torchscriptCompute, torchscriptDequantize, torchscriptOptimize, kvBudgetMb, stepTokens, prefixCache, mmap, loadCheckCache, layoutCache, loadCheck } =
    settings;
  return {
    device,
    threads,
    runtime,
    kernels,
    torchscriptCompute,
    torchscriptDequantize,
    torchscriptOptimize,
    kvBudgetMb,
    stepTokens,
    prefixCache: prefixCache === "on",
    mapWeights: mmap === "on",
    ...(loadCheckCache === undefined ? {} : { loadCheckCache }),
    ...(layoutCache === undefined ? {} : { layoutCache }),
    loadCheck,
  };
}

/**
 * Builds the engine from the environment: SERVICE_CKPT (required), SERVICE_DEVICE (default
 * "cpu"), SERVICE_THREADS (default: the machine's cores minus one, at most 8),
 * SERVICE_RUNTIME (default "auto"), SERVICE_KERNELS (default "auto"),
 * SERVICE_TORCHSCRIPT_COMPUTE, SERVICE_TORCHSCRIPT_DEQUANTIZE and SERVICE_TORCHSCRIPT_OPTIMIZE (default "auto"), SERVICE_KV_BUDGET_MB and SERVICE_STEP_TOKENS
 * (defaults: the engine's), SERVICE_PREFIX_CACHE and SERVICE_MMAP (default "on"), SERVICE_LOAD_CHECK_CACHE (default
 * the user's cache directory) and SERVICE_LOAD_CHECK (default "cached"). SERVICE_CPU_VENDOR is
 * checked here but read by the addon from the process's own environment.
 */
export async function createEngineFromEnv(env: NodeJS.ProcessEnv = process.env): Promise<TorchEngine> {
  const settings = readEngineEnv(env);
  if (!settings.checkpoint) {
    throw new ServingError(
      "ERR_CONFIG",
      "SERVICE_CKPT is not set: point it at a language-model checkpoint (.pt, see docs/checkpoint.md), " +
        "for example SERVICE_CKPT=models/brown-gpt.pt",
    );
  }
  return TorchEngine.load(settings.checkpoint, engineOptions(settings));
}

/**
 * Builds a recommender from the environment: RECSYS_CKPT (required), RECSYS_DEVICE (default
 * "cpu"), RECSYS_LATENCY_BUDGET_MS (default 100).
 */
export async function createRecommenderFromEnv(
  env: NodeJS.ProcessEnv = process.env,
  options: Omit<TorchRecommenderOptions, "device"> = {},
): Promise<TorchRecommender> {
  const { checkpoint: path, device, latencyBudgetMs } = readRecommenderEnv(env);
  if (!path) {
    throw new ServingError(
      "ERR_CONFIG",
      "RECSYS_CKPT is not set: point it at a recommender checkpoint (for example models/recsys-demo.pt)",
    );
  }
  return TorchRecommender.load(path, { latencyBudgetMs, ...options, device });
}
