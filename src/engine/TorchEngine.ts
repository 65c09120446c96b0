/**
 * TorchEngine: the libtorch text-generation engine. Tokenizes in TypeScript, generates in the
 * addon on the model's own inference thread, and streams whole UTF-8 pieces back.
 */
import { EventEmitter, on } from "node:events";
import { availableParallelism } from "node:os";

import { readArchiveEntryNames, readArchiveExtraFiles } from "../checkpoint/archiveFiles.js";
import { rejectForeignCheckpoint } from "../checkpoint/foreignFormats.js";
import { readAhead, verifyChecksum } from "../checkpoint/verify.js";
import { asServingError, ServingError } from "../errors.js";
import { loadAddon, loadNativeAddon, preloadAddon } from "../native/binding.js";
import type {
  KernelFamily,
  KernelFamilyCap,
  RawAddon,
  RawGenerateRow,
  RawLanguageModel,
  RawLayoutWrite,
  RawNativeAddon,
  RawSamplingSettings,
} from "../native/types.js";
import type {
  ChatTemplate,
  Completion,
  CompletionChoice,
  CompletionChunk,
  CompletionRequest,
  EngineUsage,
  GenerateRequest,
  GenerationConstraint,
  SamplingSettings,
  TextGenerationEngine,
} from "../types.js";
import { ChoiceDecoder, type TokenEvent } from "./choiceDecoder.js";
import { ConstraintCompiler, ConstraintError, type RowMatcher } from "./constraints/compiler.js";
import { byteVocabulary, huggingFaceVocabulary, type Vocabulary } from "./constraints/vocabulary.js";
import { optionalSettings } from "./sampling.js";
import { type ModelConfig, parseModelConfig } from "./config.js";
import { ByteTokenizer, HuggingFaceTokenizer, type Tokenizer } from "./tokenizer.js";

/**
 * Whether the archive carries the load-time check's reference logits from its export
 * (extra/load_check.bin): a first load of it then needs no libtorch. A guess only, for what to
 * load ahead: the addon decides.
 */
function carriesReferenceLogits(path: string): boolean {
  return readArchiveEntryNames(path)?.some((name) => name.endsWith("/extra/load_check.bin")) ?? false;
}

/** Whether `promise` is still pending once the current macrotask's settled promises have run. */
function unsettled(promise: Promise<unknown>): Promise<boolean> {
  return new Promise((resolve) => {
    let settled = false;
    promise.then(
      () => (settled = true),
      () => (settled = true),
    );
    setImmediate(() => resolve(!settled));
  });
}

/** A tokenizer built from the archive's files before the addon read them, and those files. */
interface EarlyTokenizer {
  files: Record<string, string>;
  tokenizer: Tokenizer;
}

/** The archive's extra files the engine reads: the model's config and its tokenizer's. */
const TOKENIZER_FILES = ["config.json", "tokenizer.json", "tokenizer_config.json"] as const;

export interface TorchEngineOptions {
  /** "cpu" (default), "cuda" or "cuda:N". */
  device?: string;
  /**
   * Compute threads of the model (the native runtime's team, TorchScript's intra-op
   * threads). Default: the machine's cores minus one (at most 8): one stays free for the event loop
   * (HTTP, JSON, tokenizing); spin-synchronised threads that must share a core with it lose
   * more than they gain.
   */
  threads?: number;
  /**
   * Check `<checkpoint>.sha256` when present. Default true. A match is remembered in
   * `loadCheckCache` by the file's identity (path, inode, size, modification and change times),
   * so an unchanged file is hashed once; `loadCheck: "always"` hashes again.
   */
  verifyChecksum?: boolean;
  /**
   * "auto" (default) runs an architecture the native CPU runtime has (the addon's
   * `nativeArchitectures`: "gpt" and "llama") on it when its forward matches the checkpoint's
   * TorchScript (checked at load), unless the TorchScript forward is faster there
   * (docs/operations.md, "Runtime"); else the TorchScript forward.
   */
  runtime?: "auto" | "native" | "torchscript";
  /**
   * What the TorchScript runtime computes a 16-bit checkpoint in on the CPU: "auto" (default:
   * float32 where the CPU has no fast 16-bit matmuls, i.e. no AVX512_BF16 or AMX), "checkpoint"
   * (its own dtype) or "float32". float32 holds a float32 copy of the weights.
   */
  torchscriptCompute?: "auto" | "checkpoint" | "float32";
  /**
   * When the TorchScript runtime dequantizes a quantized checkpoint's weights: "auto" (default:
   * once at load on a GPU, where dequantizing every weight on every call cost 61-80 ms a step of
   * a 135M model on an H100 (docs/benchmarks.md section 8); on
   * every call on the CPU, where the native runtime serves and memory is what quantizing saves),
   * "once" (holds them dequantized in float32: 4 bytes a weight) or "every-call".
   */
  torchscriptDequantize?: "auto" | "once" | "every-call";
  /**
   * Whether the TorchScript runtime runs the forward through torch's graph optimiser: "auto"
   * (default: on for a float checkpoint, where on a GPU it fuses the step's element-wise work;
   * off for a quantized one, whose dequantizing graph took seconds to optimise at every new
   * input shape), "on" or "off" (docs/benchmarks.md section 8).
   */
  torchscriptOptimize?: "auto" | "on" | "off";
  /**
   * Where verdicts of the native runtime's load-time check are remembered
   * (SERVICE_LOAD_CHECK_CACHE), so the same checkpoint on the same build, kernel family and
   * threads is checked once, not on every load. Default: nowhere (every load checks).
   */
  loadCheckCache?: string;
  /**
   * Where the native kernels' layout of the quantized rows they rewrite at load (Q8_0, Q4_0,
   * Q5_0 on every SIMD family, Q4_K on avx2 and on Intel's AVX-512) is kept, one file per checkpoint and kernel family
   * (SERVICE_LAYOUT_CACHE, docs/operations.md "Layout files"): a later load maps it instead of
   * reading those rows and rewriting them; the first serves them as they lie in the checkpoint
   * while it writes the file in the background, then from it (layoutWritten()). Default: nowhere
   * (every load rewrites).
   */
  layoutCache?: string;
  /**
   * SERVICE_LOAD_CHECK: "cached" (default) trusts a remembered verdict (and a remembered sha256
   * match); "always" checks (and hashes) again.
   */
  loadCheck?: "cached" | "always";
  /**
   * Highest kernel family the native runtime may use: "auto" (default: the best this CPU
   * has), "amx", "avx512_bf16", "avx512", "avx2" or "baseline". For hosts that must match another CPU's numerics,
   * and for testing every family on one machine.
   */
  kernels?: KernelFamilyCap;
  /**
   * Memory for the KV cache, in MiB (SERVICE_KV_BUDGET_MB), on either runtime: the TorchScript
   * runtime's cache rows (at most 256) and the native runtime's decode slots (8 to 64) are as
   * many as fit, and capacity(), the default limit of concurrent streams, counts the rows it
   * holds. Default: 256 on the CPU; on CUDA the TorchScript cache takes half the free device
   * memory, while capacity() counts 256.
   */
  kvBudgetMb?: number;
  /**
   * Tokens one decode step may feed (docs/operations.md "Scheduling"): running streams'
   * decodes first, then prompts in chunks, oldest first. Default 256; 0: prompts unchunked.
   */
  stepTokens?: number;
  /** While streams decode, prompt tokens a step may feed per decoding stream (at least 8); default 2; 0: no such limit. */
  prefillPerDecode?: number;
  /**
   * Automatic prefix caching (SERVICE_PREFIX_CACHE, docs/operations.md "Prefix caching"):
   * a prompt that starts with tokens a finished or running row has computed (a chat's
   * earlier turns, a shared system prompt) reuses their keys and values instead of
   * prefilling them. Same outputs either way. Default true.
   */
  prefixCache?: boolean;
  /**
   * On the CPU, read the weights where they lie in a mapping of the checkpoint (SERVICE_MMAP)
   * rather than into the process's own memory: no copy at load. The file is held under a read
   * lease, so a write to it while it is served (a truncation, `cp` over it) first makes the
   * process copy the weights it still reads; where no lease is granted (the file open for
   * writing elsewhere, another user's file) they are read into memory. Default true.
   */
  mapWeights?: boolean;
}

/** The KV budget when none is given: both runtimes' default on the CPU, and what capacity() counts. */
export const DEFAULT_KV_BUDGET_MB = 256;
/** Below it a small budget would refuse streams the scheduler runs easily; above it the
 * decode step's per-row cost, not memory, is what bounds a useful batch. */
const MIN_ACTIVE_ROWS = 8;
const MAX_ACTIVE_ROWS = 256;

export class TorchEngine implements TextGenerationEngine {
  private readonly counts: EngineUsage = { promptTokens: 0, generatedTokens: 0 };
  private disposing: Promise<void> | undefined;
  private constraints: Promise<ConstraintCompiler> | undefined;

  private constructor(
    private readonly model: RawLanguageModel,
    readonly config: ModelConfig,
    readonly tokenizer: Tokenizer,
    /** "native" (the built-in CPU fast path of architectures "gpt" and "llama") or "torchscript". */
    readonly runtime: "native" | "torchscript",
    /** Why this runtime serves (the rule "auto" applied, or that it was asked for). */
    readonly runtimeNote: string | undefined,
    /** The kernel family of the native runtime; undefined on TorchScript. */
    readonly kernels: KernelFamily | undefined,
    private readonly template: ChatTemplate | undefined,
    private readonly kvBudgetMb: number,
    /** Bytes of KV cache a row holds at full context in the chosen runtime. */
    readonly kvBytesPerRow: number,
    /** The vocabulary as the grammar engine reads it, built on the first constrained request. */
    private readonly vocabulary: () => Vocabulary,
    /**
     * Seconds each step of load() took, in order (checksum and addon, archive, tokenizer, then the
     * runtime choice's: widen, reference forward, narrow, pack, native forward, release, and the
     * TorchScript runtime's warm-up),
     * and the total: the load log carries them.
     */
    readonly loadPhases: Readonly<Record<string, number>> = {},
  ) {}

  static async load(path: string, options: TorchEngineOptions = {}): Promise<TorchEngine> {
    rejectForeignCheckpoint(path, "language-model"); // a GGUF file, a Hugging Face directory, ...: named
    const started = performance.now();
    const phases: Record<string, number> = {};
    let lap = started;
    const mark = (name: string) => {
      const now = performance.now();
      phases[name] = (now - lap) / 1000;
      lap = now;
    };
    // The addon built without libtorch, which loads in milliseconds where libtorch takes
    // 0.45-0.7 s, serves a checkpoint the load-time check has passed on (its verdict remembered),
    // or one whose export stored the check's reference logits (the check then runs against them):
    // it builds the native runtime from the archive's records. Where it cannot, the libtorch
    // addon loads the checkpoint as it always has.
    const withoutLibtorch = TorchEngine.mayServeWithoutLibtorch(options) ? loadNativeAddon() : undefined;
    // The file is hashed on a worker thread while this one loads the addon; the archive is
    // opened only once the hash matches. Where it is not hashed, it is read ahead into the page
    // cache while libtorch loads. The build without libtorch reads the records itself (mapped,
    // paged in on the load's threads) with nothing to overlap: a read-ahead there would only take
    // a core from the check's forward (1B Q8_0: 0.13 s alone, 0.24 s beside it).
    let checked: Promise<boolean>;
    if (options.verifyChecksum !== false) {
      checked = verifyChecksum(path, {
        rememberIn: options.loadCheckCache,
        always: options.loadCheck === "always",
        readAhead: !withoutLibtorch,
      });
    } else {
      if (!withoutLibtorch) readAhead(path);
      checked = Promise.resolve(false);
    }
    checked.catch(() => undefined); // awaited below; not unhandled if loadAddon throws first
    // The tokenizer is built once, from the archive's own bytes (0.25 s for GPT-2's 50K
    // vocabulary), while the addon loads or configures; it is used once the addon's reading of
    // the archive gives the same files.
    let early: { value: EarlyTokenizer | undefined } | undefined;
    const earlyTokenizer = () => (early ??= { value: TorchEngine.earlyTokenizer(path) }).value;
    const clock = { mark, phases, started };
    if (withoutLibtorch) {
      // A hash under way means a file whose match is not remembered: one not loaded before (or
      // changed), which has no verdict either. Without stored reference logits that load needs
      // libtorch, which then loads beside the hash, as it did before there was an addon without it.
      // The tokenizer is built meanwhile: this thread only waits for the hash.
      if (await unsettled(checked)) {
        if (!carriesReferenceLogits(path)) void preloadAddon();
        earlyTokenizer();
      }
      await checked;
      mark("checksum and addon");
      const engine = await TorchEngine.open(withoutLibtorch, path, options, earlyTokenizer, clock);
      if (engine) return engine;
      mark("without libtorch: needs libtorch");
      readAhead(path); // beside libtorch's load, as on any load by the libtorch addon
    }
    // The libtorch addon loads on a worker thread while this one builds the tokenizer.
    const addonLoading = preloadAddon();
    earlyTokenizer();
    await addonLoading;
    const addon = loadAddon();
    await checked;
    mark(withoutLibtorch ? "libtorch addon" : "checksum and addon");
    return (await TorchEngine.open(addon, path, options, earlyTokenizer, clock))!;
  }

  /**
   * Whether the addon built without libtorch may serve this load: the native runtime on the CPU,
   * the load-time check not forced (its own configure then says whether a remembered verdict or
   * stored reference logits let it, ERR_NEEDS_LIBTORCH where neither does).
   */
  private static mayServeWithoutLibtorch(options: TorchEngineOptions): boolean {
    return (options.device ?? "cpu") === "cpu" && options.runtime !== "torchscript" && options.loadCheck !== "always";
  }

  /**
   * Opens the checkpoint with `addon` and configures it, the tokenizer built meanwhile. Undefined
   * where `addon` is the build without libtorch and cannot serve it (ERR_NEEDS_LIBTORCH, at load
   * or at configure; nothing is left open).
   */
  private static async open(
    addon: RawAddon | RawNativeAddon,
    path: string,
    options: TorchEngineOptions,
    earlyTokenizer: () => EarlyTokenizer | undefined,
    clock: { mark: (name: string) => void; phases: Record<string, number>; started: number },
  ): Promise<TorchEngine | undefined> {
    const { mark, phases, started } = clock;
    const needsLibtorch = (err: unknown) => addon.withoutLibtorch && (err as { code?: string }).code === "ERR_NEEDS_LIBTORCH";
    let model: RawLanguageModel;
    try {
      model = await addon.loadLanguageModel(path, {
        device: options.device ?? "cpu",
        extraFiles: [...TOKENIZER_FILES],
        threads: options.threads ?? defaultThreads(),
        mapWeights: options.mapWeights ?? true,
        kernels: options.kernels ?? "auto",
        ...(options.layoutCache === undefined ? {} : { layoutCache: options.layoutCache }),
        // The engine never calls the module's methods: where a remembered verdict or the stored
        // reference logits allow, the native runtime is built from the archive's records, and the
        // module (its code and every tensor) is never loaded.
        deferModule: (options.device ?? "cpu") === "cpu" && options.runtime !== "torchscript",
      });
    } catch (err) {
      if (needsLibtorch(err)) return undefined;
      throw err;
    }
    mark("archive");
    try {
      const config = parseModelConfig(model.extraFiles["config.json"] ?? "");
      // The addon configures (its check, packing; TorchScript's warm-up) on its own thread while this one
      // builds the tokenizer (~0.4 s for a 128K vocabulary).
      const configuring = model.configure({
        contextLength: config.contextLength,
        eosTokenIds: config.tokenizer.eosTokenIds,
        warmupToken: config.tokenizer.bosTokenId ?? 0,
        runtime: options.runtime ?? "auto",
        architecture: config.architecture,
        kernels: options.kernels ?? "auto",
        dtype: checkpointDtype(config),
        torchscriptCompute: options.torchscriptCompute ?? "auto",
        torchscriptDequantize: options.torchscriptDequantize ?? "auto",
        torchscriptOptimize: options.torchscriptOptimize ?? "auto",
        modelConfig: config.raw,
        // The engine never calls the module's forward itself: on the native runtime the weights are held once.
        releaseModuleWeights: true,
        ...(options.loadCheckCache === undefined ? {} : { loadCheckCache: options.loadCheckCache }),
        loadCheck: options.loadCheck ?? "cached",
        ...(options.kvBudgetMb === undefined ? {} : { kvBudgetMb: options.kvBudgetMb }),
        ...(options.stepTokens === undefined ? {} : { stepTokens: options.stepTokens }),
        ...(options.prefillPerDecode === undefined ? {} : { prefillPerDecode: options.prefillPerDecode }),
        prefixCache: options.prefixCache !== false,
      });
      let tokenizer: Tokenizer;
      try {
        const early = earlyTokenizer();
        const same = early !== undefined && TOKENIZER_FILES.every((name) => early.files[name] === model.extraFiles[name]);
        tokenizer = same ? early.tokenizer : TorchEngine.makeTokenizer(config, model.extraFiles);
      } catch (err) {
        await configuring.catch(() => undefined); // the model is disposed below, once idle
        throw err;
      }
      mark("tokenizer (beside the addon's configure)");
      let choice: Awaited<typeof configuring>;
      try {
        choice = await configuring;
      } catch (err) {
        if (!needsLibtorch(err)) throw err;
        await model.dispose();
        return undefined;
      }
      const { runtime, kernels, note, kvBytesPerRow, phases: configured } = choice;
      if (configured) Object.assign(phases, configured);
      else mark("configure");
      phases["total"] = (performance.now() - started) / 1000;
      return new TorchEngine(
        model,
        config,
        tokenizer,
        runtime,
        note,
        kernels,
        findChatTemplate(model.extraFiles, config),
        options.kvBudgetMb ?? DEFAULT_KV_BUDGET_MB,
        kvBytesPerRow,
        () => TorchEngine.makeVocabulary(config, model.extraFiles),
        phases,
      );
    } catch (err) {
      await model.dispose();
      throw asServingError(err, "ERR_CHECKPOINT_INTERFACE");
    }
  }

  /**
   * The tokenizer built from the files read straight from the archive (readArchiveExtraFiles),
   * before the addon has opened it; undefined where they cannot be read or do not make one (the
   * addon's reading then decides, and reports what is wrong).
   */
  private static earlyTokenizer(path: string): EarlyTokenizer | undefined {
    const files = readArchiveExtraFiles(path, TOKENIZER_FILES);
    if (files?.["config.json"] === undefined) return undefined;
    try {
      return { files, tokenizer: TorchEngine.makeTokenizer(parseModelConfig(files["config.json"]), files) };
    } catch {
      return undefined;
    }
  }

  private static makeTokenizer(config: ModelConfig, files: Record<string, string>): Tokenizer {
    if (config.tokenizer.kind === "byte") return new ByteTokenizer();
    const name = config.tokenizer.file ?? "tokenizer.json";
    const text = files[name];
    if (text === undefined) {
      throw new ServingError("ERR_CHECKPOINT_INTERFACE", `config.json names tokenizer file ${name}, which the checkpoint does not carry`);
    }
    try {
      const tokenizerConfig = files["tokenizer_config.json"];
      return new HuggingFaceTokenizer(JSON.parse(text), tokenizerConfig ? JSON.parse(tokenizerConfig) : {});
    } catch (err) {
      throw new ServingError("ERR_CHECKPOINT_INTERFACE", `${name} is not a usable tokenizer.json: ${(err as Error).message}`);
    }
  }

  private static makeVocabulary(config: ModelConfig, files: Record<string, string>): Vocabulary {
    const stops = config.tokenizer.eosTokenIds;
    if (config.tokenizer.kind === "byte") return byteVocabulary(config.vocabSize, stops);
    const text = files[config.tokenizer.file ?? "tokenizer.json"] ?? "{}";
    return huggingFaceVocabulary(JSON.parse(text), config.vocabSize, stops);
  }

  /** The model's grammar compiler, made on first use (the vocabulary's preprocessing takes a fraction of a second). */
  private compiler(): Promise<ConstraintCompiler> {
    this.constraints ??= ConstraintCompiler.create(this.vocabulary());
    this.constraints.catch(() => (this.constraints = undefined));
    return this.constraints;
  }

  /**
   * Compiles a constraint ahead of generation (and caches it): a constraint that cannot be
   * compiled is refused here, with the reason, before a batch or stream holds the request.
   */
  async prepareConstraint(constraint: GenerationConstraint): Promise<void> {
    try {
      await (await this.compiler()).compile(constraint);
    } catch (err) {
      if (err instanceof ConstraintError) throw new ServingError("ERR_INVALID_ARGUMENT", err.message);
      throw asServingError(err, "ERR_INTERNAL");
    }
  }

  /**
   * One grammar matcher per row of the constrained requests (undefined for the others), with
   * its first mask (`firstMasks`). Only called when some request is constrained: an
   * unconstrained call reaches the addon synchronously, as it did before constraints.
   */
  private async matchersFor(requests: readonly CompletionRequest[], firstMasks: Map<number, Int32Array>): Promise<(RowMatcher | undefined)[]> {
    const matchers: (RowMatcher | undefined)[] = [];
    try {
      for (const request of requests) {
        for (let i = 0; i < (request.n ?? 1); i++) {
          if (!request.constraint) {
            matchers.push(undefined);
            continue;
          }
          await this.prepareConstraint(request.constraint);
          const matcher = await (await this.compiler()).matcher(request.constraint);
          matchers.push(matcher);
          firstMasks.set(matchers.length - 1, (await matcher.next()).mask);
        }
      }
    } catch (err) {
      matchers.forEach((matcher) => matcher?.dispose());
      throw err;
    }
    return matchers;
  }

  get device(): string {
    return this.model.device;
  }

  get vocabularySize(): number {
    return this.config.vocabSize;
  }

  /**
   * Rows whose KV caches fit the budget, by the chosen runtime's own size of a row's cache
   * (keys and values of every layer and kv head at full context, in its cache dtype).
   */
  capacity(): { maxActiveRows: number } {
    const rows = Math.floor((this.kvBudgetMb * 2 ** 20) / this.kvBytesPerRow);
    return { maxActiveRows: Math.min(MAX_ACTIVE_ROWS, Math.max(MIN_ACTIVE_ROWS, rows)) };
  }

  /**
   * Bytes of weights held: the TorchScript module's (parameters and buffers) and the chosen
   * runtime's own (the native runtime's packed copy). On the native runtime the module's
   * parameters are released once packed, so the weights are held once (docs/operations.md, "Memory").
   */
  /**
   * The layout file this load writes for later loads (option `layoutCache`), once written:
   * `error` is "" when it was, else why not; null where this load writes none (it mapped one,
   * nothing is rewritten, or no directory). The write runs beside serving; close() cancels it.
   * `adopted`: whether the runtime reads the rows from the file yet (the first request after the
   * write takes them).
   */
  layoutWritten(): Promise<RawLayoutWrite | null> {
    return this.model.layoutWritten();
  }

  async weightMemory(): Promise<{ moduleBytes: number; runtimeBytes: number }> {
    const { module, runtime } = await this.model.weightBytes();
    return { moduleBytes: module, runtimeBytes: runtime };
  }

  usage(): EngineUsage {
    const prefix = this.model.prefixCacheStats();
    return {
      ...this.counts,
      prefixCacheQueriedTokens: prefix.queriedTokens,
      prefixCacheHitTokens: prefix.hitTokens,
      prefixCacheEvictions: prefix.evictions,
    };
  }

  /** Token ids the model is fed for a prompt (never empty). `addBos: false` for a rendered chat template. */
  encodePrompt(prompt: string, options: { addBos?: boolean } = {}): number[] {
    const ids = this.tokenizer.encode(prompt);
    const { bosTokenId, eosTokenId, addBos } = this.config.tokenizer;
    if (addBos && options.addBos !== false && bosTokenId !== null) ids.unshift(bosTokenId);
    if (ids.length === 0) ids.push(bosTokenId ?? eosTokenId ?? 0);
    return ids;
  }

  /** The checkpoint's chat template: tokenizer_config.json's, else config.json's. */
  chatTemplate(): ChatTemplate | undefined {
    return this.template;
  }

  private promptIds(request: CompletionRequest): Int32Array {
    const ids =
      request.promptTokens && request.promptTokens.length > 0
        ? request.promptTokens
        : this.encodePrompt(request.prompt, { addBos: request.templated !== true });
    this.counts.promptTokens += ids.length;
    return Int32Array.from(ids);
  }

  /** The rows of one request: n samples, the later ones sharing the first one's prefill. */
  private rows(request: CompletionRequest, firstRow: number): RawGenerateRow[] {
    const tokens = this.promptIds(request);
    const n = request.n ?? 1;
    const rows: RawGenerateRow[] = [];
    for (let i = 0; i < n; i++) {
      const row: RawGenerateRow = { tokens, maxNewTokens: request.maxNewTokens, sampling: rawSampling(request, i) };
      if (i > 0) row.sharesPrefillWith = firstRow;
      rows.push(row);
    }
    return rows;
  }

  /** One continuation per request: the first choice of complete(), the one generation path. */
  async generateBatch(requests: readonly GenerateRequest[]): Promise<string[]> {
    return (await this.complete(requests)).map((completion) => completion.choices[0]!.text);
  }

  /** Pieces of the continuation: the text of completeStream()'s chunks. */
  async *generateStream(request: GenerateRequest, signal?: AbortSignal): AsyncIterable<string> {
    for await (const chunk of this.completeStream(request, signal)) {
      if (chunk.text) yield chunk.text;
    }
  }

  /**
   * n choices per request in one addon call: usage, finish reasons, stop sequences,
   * log-probabilities. A request whose signal has already aborted is not run at all (its
   * choices are empty): the addon starts a job the moment generate() is called, so a cancel
   * sent right after it could land several steps late.
   */
  async complete(requests: readonly CompletionRequest[]): Promise<Completion[]> {
    const completions = requests.map(notRun);
    const live = requests.flatMap((request, index) => (request.signal?.aborted ? [] : [index]));
    if (live.length === 0) return completions;
    const firstMasks = new Map<number, Int32Array>();
    const matchers = live.some((index) => requests[index]!.constraint)
      ? await this.matchersFor(live.map((index) => requests[index]!), firstMasks)
      : [];
    const job = this.start(live.map((index) => requests[index]!), undefined, undefined, matchers, firstMasks);
    // A request whose client goes away stops at the next step; the others go on.
    const detach = live.map((index, i) =>
      onAbort(requests[index]!.signal, () => job.rowsOf[i]!.forEach((row) => job.generation.cancel(row))),
    );
    let outputs: Int32Array[];
    try {
      outputs = await job.generation.result;
    } catch (err) {
      throw asServingError(err, "ERR_INFERENCE");
    } finally {
      for (const undo of detach) undo();
    }
    const cached = job.generation.cachedTokens();
    live.forEach((index, i) => {
      completions[index] = {
        promptTokens: job.promptTokens[i]!,
        cachedPromptTokens: cached[job.rowsOf[i]![0]!] ?? 0,
        choices: job.rowsOf[i]!.map((row) => job.choice(row, outputs[row]!)),
      };
    });
    return completions;
  }

  /** Pieces of the request's n choices as they are produced, each choice ending with its finish reason. */
  async *completeStream(request: CompletionRequest, signal?: AbortSignal): AsyncIterable<CompletionChunk> {
    const abortSignal = signal ?? request.signal;
    if (abortSignal?.aborted) return;
    const firstMasks = new Map<number, Int32Array>();
    const matchers = request.constraint ? await this.matchersFor([request], firstMasks) : [];
    // The addon's callbacks emit chunks, the consumer pulls them: events.on buffers what it
    // has not taken yet, and throws a failure once the chunks before it are taken.
    const events = new EventEmitter();
    events.on("error", () => {}); // a failure after the consumer left has no one to tell
    const chunks = on(events, "chunk", { close: ["end"] });
    const fail = (err: unknown) => events.emit("error", err);
    let settled = false;
    const job = this.start(
      [request],
      (row, text) => {
        const logprobs = job.decoders[row]!.newLogprobs();
        events.emit("chunk", logprobs ? { index: row, text, logprobs } : { index: row, text });
      },
      fail,
      matchers,
      firstMasks,
    );
    job.generation.result.then(
      () => {
        settled = true;
        try {
          const cachedPromptTokens = job.generation.cachedTokens()[0] ?? 0;
          job.decoders.forEach((decoder, index) => {
            const chunk: CompletionChunk = {
              index,
              text: decoder.finish(),
              finishReason: decoder.finishReason(),
              completionTokens: decoder.tokens,
              promptTokens: job.promptTokens[0]!,
              cachedPromptTokens,
            };
            const logprobs = decoder.newLogprobs();
            if (logprobs) chunk.logprobs = logprobs;
            events.emit("chunk", chunk);
          });
          events.emit("end");
        } catch (err) {
          fail(err);
        }
      },
      (err: unknown) => {
        settled = true;
        fail(err);
      },
    );
    const cancel = () => job.generation.cancel();
    abortSignal?.addEventListener("abort", cancel, { once: true });
    try {
      for await (const [chunk] of chunks) yield chunk as CompletionChunk;
    } catch (err) {
      throw asServingError(err, "ERR_INFERENCE");
    } finally {
      abortSignal?.removeEventListener("abort", cancel);
      // The consumer stopped early (break, return, disconnect): stop generating.
      if (!settled) job.generation.cancel();
    }
  }

  /**
   * Starts one addon call for `requests`. Rows are watched as their tokens arrive (a
   * ChoiceDecoder each, fed by the token callback) when a stream is fed (`onText` gets each
   * row's text as it may be shown) or a row needs it (stop sequences, log-probabilities);
   * otherwise each row is decoded once at the end, which costs far less than decoding token
   * by token. Decoding inside the addon's callbacks cancels the call on a throw and reports
   * it to `onError`, never to the native layer.
   *
   * A constrained row (a matcher in `matchers`) is always watched: each of its tokens
   * advances its grammar, whose next mask goes back to the addon; the row ends once the
   * grammar is complete.
   */
  private start(
    requests: readonly CompletionRequest[],
    onText?: (row: number, text: string) => void,
    onError: (err: unknown) => void = () => {},
    matchers: readonly (RowMatcher | undefined)[] = [],
    firstMasks: ReadonlyMap<number, Int32Array> = new Map(),
  ) {
    const rows: RawGenerateRow[] = [];
    const rowsOf: number[][] = [];
    const promptTokens: number[] = [];
    const stops: (readonly string[])[] = [];
    for (const request of requests) {
      const mine = this.rows(request, rows.length);
      rowsOf.push(mine.map((_row, i) => rows.length + i));
      promptTokens.push(mine[0]!.tokens.length);
      rows.push(...mine);
      for (const _row of mine) stops.push(request.stop ?? []);
    }
    const widths = rows.map((row) => Math.max(0, row.sampling.logprobs ?? -1));
    const wantsLogprobs = rows.map((row) => (row.sampling.logprobs ?? -1) >= 0);
    const watched =
      onText !== undefined || rows.some((_row, i) => stops[i]!.length > 0 || wantsLogprobs[i] || matchers[i] !== undefined);
    for (const [row, mask] of firstMasks) rows[row]!.mask = mask;
    const constrain = (row: number, token: number) => {
      const matcher = matchers[row]!;
      if (!matcher.accept(token)) {
        generation.cancel(row); // cannot happen while the mask holds; never loop on it
        return;
      }
      matcher.next().then(
        ({ mask, complete }) => {
          if (complete) {
            decoders[row]?.markComplete();
            generation.cancel(row);
          } else {
            generation.setMask(row, mask);
          }
        },
        (err: unknown) => {
          generation.cancel(row);
          onError(err);
        },
      );
    };
    const texts = rows.map(() => "");
    const decoders: ChoiceDecoder[] = [];
    const onTokens = (pairs: Int32Array, logprobs?: Float32Array, topIds?: Int32Array, topLogprobs?: Float32Array) => {
      try {
        let top = 0;
        for (let i = 0; i < pairs.length; i += 2) {
          const row = pairs[i]!;
          const width = widths[row]!;
          const event: TokenEvent = { id: pairs[i + 1]! };
          if (logprobs && wantsLogprobs[row]) {
            event.logprob = logprobs[i / 2];
            event.topIds = topIds?.subarray(top, top + width);
            event.topLogprobs = topLogprobs?.subarray(top, top + width);
          }
          top += width;
          this.counts.generatedTokens += 1;
          if (matchers[row]) constrain(row, event.id);
          const text = decoders[row]!.push(event);
          if (text) {
            texts[row] += text;
            onText?.(row, text);
          }
        }
      } catch (err) {
        generation.cancel();
        onError(err);
      }
    };
    const generation = this.model.generate(rows, watched ? onTokens : null);
    if (matchers.some((matcher) => matcher)) {
      // After the callbacks' pending mask computations (microtasks) have run.
      const release = () => setImmediate(() => matchers.forEach((matcher) => matcher?.dispose()));
      generation.result.then(release, release);
    }
    if (watched) {
      rows.forEach((row, index) => {
        decoders.push(
          new ChoiceDecoder(
            this.tokenizer,
            stops[index]!,
            row.maxNewTokens,
            wantsLogprobs[index]!,
            () => generation.cancel(index),
            Array.from(row.tokens),
          ),
        );
      });
    }
    /** A row's choice once the call is done; `ids` are the tokens the addon returned for it. */
    const choice = (row: number, ids: Int32Array): CompletionChoice => {
      const decoder = decoders[row];
      if (!decoder) {
        this.counts.generatedTokens += ids.length;
        const text = this.tokenizer.decode(Array.from(ids), Array.from(rows[row]!.tokens));
        return { text, finishReason: ids.length < rows[row]!.maxNewTokens ? "stop" : "length", completionTokens: ids.length };
      }
      const result: CompletionChoice = { text: texts[row]! + decoder.finish(), finishReason: decoder.finishReason(), completionTokens: decoder.tokens };
      const logprobs = decoder.allLogprobs();
      if (logprobs) result.logprobs = logprobs;
      return result;
    };
    return { generation, rowsOf, promptTokens, decoders, choice };
  }

  /** Releases the model; a generation in progress finishes first, queued ones are rejected. */
  dispose(): Promise<void> {
    this.disposing ??= this.model.dispose();
    return this.disposing;
  }
}

/**
 * The addon's form of a row's settings. Sample i of n draws with seed + i: a seeded request
 * is reproducible, and its n choices differ.
 */
function rawSampling(request: SamplingSettings & { logprobs?: number }, sample: number): RawSamplingSettings {
  const raw: RawSamplingSettings = {
    ...optionalSettings(request),
    temperature: request.temperature,
    topK: request.topK ?? 0,
    seed: request.seed === undefined ? -1 : request.seed + sample,
  };
  if (request.logprobs !== undefined) raw.logprobs = request.logprobs;
  return raw;
}

/** The completion of a request that was not run: n empty choices. */
function notRun(request: CompletionRequest): Completion {
  const choices = Array.from({ length: request.n ?? 1 }, (): CompletionChoice => ({ text: "", finishReason: "stop", completionTokens: 0 }));
  return { promptTokens: 0, choices };
}

/** Calls `cancel` when `signal` aborts (at once if it already has); returns the undo. */
function onAbort(signal: AbortSignal | undefined, cancel: () => void): () => void {
  if (!signal) return () => {};
  if (signal.aborted) cancel();
  signal.addEventListener("abort", cancel, { once: true });
  return () => signal.removeEventListener("abort", cancel);
}

/**
 * config.json's `chat_template` (what an exporter chose: export_hf.py prefers a model's
 * chat_template.jinja), else tokenizer_config.json's (a string, or a list of named
 * templates, of which "default" is used).
 */
export function findChatTemplate(files: Record<string, string>, config: ModelConfig): ChatTemplate | undefined {
  let tokenizerConfig: Record<string, unknown> = {};
  try {
    tokenizerConfig = JSON.parse(files["tokenizer_config.json"] ?? "{}") as Record<string, unknown>;
  } catch {
    // An unreadable tokenizer_config.json already failed the tokenizer (or is not used).
  }
  const pick = (value: unknown): string | undefined => {
    if (typeof value === "string" && value.trim() !== "") return value;
    if (Array.isArray(value)) {
      const named = value as { name?: unknown; template?: unknown }[];
      const chosen = named.find((entry) => entry.name === "default") ?? named[0];
      return typeof chosen?.template === "string" ? chosen.template : undefined;
    }
    return undefined;
  };
  const template = config.chatTemplate ?? pick(tokenizerConfig.chat_template);
  if (template === undefined) return undefined;
  const token = (value: unknown): string | undefined =>
    typeof value === "string" ? value : typeof (value as { content?: unknown })?.content === "string" ? (value as { content: string }).content : undefined;
  const result: ChatTemplate = { template };
  const bos = token(tokenizerConfig.bos_token);
  const eos = token(tokenizerConfig.eos_token);
  if (bos !== undefined) result.bosToken = bos;
  if (eos !== undefined) result.eosToken = eos;
  return result;
}

function checkpointDtype(config: ModelConfig): "float32" | "bfloat16" | "float16" {
  const dtype = config.raw.dtype ?? "float32";
  if (dtype === "float32" || dtype === "bfloat16" || dtype === "float16") return dtype;
  throw new ServingError("ERR_CHECKPOINT_INTERFACE", `config.json: "dtype" must be "float32", "bfloat16" or "float16", got ${JSON.stringify(dtype)}`);
}

/**
 * The machine's cores minus one, which is left to the event loop; at least 1, at most 8
 * (decode steps of the models served here are too small to split further with profit).
 */
export function defaultThreads(): number {
  return Math.min(8, Math.max(1, availableParallelism() - 1));
}
