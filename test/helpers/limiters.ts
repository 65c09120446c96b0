/** A hand-written rate limiter that records who asked and answers as told. */
import type { RateLimiter } from "../../src/types.js";

export class RecordingLimiter implements RateLimiter {
  readonly keys: string[] = [];
  decide: (key: string) => boolean | Promise<boolean>;
  retryAfterSeconds?: (key: string) => number;

  constructor(decide: (key: string) => boolean | Promise<boolean> = () => true) {
    this.decide = decide;
  }

  allow(key: string): boolean | Promise<boolean> {
    this.keys.push(key);
    return this.decide(key);
  }
}
