/**
 * A checkpoint's vocabulary as XGrammar reads it: every token id's string in the tokenizer's
 * own encoding and how to decode it ("byte_level" for GPT-2-style byte-level BPE,
 * "byte_fallback" for SentencePiece with `<0xNN>` byte tokens and the metaspace `▁`, "raw"
 * otherwise). Special tokens are empty strings: XGrammar never allows them inside
 * constrained text (the end-of-sequence ids are passed to it as stop tokens instead).
 */
export interface Vocabulary {
  tokens: string[];
  type: "byte_level" | "byte_fallback" | "raw";
  /** Logits per step (config.json vocab_size): ids past `tokens` are never allowed. */
  size: number;
  /** Where a constrained choice may end (the model's end-of-sequence ids). */
  stopTokenIds: number[];
}

/** The demo model's byte tokenizer: ids 0..255 are bytes, the ids above them special. */
export function byteVocabulary(size: number, stopTokenIds: number[]): Vocabulary {
  const tokens: string[] = [];
  for (let id = 0; id < size; id++) tokens.push(id < 256 ? `<0x${id.toString(16).toUpperCase().padStart(2, "0")}>` : "");
  return { tokens, type: "byte_fallback", size, stopTokenIds };
}

interface TokenizerJson {
  model?: { type?: string; vocab?: Record<string, number> | [string, number][]; byte_fallback?: boolean };
  decoder?: { type?: string; decoders?: { type?: string }[] } | null;
  added_tokens?: { id: number; content: string; special?: boolean }[];
}

/** A Hugging Face tokenizer.json's vocabulary. */
export function huggingFaceVocabulary(json: TokenizerJson, size: number, stopTokenIds: number[]): Vocabulary {
  const model = json.model ?? {};
  const tokens: string[] = [];
  if (Array.isArray(model.vocab)) {
    model.vocab.forEach(([piece], id) => (tokens[id] = piece));
  } else {
    for (const [piece, id] of Object.entries(model.vocab ?? {})) tokens[id] = piece;
  }
  for (const added of json.added_tokens ?? []) tokens[added.id] = added.special ? "" : added.content;
  const length = Math.max(size, tokens.length);
  for (let id = 0; id < length; id++) tokens[id] ??= "";
  const decoders = [json.decoder?.type, ...(json.decoder?.decoders ?? []).map((d) => d.type)];
  const type = decoders.includes("ByteLevel")
    ? "byte_level"
    : model.byte_fallback || decoders.includes("ByteFallback") || decoders.includes("Metaspace")
      ? "byte_fallback"
      : "raw";
  return { tokens, type, size: length, stopTokenIds };
}
