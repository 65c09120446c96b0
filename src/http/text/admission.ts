/**
 * StreamAdmission: at most `limit` streams at once. A stream holds its place from admission
 * until its response ends (or the client leaves); one more is refused with 503 and
 * Retry-After rather than growing the decode batch and its KV memory without bound.
 * Shared by every streaming route of an app, so they draw on one budget.
 */
import type { Counter, Gauge } from "prom-client";
import { ServingError } from "../../errors.js";

/** Fixed limit for an engine that cannot say what it can hold (no `capacity()`). */
export const DEFAULT_MAX_ACTIVE_STREAMS = 64;

export interface AdmissionMetrics {
  /** Streams refused, by route template. */
  readonly refused: Counter<"route">;
  /** Streams holding a place. */
  readonly active: Gauge;
}

export class StreamAdmission {
  private active = 0;

  constructor(
    readonly limit: number,
    private readonly metrics?: AdmissionMetrics,
  ) {
    if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`maxActiveStreams must be a positive integer, got ${limit}`);
  }

  get activeStreams(): number {
    return this.active;
  }

  /**
   * A place for one stream, or a 503 ServingError (ERR_TOO_MANY_STREAMS) when all are
   * taken. The returned release is idempotent: call it when the stream ends, however it ends.
   */
  admit(route: string): () => void {
    if (this.active >= this.limit) {
      this.metrics?.refused.inc({ route });
      throw new ServingError(
        "ERR_TOO_MANY_STREAMS",
        `too many active streams (${this.limit}): retry later`,
      );
    }
    this.active += 1;
    this.metrics?.active.set(this.active);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.active -= 1;
      this.metrics?.active.set(this.active);
    };
  }
}
