/**
 * Tokenizers of the language-model checkpoints: byte-level (the demo model) and Hugging Face
 * `tokenizer.json` (GPT-2 BPE and the like). Streams decode to whole UTF-8 text only, never
 * half a character.
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
  decode(ids: readonly number[]): string;
  streamDecoder(): StreamDecoder;
}

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

  decode(ids: readonly number[]): string {
    if (ids.length === 0) return "";
    return this.impl.decode([...ids], { skip_special_tokens: true, clean_up_tokenization_spaces: false });
  }

  /**
   * Incremental detokenization (the scheme of TGI and transformers' TextStreamer): decode a
   * short window and emit only the text that grew, holding back while the window ends in an
   * incomplete byte sequence (U+FFFD).
   */
  streamDecoder(): StreamDecoder {
    const ids: number[] = [];
    let prefixOffset = 0;
    let readOffset = 0;
    const step = (final: boolean): string => {
      const prefixText = this.decode(ids.slice(prefixOffset, readOffset));
      const fullText = this.decode(ids.slice(prefixOffset));
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
