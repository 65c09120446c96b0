/**
 * Dynamic batcher, layer-neutral: coalesces single calls into batched calls of `run`.
 *
 * Rule (Triton / TorchServe semantics): a batch closes when it holds `maxBatchSize` items or
 * `maxWaitMs` after its first item arrived, whichever comes first. One batch runs at a time;
 * while it runs the next one keeps filling. When the run finishes, the next batch goes at
 * once if it is full or its wait has already elapsed, otherwise at its deadline.
 */
import { performance } from "node:perf_hooks";
import { ServingError, asServingError } from "../errors.js";

export interface BatcherOptions {
  /** Most items in one call of `run` (>= 1). */
  maxBatchSize: number;
  /** Longest a batch waits for company after its first item arrived, ms (>= 0). */
  maxWaitMs: number;
  /** Most items waiting (not counting the batch in flight); default Infinity. */
  maxQueueSize?: number;
}

/** Observation points, for metrics. Exceptions thrown by hooks are swallowed. */
export interface BatcherHooks {
  /** Once per batch, when it is handed to `run`. */
  onBatch?(size: number): void;
  /** Once per item, when its batch is handed to `run`: seconds it spent queued. */
  onDequeue?(waitSeconds: number): void;
  /** Whenever the number of waiting items changes. */
  onDepth?(depth: number): void;
}

interface Pending<I, O> {
  readonly item: I;
  readonly enqueuedAt: number;
  readonly resolve: (value: O) => void;
  readonly reject: (err: ServingError) => void;
  detach(): void;
}

type State = "idle" | "serving" | "stopping";

/** Timers may fire up to a millisecond early against performance.now(); accept that slop. */
export const DEADLINE_SLOP_MS = 1;

export class Batcher<I, O> {
  readonly #run: (items: I[]) => Promise<O[]>;
  readonly #maxBatchSize: number;
  readonly #maxWaitMs: number;
  readonly #maxQueueSize: number;
  readonly #hooks: BatcherHooks;

  #state: State = "idle";
  #queue: Pending<I, O>[] = [];
  #inFlight: Promise<void> | null = null;
  #timer: NodeJS.Timeout | null = null;
  #drained: Promise<void> | null = null;
  #onDrained: (() => void) | null = null;

  constructor(run: (items: I[]) => Promise<O[]>, options: BatcherOptions, hooks: BatcherHooks = {}) {
    const { maxBatchSize, maxWaitMs, maxQueueSize = Infinity } = options;
    if (!Number.isInteger(maxBatchSize) || maxBatchSize < 1) {
      throw new ServingError("ERR_INVALID_ARGUMENT", `maxBatchSize must be an integer >= 1, got ${maxBatchSize}`);
    }
    if (!Number.isFinite(maxWaitMs) || maxWaitMs < 0) {
      throw new ServingError("ERR_INVALID_ARGUMENT", `maxWaitMs must be a finite number >= 0, got ${maxWaitMs}`);
    }
    if (!(maxQueueSize >= 1)) {
      throw new ServingError("ERR_INVALID_ARGUMENT", `maxQueueSize must be >= 1, got ${maxQueueSize}`);
    }
    this.#run = run;
    this.#maxBatchSize = maxBatchSize;
    this.#maxWaitMs = maxWaitMs;
    this.#maxQueueSize = maxQueueSize;
    this.#hooks = hooks;
  }

  /** Items waiting for a batch (the batch in flight is not counted). */
  get queueDepth(): number {
    return this.#queue.length;
  }

  /** True between start() and stop(): submit() admits work. */
  get serving(): boolean {
    return this.#state === "serving";
  }

  start(): void {
    if (this.#state === "stopping") {
      throw new ServingError("ERR_NOT_SERVING", "batcher is stopping; await stop() before starting again");
    }
    this.#state = "serving";
  }

  /** Stops admitting, flushes queued work at once, resolves when queued and in-flight work is done. */
  stop(): Promise<void> {
    if (this.#drained) return this.#drained;
    if (this.#state === "idle" && this.#inFlight === null && this.#queue.length === 0) return Promise.resolve();
    this.#state = "stopping";
    this.#drained = new Promise<void>((resolve) => {
      this.#onDrained = resolve;
    });
    this.#pump();
    return this.#drained;
  }

  submit(item: I, signal?: AbortSignal): Promise<O> {
    if (this.#state !== "serving") {
      return Promise.reject(new ServingError("ERR_NOT_SERVING", "not serving: the batcher is not started or is stopping"));
    }
    if (signal?.aborted) {
      return Promise.reject(new ServingError("ERR_CANCELLED", "cancelled before it was queued"));
    }
    if (this.#queue.length >= this.#maxQueueSize) {
      return Promise.reject(new ServingError("ERR_QUEUE_FULL", `queue full (${this.#maxQueueSize} waiting)`));
    }
    return new Promise<O>((resolve, reject) => {
      const onAbort = (): void => this.#cancel(pending);
      const pending: Pending<I, O> = {
        item,
        enqueuedAt: performance.now(),
        resolve,
        reject,
        detach: () => signal?.removeEventListener("abort", onAbort),
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#queue.push(pending);
      this.#notify("onDepth", this.#queue.length);
      this.#pump();
    });
  }

  #cancel(pending: Pending<I, O>): void {
    const index = this.#queue.indexOf(pending);
    if (index < 0) return; // already dispatched: the batch owns it now
    this.#queue.splice(index, 1);
    this.#notify("onDepth", this.#queue.length);
    pending.reject(new ServingError("ERR_CANCELLED", "cancelled while queued"));
    // The head may have changed, and with it the deadline.
    this.#pump();
  }

  /** Dispatches the next batch if it is due, or arms the timer for its deadline. */
  #pump(): void {
    if (this.#inFlight !== null) {
      this.#clearTimer(); // re-pumped when the run settles
      return;
    }
    if (this.#queue.length === 0) {
      this.#clearTimer();
      if (this.#state === "stopping") this.#finishStop();
      return;
    }
    const waitLeft = this.#queue[0]!.enqueuedAt + this.#maxWaitMs - performance.now();
    const due = this.#state === "stopping" || this.#queue.length >= this.#maxBatchSize || waitLeft <= DEADLINE_SLOP_MS;
    if (due) {
      this.#clearTimer();
      this.#dispatch();
    } else if (this.#timer === null) {
      // An armed timer is kept: it was set for this head (a later head after a cancel only
      // means an early wake-up, which re-pumps).
      this.#timer = setTimeout(() => {
        this.#timer = null;
        this.#pump();
      }, waitLeft);
    }
  }

  #dispatch(): void {
    const batch = this.#queue.splice(0, this.#maxBatchSize);
    const now = performance.now();
    this.#notify("onDepth", this.#queue.length);
    this.#notify("onBatch", batch.length);
    for (const pending of batch) {
      pending.detach();
      this.#notify("onDequeue", (now - pending.enqueuedAt) / 1000);
    }
    const items = batch.map((pending) => pending.item);
    // A run that throws synchronously is treated like one that rejects.
    this.#inFlight = Promise.resolve()
      .then(() => this.#run(items))
      .then(
        (results) => settle(batch, results),
        (err: unknown) => failAll(batch, asServingError(err)),
      )
      .finally(() => {
        this.#inFlight = null;
        this.#pump();
      });
  }

  #finishStop(): void {
    this.#state = "idle";
    const resolve = this.#onDrained;
    this.#drained = null;
    this.#onDrained = null;
    resolve?.();
  }

  #clearTimer(): void {
    if (this.#timer !== null) {
      clearTimeout(this.#timer);
      this.#timer = null;
    }
  }

  #notify<K extends keyof BatcherHooks>(hook: K, value: number): void {
    try {
      this.#hooks[hook]?.(value);
    } catch {
      // Observers must not break batching.
    }
  }
}

function settle<I, O>(batch: Pending<I, O>[], results: unknown): void {
  if (!Array.isArray(results) || results.length !== batch.length) {
    const got = Array.isArray(results) ? `${results.length} results` : typeof results;
    failAll(batch, new ServingError("ERR_INTERNAL", `batch run returned ${got} for ${batch.length} items`));
    return;
  }
  batch.forEach((pending, i) => pending.resolve(results[i] as O));
}

function failAll<I, O>(batch: Pending<I, O>[], err: ServingError): void {
  for (const pending of batch) pending.reject(err);
}
