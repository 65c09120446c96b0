/** Counts work in progress so that stop() can wait for it. */
export class InFlight {
  #count = 0;
  #waiters: (() => void)[] = [];

  get count(): number {
    return this.#count;
  }

  /** Marks one unit of work begun; call the returned function exactly once when it ends. */
  enter(): () => void {
    this.#count += 1;
    let left = false;
    return () => {
      if (left) return;
      left = true;
      this.#count -= 1;
      if (this.#count === 0) for (const wake of this.#waiters.splice(0)) wake();
    };
  }

  /** Resolves when nothing is in progress. */
  idle(): Promise<void> {
    if (this.#count === 0) return Promise.resolve();
    return new Promise((resolve) => this.#waiters.push(resolve));
  }
}
