/** A promise with its settle functions outside: tests release work exactly when they choose. */
export interface Deferred<T> {
  readonly promise: Promise<T>;
  resolve(value: T): void;
  reject(err: unknown): void;
}

export function deferred<T = void>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (err: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** Hands out items in arrival order to whoever asks, waiting for the next when none is there. */
export class Arrivals<T> {
  readonly all: T[] = [];
  #taken = 0;
  #waiters: ((value: T) => void)[] = [];

  push(value: T): void {
    this.all.push(value);
    const waiter = this.#waiters.shift();
    if (waiter) {
      this.#taken += 1;
      waiter(value);
    }
  }

  /** The next item not yet handed out. */
  next(): Promise<T> {
    if (this.#taken < this.all.length) return Promise.resolve(this.all[this.#taken++]!);
    return new Promise((resolve) => this.#waiters.push(resolve));
  }
}

/** Resolves when the signal aborts. */
export function aborted(signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
}
