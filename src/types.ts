/**
 * Public contracts of the serving layer. Any object of these shapes works: the HTTP apps
 * accept hand-written engines, recommenders and limiters as readily as the libtorch ones.
 */
import type { Express } from "express";
import type { SamplingSettings } from "./engine/sampling.js";

export type { OptionalSamplingSettings, SamplingSettings } from "./engine/sampling.js";

/** One text-generation request, camelCase inside TypeScript (snake_case on the wire). */
export interface GenerateRequest extends SamplingSettings {
  prompt: string;
  maxNewTokens: number;
  /** Generation ends before the first of these strings (matched on decoded text). */
  stop?: string[];
  /** Aborts this request's generation (a disconnected client); engines may ignore it. */
  signal?: AbortSignal;
}

/** A request of the rich form (CompletionEngine): a GenerateRequest with n samples and log-probabilities. */
export interface CompletionRequest extends GenerateRequest {
  /** Token ids to continue instead of `prompt` (which then only names them). */
  promptTokens?: number[];
  /** The prompt is a rendered chat template, which carries its own special tokens: no BOS is added. */
  templated?: boolean;
  /** Samples of the prompt, sharing one prefill. Default 1. */
  n?: number;
  /** Report log-probabilities of each generated token and this many alternatives (0..20). */
  logprobs?: number;
  /** Output the tokens must follow (structured output, tool calls); absent: free text. */
  constraint?: GenerationConstraint;
}

/**
 * What a constrained choice's text must match, enforced token by token while it is sampled
 * (src/engine/constraints). Every choice of the request follows it.
 */
export type GenerationConstraint =
  | { type: "json_object" }
  | { type: "json_schema"; schema: Record<string, unknown> | boolean; strict?: boolean }
  | { type: "regex"; pattern: string }
  | { type: "grammar"; grammar: string }
  /**
   * `begin` JSON(schema) `end`, once, or (with `repeat`) one or more times joined by
   * `separator`: tool calls in a template's format (`<tool_call>\n{...}\n</tool_call>`). The
   * JSON is compact, as for json_schema.
   */
  | { type: "tagged_json"; schema: Record<string, unknown>; begin: string; end: string; separator?: string; repeat?: boolean };

/** A token's log-probability under the model's raw distribution (before temperature and penalties). */
export interface TokenLogprob {
  token: string;
  /** The token's UTF-8 bytes (a byte-level token may be part of a character). */
  bytes: number[];
  logprob: number;
  /** The most likely tokens at this step, most likely first. */
  top: { token: string; bytes: number[]; logprob: number }[];
}

export type FinishReason = "stop" | "length";

export interface CompletionChoice {
  text: string;
  finishReason: FinishReason;
  /** Tokens generated for this choice (up to the one that completed a stop sequence). */
  completionTokens: number;
  logprobs?: TokenLogprob[];
}

export interface Completion {
  /** Tokens the model was fed for the prompt. */
  promptTokens: number;
  /** Of those, tokens whose keys and values came from the prefix cache instead of a prefill. */
  cachedPromptTokens?: number;
  /** n choices, in order. */
  choices: CompletionChoice[];
}

/** A piece of a streamed completion: text of choice `index`, and its end when `finishReason` is set. */
export interface CompletionChunk {
  index: number;
  text: string;
  logprobs?: TokenLogprob[];
  finishReason?: FinishReason;
  /** On a choice's last chunk. */
  completionTokens?: number;
  /** On every choice's last chunk. */
  promptTokens?: number;
  /** On every choice's last chunk: prompt tokens served from the prefix cache. */
  cachedPromptTokens?: number;
}

/** A checkpoint's chat template (tokenizer_config.json or config.json `chat_template`), with the special tokens it names. */
export interface ChatTemplate {
  template: string;
  bosToken?: string;
  eosToken?: string;
}

/** Running totals an engine may report; the HTTP app exposes them as metrics. */
export interface EngineUsage {
  promptTokens: number;
  generatedTokens: number;
  /** Prompt tokens of the rows that looked up a cached prefix (prefix caching on). */
  prefixCacheQueriedTokens?: number;
  /** Of those, tokens whose keys and values came from the prefix cache. */
  prefixCacheHitTokens?: number;
  /** Cached prefixes dropped to make room for rows that did not reuse them. */
  prefixCacheEvictions?: number;
}

/**
 * The engine's rich form: n choices per request with token counts, finish reasons, stop
 * sequences and log-probabilities, batched and streamed. It is the one contract the HTTP
 * layer generates through (/generate, /generate/stream and /v1 alike): TorchEngine has it,
 * and createApp builds it once from generateBatch/generateStream for an engine without it.
 */
export interface CompletionEngine {
  /** n choices per request, same order. Runs once per batch. */
  complete(requests: readonly CompletionRequest[]): Promise<Completion[]>;
  /** The request's choices in chunks as they are produced; stops early when `signal` aborts. */
  completeStream(request: CompletionRequest, signal?: AbortSignal): AsyncIterable<CompletionChunk>;
}

export interface TextGenerationEngine {
  /** One continuation per request, same order. Runs once per batch. */
  generateBatch(requests: readonly GenerateRequest[]): Promise<string[]>;
  /** Pieces of the continuation as they are produced; stops early when `signal` aborts. */
  generateStream(request: GenerateRequest, signal?: AbortSignal): AsyncIterable<string>;
  /**
   * Optional, with completeStream: the rich form (CompletionEngine), which every route then
   * uses. Without both, createApp builds it from generateBatch/generateStream: stop sequences
   * applied to the text, no usage, no log-probabilities.
   */
  complete?(requests: readonly CompletionRequest[]): Promise<Completion[]>;
  /** Optional streaming form of complete(); stops early when `signal` aborts. */
  completeStream?(request: CompletionRequest, signal?: AbortSignal): AsyncIterable<CompletionChunk>;
  /**
   * Optional: compiles a constraint (structured output, tool calls) ahead of generation, and
   * rejects with a 400-coded error naming the problem when it cannot be compiled. Engines
   * without it do not take constrained requests (the HTTP layer refuses them).
   */
  prepareConstraint?(constraint: GenerationConstraint): Promise<void>;
  /** The checkpoint's chat template, when it has one; the chat route has a default. */
  chatTemplate?(): ChatTemplate | undefined;
  /** Token ids are below this. The /v1 routes take prompts as token ids only from engines that say it. */
  readonly vocabularySize?: number;
  /** Token counts since the engine was created. Optional for hand-written engines. */
  usage?(): EngineUsage;
  /** Releases native resources; idempotent. Optional for hand-written engines. */
  dispose?(): Promise<void>;
  /**
   * What the engine can hold at once: the default limit of concurrent streams. Optional;
   * without it the app uses a fixed default (64).
   */
  capacity?(): EngineCapacity;
}

export interface EngineCapacity {
  /** Rows (requests) decoding at once that fit the engine's memory budget. */
  maxActiveRows: number;
}

export interface Recommendation {
  items: number[];
  fallback: boolean;
}

export interface Recommender {
  recommend(userId: number, k: number): Recommendation | Promise<Recommendation>;
  dispose?(): Promise<void>;
}

export interface RateLimiter {
  allow(key: string): boolean | Promise<boolean>;
  /** Used for Retry-After (whole seconds, at least 1) when present. */
  retryAfterSeconds?(key: string): number;
}

export interface ServingApp extends Express {
  /** Lifespan begins: the batcher runs. */
  start(): Promise<void>;
  /** Lifespan ends: stop admitting, drain queued work, stop. */
  stop(): Promise<void>;
  /** What GET /ready answers. */
  readonly readiness: ReadinessControl;
}

export interface ReadinessControl {
  readonly ready: boolean;
  /** Not ready from now on (a drain is starting); stop() does it too. */
  markDraining(): void;
  /** An extra condition for readiness (the server entry: every app is listening). */
  setGate(gate: () => boolean): void;
}

export interface CreateAppOptions {
  /** Most requests in one engine call. Default 8. */
  maxBatchSize?: number;
  /** Longest a batch waits for company after its first request arrives, ms. Default 5. */
  maxWaitMs?: number;
  rateLimiter?: RateLimiter | null;
  /** Most requests waiting for a batch; beyond it /generate answers 503. Default 1024. */
  maxQueueSize?: number;
  /** The id GET /v1/models lists and /v1 requests must name. Default "model". */
  modelName?: string;
  /** When non-empty, every route but /health, /metrics and /ready needs one of these keys. */
  apiKeys?: readonly string[] | null;
  /**
   * Most streams at once; beyond it a new stream answers 503 with Retry-After. Default: the
   * engine's `capacity().maxActiveRows`, else 64.
   */
  maxActiveStreams?: number;
  /**
   * The responses POST /v1/responses keeps for GET and previous_response_id, in this
   * process's memory: most bytes (0 keeps none) and longest age. Default 64 MiB, one hour.
   */
  responseStore?: { maxBytes: number; ttlMs: number };
}

export interface CreateRecsysAppOptions {
  rateLimiter?: RateLimiter | null;
  /** When non-empty, every route but /health, /metrics and /ready needs one of these keys. */
  apiKeys?: readonly string[] | null;
}
