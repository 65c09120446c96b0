/**
 * Stop sequences matched on decoded text across token boundaries. Text is released only when
 * no stop sequence could still start in it, so a stream never shows part of a stop sequence
 * (the scheme of vLLM's and TGI's detokenizers).
 */
export class StopMatcher {
  private pending = "";
  private done = false;

  constructor(private readonly stops: readonly string[]) {}

  /** True once a stop sequence was seen; later text is ignored. */
  get stopped(): boolean {
    return this.done;
  }

  /** Adds decoded text; returns what may be shown now. */
  push(text: string): string {
    if (this.done) return "";
    if (this.stops.length === 0) return text;
    this.pending += text;
    let cut = -1;
    for (const stop of this.stops) {
      const at = this.pending.indexOf(stop);
      if (at >= 0 && (cut < 0 || at < cut)) cut = at;
    }
    if (cut >= 0) {
      this.done = true;
      const out = this.pending.slice(0, cut);
      this.pending = "";
      return out;
    }
    const hold = this.heldBack();
    const out = this.pending.slice(0, this.pending.length - hold);
    this.pending = this.pending.slice(this.pending.length - hold);
    return out;
  }

  /** The end of the text: what was held back could not become a stop sequence after all. */
  flush(): string {
    const out = this.done ? "" : this.pending;
    this.pending = "";
    return out;
  }

  /** Length of the longest end of `pending` that is a proper prefix of some stop sequence. */
  private heldBack(): number {
    let hold = 0;
    for (const stop of this.stops) {
      for (let n = Math.min(stop.length - 1, this.pending.length); n > hold; n--) {
        if (this.pending.endsWith(stop.slice(0, n))) {
          hold = n;
          break;
        }
      }
    }
    return hold;
  }
}
