/**
 * Tokenizers of the language-model checkpoints: byte-level (the demo model) and Hugging Face
 * `tokenizer.json` as real models ship it: byte-level BPE (GPT-2, Llama 3, Qwen2) and
 * SentencePiece-style BPE with byte fallback and the metaspace `▁` (Llama 2, Mistral,
 * TinyLlama). Streams decode to whole UTF-8 text only, never half a character, even when one
 * character spans several byte-fallback tokens (`<0xE2><0x98><0x83>`).
 */
import { Tokenizer as HfTokenizerImpl } from "@huggingface/tokenizers";

export interface StreamDecoder {
  /** Text completed by these ids; "" while a character is still incomplete. */
  push(ids: readonly number[]): string;
  /** Whatever is left at the end of the stream. */
  flush(): string;
}

export interface Tokenizer {
  readonly kind: "byte" | "huggingface";
  encode(text: string): number[];
  /**
   * Text of `ids`. `context` (the prompt's ids) is the text they continue: SentencePiece-style
   * decoders strip the space of a sequence's first word, which a continuation keeps
   * (" cat" after "the", not "cat").
   */
  decode(ids: readonly number[], context?: readonly number[]): string;
  streamDecoder(context?: readonly number[]): StreamDecoder;
}

/**
 * Prompt tokens a continuation is decoded after: enough to settle the first word's spacing
 * and a character split over byte tokens (vLLM uses 5 as well).
 */
const CONTEXT_TOKENS = 5;

/** Ids 0..255 are UTF-8 bytes; larger ids are special tokens and decode to nothing. */
export class ByteTokenizer implements Tokenizer {
  readonly kind = "byte" as const;
  private readonly encoder = new TextEncoder();

  encode(text: string): number[] {
    return Array.from(this.encoder.encode(text));
  }

  decode(ids: readonly number[]): string {
    return new TextDecoder("utf-8").decode(ByteTokenizer.bytes(ids));
  }

  streamDecoder(): StreamDecoder {
    const decoder = new TextDecoder("utf-8");
    return {
      push: (ids) => decoder.decode(ByteTokenizer.bytes(ids), { stream: true }),
      flush: () => decoder.decode(),
    };
  }

  private static bytes(ids: readonly number[]): Uint8Array {
    return Uint8Array.from(ids.filter((id) => id >= 0 && id < 256));
  }
}

export class HuggingFaceTokenizer implements Tokenizer {
  readonly kind = "huggingface" as const;
  private readonly impl: HfTokenizerImpl;

  constructor(tokenizerJson: object, tokenizerConfig: object = {}) {
    this.impl = new HfTokenizerImpl(tokenizerJson, tokenizerConfig);
  }

  encode(text: string): number[] {
    return this.impl.encode(text, { add_special_tokens: false }).ids;
  }

  decode(ids: readonly number[], context: readonly number[] = []): string {
    if (ids.length === 0) return "";
    if (context.length === 0) return this.decodeAll(ids);
    const tail = context.slice(-CONTEXT_TOKENS);
    const prefix = this.decodeAll(tail);
    const full = this.decodeAll([...tail, ...ids]);
    return full.startsWith(prefix) ? full.slice(prefix.length) : this.decodeAll(ids);
  }

  private decodeAll(ids: readonly number[]): string {
    if (ids.length === 0) return "";
    return this.impl.decode([...ids], { skip_special_tokens: true, clean_up_tokenization_spaces: false });
  }

  /**
   * Incremental detokenization (the scheme of TGI, vLLM and transformers' TextStreamer):
   * decode a short window and emit only the text that grew, holding back while the window
   * ends in an incomplete byte sequence (U+FFFD). The window starts on the prompt's last
   * tokens, so the first piece has the spacing it has in the full text.
   */
  streamDecoder(context: readonly number[] = []): StreamDecoder {
    const ids: number[] = context.slice(-CONTEXT_TOKENS);
    let prefixOffset = 0;
    let readOffset = ids.length;
    const step = (final: boolean): string => {
      const prefixText = this.decodeAll(ids.slice(prefixOffset, readOffset));
      const fullText = this.decodeAll(ids.slice(prefixOffset));
      if (fullText.length > prefixText.length && (final || !fullText.endsWith("\uFFFD"))) {
        prefixOffset = readOffset;
        readOffset = ids.length;
        return fullText.slice(prefixText.length);
      }
      return "";
    };
    return {
      push: (newIds) => {
        ids.push(...newIds);
        return step(false);
      },
      flush: () => step(true),
    };
  }
}
