/**
 * One choice of a completion as its tokens arrive: incremental detokenization, stop
 * sequences (matched on text; the row is cancelled in the addon once one matches), token
 * counts, the finish reason and log-probabilities. Shared by the batched and streamed paths.
 */
import type { FinishReason, TokenLogprob } from "../types.js";
import { StopMatcher } from "./stopMatcher.js";
import type { StreamDecoder, Tokenizer } from "./tokenizer.js";

/** A generated token with, when asked for, its raw log-probability and top alternatives. */
export interface TokenEvent {
  id: number;
  logprob?: number;
  topIds?: ArrayLike<number>;
  topLogprobs?: ArrayLike<number>;
}

export class ChoiceDecoder {
  /** Tokens consumed (up to the one that completed a stop sequence). */
  tokens = 0;
  private readonly decoder: StreamDecoder;
  private readonly stop: StopMatcher;
  private readonly logprobs: TokenLogprob[] | undefined;
  private logprobsSent = 0;

  constructor(
    private readonly tokenizer: Tokenizer,
    stop: readonly string[],
    private readonly maxNewTokens: number,
    wantsLogprobs: boolean,
    /** Stops the row in the addon (a stop sequence matched). */
    private readonly cancel: () => void,
    /** The prompt's ids: the continuation is decoded after them (SentencePiece strips a sequence's first space). */
    context: readonly number[] = [],
  ) {
    this.decoder = tokenizer.streamDecoder(context);
    this.stop = new StopMatcher(stop);
    this.logprobs = wantsLogprobs ? [] : undefined;
  }

  /** Its grammar is complete (constrained decoding): the choice ended on its own, not on max tokens. */
  private complete = false;

  markComplete(): void {
    this.complete = true;
  }

  get stopped(): boolean {
    return this.stop.stopped;
  }

  /** Takes one token; returns the text that may be shown now. */
  push(event: TokenEvent): string {
    if (this.stop.stopped) return ""; // generated before the cancel took effect
    this.tokens += 1;
    if (this.logprobs && event.logprob !== undefined) this.logprobs.push(this.describe(event));
    const text = this.stop.push(this.decoder.push([event.id]));
    if (this.stop.stopped) this.cancel();
    return text;
  }

  /** The end of the row: text still held back. */
  finish(): string {
    if (this.stop.stopped) return "";
    return this.stop.push(this.decoder.flush()) + this.stop.flush();
  }

  finishReason(): FinishReason {
    return this.stop.stopped || this.complete || this.tokens < this.maxNewTokens ? "stop" : "length";
  }

  /** All log-probabilities so far (undefined when not asked for). */
  allLogprobs(): TokenLogprob[] | undefined {
    return this.logprobs;
  }

  /** Log-probabilities not yet handed out by this method (streams attach them to their next chunk). */
  newLogprobs(): TokenLogprob[] | undefined {
    if (!this.logprobs) return undefined;
    const fresh = this.logprobs.slice(this.logprobsSent);
    this.logprobsSent = this.logprobs.length;
    return fresh;
  }

  private describe(event: TokenEvent): TokenLogprob {
    const top: TokenLogprob["top"] = [];
    const ids = event.topIds ?? [];
    for (let i = 0; i < ids.length; i++) {
      top.push({ ...this.piece(ids[i]!), logprob: event.topLogprobs?.[i] ?? Number.NEGATIVE_INFINITY });
    }
    return { ...this.piece(event.id), logprob: event.logprob ?? 0, top };
  }

  /** A token's own text and bytes (a byte-level token may be half a character). */
  private piece(id: number): { token: string; bytes: number[] } {
    if (this.tokenizer.kind === "byte") {
      const bytes = id >= 0 && id < 256 ? [id] : [];
      return { token: this.tokenizer.decode([id]), bytes };
    }
    const token = this.tokenizer.decode([id]);
    return { token, bytes: Array.from(Buffer.from(token, "utf8")) };
  }
}
