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
  /** The first end-of-sequence id (older checkpoints have only this one). */
  eosTokenId: number | null;
  /** Every id that ends a row (`eos_token_ids`, e.g. Llama 3's <|end_of_text|> and <|eot_id|>). */
  eosTokenIds: number[];
  addBos: boolean;
}

export interface ModelConfig {
  architecture: string;
  vocabSize: number;
  /** Positions the model attends over (block_size). */
  contextLength: number;
  tokenizer: TokenizerConfig;
  /** Jinja chat template of a Hugging Face export, or null. */
  chatTemplate: string | null;
  /** The exported model's name (the Hugging Face directory's), or null. */
  modelName: string | null;
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

function eosTokenIds(raw: Record<string, unknown>, first: number | null, vocabSize: number): number[] {
  const list = raw.eos_token_ids;
  if (list === undefined || list === null) return first === null ? [] : [first];
  if (!Array.isArray(list)) fail(`tokenizer."eos_token_ids" must be a list of token ids`);
  const ids = list.map((value) => {
    if (typeof value !== "number" || !Number.isInteger(value) || value < 0 || value >= vocabSize) {
      fail(`tokenizer."eos_token_ids" must hold token ids below vocab_size (${vocabSize}), got ${JSON.stringify(value)}`);
    }
    return value;
  });
  if (first !== null && !ids.includes(first)) fail(`tokenizer."eos_token_id" ${first} is not in "eos_token_ids"`);
  return ids;
}

function optionalString(raw: Record<string, unknown>, key: string): string | null {
  const value = raw[key];
  if (value === undefined || value === null) return null;
  if (typeof value !== "string") fail(`"${key}" must be a string or null`);
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
  const eosTokenId = tokenId(t, "eos_token_id", vocabSize);
  return {
    architecture: typeof config.architecture === "string" ? config.architecture : "custom",
    vocabSize,
    contextLength,
    tokenizer: {
      kind: t.kind,
      file,
      bosTokenId: tokenId(t, "bos_token_id", vocabSize),
      eosTokenId,
      eosTokenIds: eosTokenIds(t, eosTokenId, vocabSize),
      addBos: t.add_bos === true,
    },
    chatTemplate: optionalString(config, "chat_template"),
    modelName: optionalString(config, "model_name"),
    raw: config,
  };
}
