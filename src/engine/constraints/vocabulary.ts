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

/** GPT-2's byte-level alphabet: the character each byte is written as. */
function byteLevelDecoder(): Map<number, number> {
  const bytes: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) bytes.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bytes.push(b);
  for (let b = 0xae; b <= 0xff; b++) bytes.push(b);
  const chars = [...bytes];
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bytes.includes(b)) {
      bytes.push(b);
      chars.push(256 + n++);
    }
  }
  return new Map(chars.map((char, i) => [char, bytes[i]!]));
}

/** Each token's bytes as the model writes them (special tokens: none). */
export function tokenBytes(vocabulary: Vocabulary): Uint8Array[] {
  const encoder = new TextEncoder();
  const decoder = vocabulary.type === "byte_level" ? byteLevelDecoder() : undefined;
  return vocabulary.tokens.map((token) => {
    if (decoder) return Uint8Array.from([...token].map((char) => decoder.get(char.codePointAt(0)!) ?? 0x3f));
    if (vocabulary.type === "byte_fallback") {
      if (/^<0x[0-9A-Fa-f]{2}>$/.test(token)) return Uint8Array.of(parseInt(token.slice(3, 5), 16));
      return encoder.encode(token.replace(/\u2581/g, " "));
    }
    return encoder.encode(token);
  });
}

/** After a lead byte, the range its second byte must be in (UTF-8's overlong, surrogate and beyond-U+10FFFF exclusions). */
export function secondByteRange(lead: number): [number, number] {
  if (lead === 0xe0) return [0xa0, 0xbf];
  if (lead === 0xed) return [0x80, 0x9f];
  if (lead === 0xf0) return [0x90, 0xbf];
  if (lead === 0xf4) return [0x80, 0x8f];
  return [0x80, 0xbf];
}

/**
 * Tokens refused in constrained JSON whatever the grammar says (bit set): those holding a
 * control byte (U+0000..U+001F, except `allowed`) or bytes that are never valid UTF-8 (C0, C1,
 * F5..FF, or a lead byte followed by a second byte out of its range). JSON may hold neither,
 * but XGrammar 0.1.27's JSON strings admit both (control characters but CR and LF, overlong
 * forms and surrogates). Sequences split across tokens are checked by the matcher.
 */
export function refusedTokenMask(vocabulary: Vocabulary, bytes: readonly Uint8Array[], allowed: readonly number[] = []): Int32Array {
  const mask = new Int32Array(Math.ceil(vocabulary.size / 32));
  bytes.forEach((token, id) => {
    let bad = false;
    for (let i = 0; i < token.length && !bad; i++) {
      const b = token[i]!;
      if (b < 0x20 && !allowed.includes(b)) bad = true;
      else if (b === 0xc0 || b === 0xc1 || b >= 0xf5) bad = true;
      else if (b >= 0xe0 && i + 1 < token.length) {
        const [lo, hi] = secondByteRange(b);
        bad = token[i + 1]! < lo || token[i + 1]! > hi;
      }
    }
    if (bad) mask[id >> 5]! |= 1 << (id & 31);
  });
  return mask;
}
