/**
 * config.json of a language-model checkpoint (docs/checkpoint.md), checked field by field so
 * a bad export fails at load with the field named, not later with a tensor error.
 */
import { ServingError } from "../errors.js";

export interface TokenizerConfig {
  kind: "byte" | "huggingface";
  /** Extra file holding tokenizer.json (huggingface only). */
  file: string | null;
  bosTokenId: number | null;
  eosTokenId: number | null;
  addBos: boolean;
}

export interface ModelConfig {
  architecture: string;
  vocabSize: number;
  /** Positions the model attends over (block_size). */
  contextLength: number;
  tokenizer: TokenizerConfig;
  /** The parsed file, for fields this server does not interpret. */
  raw: Record<string, unknown>;
}

function fail(message: string): never {
  throw new ServingError("ERR_CHECKPOINT_INTERFACE", `config.json: ${message} (see docs/checkpoint.md)`);
}

function positiveInt(raw: Record<string, unknown>, key: string): number {
  const value = raw[key];
  if (typeof value !== "number" || !Number.isInteger(value) || value < 1) fail(`"${key}" must be a positive integer`);
  return value;
}

function tokenId(raw: Record<string, unknown>, key: string, vocabSize: number): number | null {
  const value = raw[key];
  if (value === undefined || value === null) return null;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0 || value >= vocabSize) {
    fail(`tokenizer."${key}" must be null or a token id below vocab_size (${vocabSize})`);
  }
  return value;
}

export function parseModelConfig(text: string): ModelConfig {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    fail(`not valid JSON (${(err as Error).message})`);
  }
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) fail("must be a JSON object");
  const config = raw as Record<string, unknown>;
  if (config.format !== undefined && config.format !== "torchserve-node/causal-lm") {
    fail(`"format" is ${JSON.stringify(config.format)}, expected "torchserve-node/causal-lm"`);
  }
  const vocabSize = positiveInt(config, "vocab_size");
  const contextLength = positiveInt(config, "block_size");
  if (contextLength < 2) fail(`"block_size" must be at least 2`);
  const tok = config.tokenizer;
  if (typeof tok !== "object" || tok === null) fail(`"tokenizer" must be an object`);
  const t = tok as Record<string, unknown>;
  if (t.kind !== "byte" && t.kind !== "huggingface") fail(`tokenizer."kind" must be "byte" or "huggingface"`);
  if (t.kind === "byte" && vocabSize < 256) fail(`a byte tokenizer needs vocab_size >= 256`);
  const file = t.kind === "huggingface" ? (typeof t.file === "string" ? t.file : "tokenizer.json") : null;
  return {
    architecture: typeof config.architecture === "string" ? config.architecture : "custom",
    vocabSize,
    contextLength,
    tokenizer: {
      kind: t.kind,
      file,
      bosTokenId: tokenId(t, "bos_token_id", vocabSize),
      eosTokenId: tokenId(t, "eos_token_id", vocabSize),
      addBos: t.add_bos === true,
    },
    raw: config,
  };
}
