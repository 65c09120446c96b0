/**
 * Hand-written types of the raw addon (native/). Internal: public classes in src/engine and
 * src/recsys wrap these and own validation, defaults and lifecycle.
 */

import type { SamplingSettings } from "../types.js";

/** A tensor crossing the boundary. int64 data travels as BigInt64Array. */
export interface RawTensor {
  dtype: "float32" | "float64" | "int32" | "int64" | "bool";
  shape: number[];
  data: Float32Array | Float64Array | Int32Array | BigInt64Array | Uint8Array;
}

/** Argument of a TorchScript method call: a tensor, or a scalar (int when integral). */
export type RawValue = RawTensor | number | boolean | RawValue[];

export interface RawLoadOptions {
  /** "cpu", "cuda" or "cuda:N". */
  device: string;
  /** Names of extra files to read from the checkpoint archive (a language model always reads config.json). */
  extraFiles?: string[];
  /** Intra-op threads of the model's inference thread; 0 = libtorch default. */
  threads?: number;
  /**
   * On the CPU, use the weight records where they lie in a mapping of the file, under a read
   * lease (a write to the file while it is served makes the process copy them first); where the
   * lease is not granted, or false, they are read into memory. Default true.
   */
  mapWeights?: boolean;
  /**
   * The kernel family cap configure() will be given ("auto" by default): the quantized rows its
   * family lays out anew (Q8_0, Q4_0 and Q5_0 on every SIMD family, Q4_K on avx2 and on Intel's AVX-512) are read into
   * memory rather than mapped, unless there is a `layoutCache`.
   */
  kernels?: KernelFamilyCap;
  /**
   * A directory of layout files (SERVICE_LAYOUT_CACHE): where that family's layout of those rows
   * is found for this archive and addon build, the rows are mapped from it instead of read and
   * rewritten; where it is not, the rows are mapped from the checkpoint and served as they lie
   * while configure() writes the file there in the background, and then from it
   * (layoutWritten()). Default: none.
   */
  layoutCache?: string;
  /**
   * A language model on the CPU: the archive is opened without libtorch (its records listed,
   * its extra files read) and the TorchScript module is left to configure(), which builds the
   * native runtime from the records alone where the load-time check's verdict for this archive
   * and build is remembered (loadCheckCache), or where the archive stores the check's reference
   * logits (the check then runs on the records against them), and loads the module otherwise.
   * The module's methods cannot be called (run()) on a model served without it. Default false.
   */
  deferModule?: boolean;
}

/** Any TorchScript module: methods called off the JS thread, one call at a time. */
export interface RawModule {
  /** Extra files read at load; a requested file absent from the archive is missing here. */
  readonly extraFiles: Record<string, string>;
  readonly device: string;
  /** Calls `method`; tuples and lists come back as arrays. */
  run(method: string, args: RawValue[]): Promise<RawValue>;
  dispose(): Promise<void>;
}

/**
 * A row's sampling settings as the addon reads them (native/binding/JsArgs.cc ParseSamplingSettings):
 * the public SamplingSettings with top_k 0 for the whole vocabulary, seed -1 for a drawn one,
 * and `logprobs` (>= 0: report each token's log-probability and this many alternatives).
 */
export type RawSamplingSettings = Omit<SamplingSettings, "topK" | "seed"> & { topK: number; seed: number; logprobs?: number };

export interface RawGenerateRow {
  /** Prompt token ids, already truncated to fit by the caller or not: the addon keeps the most recent. */
  tokens: Int32Array;
  maxNewTokens: number;
  sampling: RawSamplingSettings;
  /** An earlier row of this call with the same tokens: this row copies its prefill (n samples of one prompt). */
  sharesPrefillWith?: number;
  /**
   * A constrained row (structured output): the bitmask of the tokens its first token may be
   * (XGrammar's format: bit v % 32 of word v / 32 allows token v). Each later token waits for
   * the next mask, sent with RawGeneration.setMask; the other rows never wait for it.
   */
  mask?: Int32Array;
}

/**
 * Tokens since the last call: (row, token) pairs; when a row asked for log-probabilities,
 * also one raw log-probability per pair and, flattened in pair order, each pair's row's
 * `logprobs` alternatives (ids and log-probabilities).
 */
export type RawTokenCallback = (
  pairs: Int32Array,
  logprobs?: Float32Array,
  topIds?: Int32Array,
  topLogprobs?: Float32Array,
) => void;

export interface RawGeneration {
  /** Generated token ids per row (end-of-sequence excluded). Rejects with a coded Error. */
  readonly result: Promise<Int32Array[]>;
  /** Stops one row (or every row) at the next decode step. */
  cancel(row?: number): void;
  /** A constrained row's mask for its next token, once per token it produced. */
  setMask(row: number, mask: Int32Array): void;
  /** Per row, prompt tokens served from the prefix cache; read once `result` has settled. */
  cachedTokens(): number[];
}

/** A checkpoint following docs/checkpoint.md, with its inference thread. */
export interface RawLanguageModel extends RawModule {
  /** Chooses the runtime for the checkpoint and warms it up; call once before generate(). */
  configure(settings: RawLanguageModelSettings): Promise<RawRuntimeChoice>;
  /** Queues a job on the model's inference thread. `onTokens` receives the tokens as they come. */
  generate(rows: RawGenerateRow[], onTokens: RawTokenCallback | null): RawGeneration;
  /** The prefix cache's totals since load (counters; any time). */
  prefixCacheStats(): { queriedTokens: number; hitTokens: number; evictions: number };
  /**
   * Bytes of weights the model holds, counted on its inference thread: `module`, the
   * TorchScript module's parameters and buffers (each storage once); `runtime`, what the chosen
   * runtime holds beside them (the native runtime's packed weights; 0 on TorchScript, which
   * computes with the module's). Once the native runtime is chosen the module's parameters are
   * released, so `module` drops to its small buffers.
   */
  weightBytes(): Promise<{ module: number; runtime: number }>;
  /**
   * The layout file configure() started writing (load option `layoutCache`), once the write has
   * ended: `error` is "" when it was written, else why not. null where none is being written.
   */
  layoutWritten(): Promise<RawLayoutWrite | null>;
}

export interface RawLayoutWrite {
  file: string;
  bytes: number;
  /** "" once written, else why not. */
  error: string;
  /**
   * Whether the runtime reads the rows from the file now. Until it is written the first load
   * serves those rows as they lie in the checkpoint; the first request (or step) after the
   * write takes the file's runs in their place.
   */
  adopted: boolean;
}

export interface RawLanguageModelSettings {
  /** Positions the cache holds (config.json block_size). */
  contextLength: number;
  /** A row ends on any of these; empty or absent when the model has none. */
  eosTokenIds?: number[];
  /** A token id to warm the model up with. */
  warmupToken?: number;
  /** "auto" (default): native where the architecture has a native CPU runtime whose forward matches the TorchScript. */
  runtime?: "auto" | "native" | "torchscript";
  /** config.json "architecture": picks the native runtime from the addon's registry. */
  architecture?: string;
  /** Highest kernel family the native runtime may use (SERVICE_KERNELS); default "auto". */
  kernels?: KernelFamilyCap;
  /** The checkpoint's dtype (its TorchScript cache); default "float32". */
  dtype?: "float32" | "bfloat16" | "float16";
  /**
   * What the TorchScript runtime computes a 16-bit checkpoint in on the CPU
   * (SERVICE_TORCHSCRIPT_COMPUTE): "auto" (default: float32 where the CPU has no fast 16-bit
   * matmuls), "checkpoint" (its own dtype) or "float32".
   */
  torchscriptCompute?: "auto" | "checkpoint" | "float32";
  /**
   * When the TorchScript runtime dequantizes a quantized checkpoint's weights
   * (SERVICE_TORCHSCRIPT_DEQUANTIZE): "auto" (default: once at load on a GPU, on every call on
   * the CPU), "once" (holds them dequantized, in float32) or "every-call".
   */
  torchscriptDequantize?: "auto" | "once" | "every-call";
  /**
   * Whether the TorchScript runtime runs the forward through torch's graph optimiser
   * (SERVICE_TORCHSCRIPT_OPTIMIZE): "auto" (default: on for a float checkpoint, off for a
   * quantized one), "on" or "off".
   */
  torchscriptOptimize?: "auto" | "on" | "off";
  /**
   * Once the native runtime is chosen, release the TorchScript module's parameters (the native
   * runtime packed its own copy), so the weights are held once. Default false. After that the
   * module's forward cannot run and configure() refuses to run again.
   */
  releaseModuleWeights?: boolean;
  /** config.json's scalar fields (nested objects one level down), for the native runtime. */
  modelConfig?: Record<string, unknown>;
  /**
   * A directory where verdicts of the load-time check (the native forward against the
   * checkpoint's own) are remembered, keyed by the archive's contents, the addon build, the
   * kernel family, threads, dtype and config; a remembered verdict skips the check. Default:
   * none (every configure checks).
   */
  loadCheckCache?: string;
  /** "cached" (default: a remembered verdict is trusted) or "always" (check, and remember anew). */
  loadCheck?: "cached" | "always";
  /**
   * Memory for the KV cache in MiB (SERVICE_KV_BUDGET_MB), on either runtime: the TorchScript
   * cache's rows, the native runtime's decode slots. 0 or absent: 256 on the CPU, half the free
   * device memory on CUDA.
   */
  kvBudgetMb?: number;
  /**
   * Tokens one decode step may feed: decodes first, then prompt chunks, oldest first
   * (SERVICE_STEP_TOKENS); default 256; 0: every prompt in one piece (unchunked prefill).
   */
  stepTokens?: number;
  /**
   * While streams decode, prompt tokens a step may feed per decoding stream (at least 8);
   * default 2; 0: prompts take all of stepTokens the decodes leave.
   */
  prefillPerDecode?: number;
  /**
   * Automatic prefix caching (SERVICE_PREFIX_CACHE): finished and running rows' keys and
   * values serve later prompts that start with the same tokens. Default true.
   */
  prefixCache?: boolean;
}

export type KernelFamily = "amx" | "avx512_bf16" | "avx512" | "avx2" | "baseline";
export type KernelFamilyCap = "auto" | KernelFamily;

export interface RawRuntimeChoice {
  runtime: "native" | "torchscript";
  /** The kernel family of the native runtime. */
  kernels?: KernelFamily;
  /** Why this runtime serves (the rule "auto" applied, or that it was asked for). */
  note?: string;
  /** Bytes of KV cache one row holds at full context in the chosen runtime (16-bit for bf16/fp16 checkpoints). */
  kvBytesPerRow: number;
  /** Seconds of each step of configuring, in order ("pack", "native forward", "release", ...; "warm-up" for the TorchScript runtime); absent from older builds. */
  phases?: Record<string, number>;
}

export interface RawAddon {
  readonly torchVersion: string;
  /** Every error code the addon raises (native/common/ErrorCodes.h); each is in src/errors.ts. */
  readonly errorCodes: readonly string[];
  /** Kernel families this CPU can run, best first. */
  readonly kernelFamilies: readonly KernelFamily[];
  /** Architectures with a native CPU runtime. */
  readonly nativeArchitectures: readonly string[];
  /**
   * The rule runtime "auto" applies once the native forward agrees with the checkpoint's:
   * whether `family` is timed at load, and the choice given these timings of both runtimes
   * (`scriptStopped`: the TorchScript run was stopped once it could no longer be chosen, so
   * `scriptSeconds` is where it stood).
   */
  decideRuntime(
    family: KernelFamily,
    nativeSeconds?: number,
    scriptSeconds?: number,
    scriptStopped?: boolean,
  ): { runtime: "native" | "torchscript"; timed: boolean; reason: string };
  /** False: this is the libtorch addon (torchserve.node). */
  readonly withoutLibtorch: false;
  cudaAvailable(): boolean;
  cudaDeviceCount(): number;
  loadModule(path: string, options: RawLoadOptions): Promise<RawModule>;
  loadLanguageModel(path: string, options: RawLoadOptions): Promise<RawLanguageModel>;
}

/**
 * The same addon built without libtorch (torchserve-native.node): it opens a language model's
 * archive on the CPU (deferModule is implied) and configure() builds the native runtime from
 * its records where a load-time check passed on it and remembered the verdict (loadCheckCache),
 * or where the archive stores the check's reference logits and the check against them passes;
 * everything else (any other load, a configure with neither, run()) rejects with
 * ERR_NEEDS_LIBTORCH, and the libtorch addon does it instead.
 */
export interface RawNativeAddon
  extends Pick<RawAddon, "torchVersion" | "errorCodes" | "kernelFamilies" | "nativeArchitectures" | "decideRuntime"> {
  readonly withoutLibtorch: true;
  loadLanguageModel(path: string, options: RawLoadOptions): Promise<RawLanguageModel>;
}
