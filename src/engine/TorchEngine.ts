/**
 * TorchEngine: the libtorch text-generation engine. Tokenizes in TypeScript, generates in the
 * addon on the model's own inference thread, and streams whole UTF-8 pieces back.
 */
import { availableParallelism } from "node:os";

import { verifyChecksum } from "../checkpoint/verify.js";
import { asServingError, ServingError } from "../errors.js";
import { loadAddon } from "../native/binding.js";
import type { KernelFamily, KernelFamilyCap, RawGenerateRow, RawLanguageModel } from "../native/types.js";
import { readEngineEnv } from "../server/config.js";
import type { EngineUsage, GenerateRequest, TextGenerationEngine } from "../types.js";
import { type ModelConfig, parseModelConfig } from "./config.js";
import { ByteTokenizer, HuggingFaceTokenizer, type Tokenizer } from "./tokenizer.js";

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
  /** Check `<checkpoint>.sha256` when present. Default true. */
  verifyChecksum?: boolean;
  /**
   * "auto" (default) runs architecture "gpt" on the native CPU runtime when its forward
   * matches the checkpoint's TorchScript (checked at load), else the TorchScript forward.
   */
  runtime?: "auto" | "native" | "torchscript";
  /**
   * Highest kernel family the native runtime may use: "auto" (default: the best this CPU
   * has), "avx512_bf16", "avx512", "avx2" or "baseline". For hosts that must match another CPU's numerics,
   * and for testing every family on one machine.
   */
  kernels?: KernelFamilyCap;
}

export class TorchEngine implements TextGenerationEngine {
  private readonly counts: EngineUsage = { promptTokens: 0, generatedTokens: 0 };
  private disposing: Promise<void> | undefined;

  private constructor(
    private readonly model: RawLanguageModel,
    readonly config: ModelConfig,
    readonly tokenizer: Tokenizer,
    /** "native" (the built-in fast path of architecture "gpt") or "torchscript". */
    readonly runtime: "native" | "torchscript",
    /** Why "auto" chose "torchscript", when it did. */
    readonly runtimeNote: string | undefined,
    /** The kernel family of the native runtime; undefined on TorchScript. */
    readonly kernels: KernelFamily | undefined,
  ) {}

  static async load(path: string, options: TorchEngineOptions = {}): Promise<TorchEngine> {
    if (options.verifyChecksum !== false) await verifyChecksum(path);
    const addon = loadAddon();
    const model = await addon.loadLanguageModel(path, {
      device: options.device ?? "cpu",
      extraFiles: ["config.json", "tokenizer.json", "tokenizer_config.json"],
      threads: options.threads ?? defaultThreads(),
    });
    try {
      const config = parseModelConfig(model.extraFiles["config.json"] ?? "");
      const tokenizer = TorchEngine.makeTokenizer(config, model.extraFiles);
      const { runtime, kernels, note } = await model.configure({
        contextLength: config.contextLength,
        eosTokenIds: config.tokenizer.eosTokenId === null ? [] : [config.tokenizer.eosTokenId],
        warmupToken: tokenizer.encode("a")[0] ?? 0,
        runtime: options.runtime ?? "auto",
        architecture: config.architecture,
        kernels: options.kernels ?? "auto",
        dtype: checkpointDtype(config),
        modelConfig: config.raw,
      });
      return new TorchEngine(model, config, tokenizer, runtime, note, kernels);
    } catch (err) {
      await model.dispose();
      throw asServingError(err, "ERR_CHECKPOINT_INTERFACE");
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

  get device(): string {
    return this.model.device;
  }

  usage(): EngineUsage {
    return { ...this.counts };
  }

  /** Token ids the model is fed for a prompt (never empty). */
  encodePrompt(prompt: string): number[] {
    const ids = this.tokenizer.encode(prompt);
    const { bosTokenId, eosTokenId, addBos } = this.config.tokenizer;
    if (addBos && bosTokenId !== null) ids.unshift(bosTokenId);
    if (ids.length === 0) ids.push(bosTokenId ?? eosTokenId ?? 0);
    return ids;
  }

  private row(request: GenerateRequest): RawGenerateRow {
    const tokens = Int32Array.from(this.encodePrompt(request.prompt));
    this.counts.promptTokens += tokens.length;
    return {
      tokens,
      maxNewTokens: request.maxNewTokens,
      temperature: request.temperature,
      topK: request.topK ?? 0,
      seed: request.seed ?? -1,
    };
  }

  async generateBatch(requests: readonly GenerateRequest[]): Promise<string[]> {
    if (requests.length === 0) return [];
    const generation = this.model.generate(requests.map((request) => this.row(request)), null);
    // A request whose client went away stops at the next step; the others go on.
    const detach = requests.map((request, index) => {
      const signal = request.signal;
      if (!signal) return () => {};
      const cancel = () => generation.cancel(index);
      if (signal.aborted) cancel();
      signal.addEventListener("abort", cancel, { once: true });
      return () => signal.removeEventListener("abort", cancel);
    });
    try {
      const outputs = await generation.result;
      return outputs.map((ids) => {
        this.counts.generatedTokens += ids.length;
        return this.tokenizer.decode(Array.from(ids));
      });
    } catch (err) {
      throw asServingError(err, "ERR_INFERENCE");
    } finally {
      for (const undo of detach) undo();
    }
  }

  async *generateStream(request: GenerateRequest, signal?: AbortSignal): AsyncIterable<string> {
    const abortSignal = signal ?? request.signal;
    if (abortSignal?.aborted) return;
    const decoder = this.tokenizer.streamDecoder();
    const pieces: string[] = [];
    let head = 0;
    let finished = false;
    let failure: unknown;
    let wake: (() => void) | undefined;
    const notify = () => {
      const resume = wake;
      wake = undefined;
      resume?.();
    };

    // Decoding runs inside the addon's callbacks: a throw there must end this stream with an
    // error, never escape into the native layer.
    const fail = (err: unknown) => {
      failure ??= err;
      finished = true;
      notify();
    };
    const generation = this.model.generate([this.row(request)], (pairs) => {
      try {
        for (let i = 1; i < pairs.length; i += 2) {
          this.counts.generatedTokens += 1;
          const piece = decoder.push([pairs[i]!]);
          if (piece) pieces.push(piece);
        }
        notify();
      } catch (err) {
        generation.cancel();
        fail(err);
      }
    });
    generation.result.then(
      () => {
        try {
          const tail = decoder.flush();
          if (tail) pieces.push(tail);
          finished = true;
          notify();
        } catch (err) {
          fail(err);
        }
      },
      fail,
    );
    const cancel = () => generation.cancel();
    abortSignal?.addEventListener("abort", cancel, { once: true });
    try {
      for (;;) {
        if (head < pieces.length) {
          const piece = pieces[head]!;
          pieces[head++] = "";
          yield piece;
          continue;
        }
        if (finished) {
          if (failure !== undefined) throw asServingError(failure, "ERR_INFERENCE");
          return;
        }
        await new Promise<void>((resolve) => {
          wake = resolve;
        });
      }
    } finally {
      abortSignal?.removeEventListener("abort", cancel);
      // The consumer stopped early (break, return, disconnect): stop generating.
      if (!finished) generation.cancel();
    }
  }

  /** Releases the model; a generation in progress finishes first, queued ones are rejected. */
  dispose(): Promise<void> {
    this.disposing ??= this.model.dispose();
    return this.disposing;
  }
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

/**
 * Builds the engine from the environment, read by the server's one reader
 * (src/server/config.ts): SERVICE_CKPT (required), SERVICE_DEVICE (default "cpu"),
 * SERVICE_THREADS (default: the machine's cores minus one, at most 8), SERVICE_RUNTIME
 * (default "auto"), SERVICE_KERNELS (default "auto").
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
  const { checkpoint, device, threads, runtime, kernels } = settings;
  return TorchEngine.load(checkpoint, { device, threads, runtime, kernels });
}
