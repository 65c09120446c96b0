/**
 * Latency budgets of requests waiting for the model: one timer for all of them, not one each.
 * The budget is the same for every request, so arrival order is deadline order and a FIFO
 * suffices. A request is settled once: by its answer or by its deadline, whichever comes first.
 */
import { performance } from "node:perf_hooks";
import { DEADLINE_SLOP_MS } from "../batching/Batcher.js";

/** A request under its budget. */
export interface Deadline {
  /** Claims the request for its answer: false when its deadline got there first. */
  settle(): boolean;
}

interface Entry {
  /** performance.now() past which it expires. */
  readonly deadline: number;
  /** Settled (answered or expired): the first of these wins. */
  done: boolean;
  readonly expire: () => void;
}

export class Deadlines {
  #entries: (Entry | undefined)[] = [];
  #head = 0;
  #timer: NodeJS.Timeout | null = null;

  constructor(private readonly budgetMs: number) {}

  /** Calls `expire` `budgetMs` from now unless the request is settled first. */
  add(expire: () => void): Deadline {
    const entry: Entry = { deadline: performance.now() + this.budgetMs, done: false, expire };
    this.#entries.push(entry);
    if (this.#timer === null) this.#arm(this.budgetMs);
    return {
      settle: () => {
        if (entry.done) return false;
        entry.done = true;
        return true;
      },
    };
  }

  /** Forgets every request and stops the timer (every request has its answer). */
  clear(): void {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    this.#entries = [];
    this.#head = 0;
  }

  #arm(delayMs: number): void {
    this.#timer = setTimeout(() => this.#expireOverdue(), Math.max(0, delayMs));
  }

  /** Expires every request past its deadline. */
  #expireOverdue(): void {
    this.#timer = null;
    const now = performance.now();
    const entries = this.#entries;
    let head = this.#head;
    for (; head < entries.length; head++) {
      const entry = entries[head]!;
      if (!entry.done) {
        if (entry.deadline > now + DEADLINE_SLOP_MS) break;
        entry.done = true;
        entry.expire();
      }
      entries[head] = undefined;
    }
    if (head === entries.length) {
      this.#entries = [];
      this.#head = 0;
      return;
    }
    if (head > 1024 && head * 2 > entries.length) {
      this.#entries = entries.slice(head);
      head = 0;
    }
    this.#head = head;
    this.#arm(this.#entries[head]!.deadline - now);
  }
}
