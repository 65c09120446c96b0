/** Hand-written engines the tests control, as any user could write them. */
import type { GenerateRequest, TextGenerationEngine } from "../../src/types.js";
import { Arrivals, deferred, type Deferred } from "./deferred.js";

/** What a test sees of the request an engine received (the signal is checked apart). */
export function plain(request: GenerateRequest): Omit<GenerateRequest, "signal"> {
  const { signal: _signal, ...rest } = request;
  return rest;
}

export const echo = (request: GenerateRequest): string => `echo:${request.prompt}`;

export interface BatchCall {
  readonly requests: readonly GenerateRequest[];
  readonly result: Deferred<string[]>;
  /** Answers each request with echo(request). */
  echo(): void;
}

/**
 * Records every generateBatch call. With `auto` it answers at once (echo); otherwise each
 * call waits until the test settles it, so the test decides when the engine is busy.
 */
export class BatchEngine implements TextGenerationEngine {
  readonly calls = new Arrivals<BatchCall>();
  readonly #auto: boolean;
  usageValue: { promptTokens: number; generatedTokens: number } | undefined;

  constructor(options: { auto?: boolean } = {}) {
    this.#auto = options.auto ?? false;
  }

  generateBatch(requests: readonly GenerateRequest[]): Promise<string[]> {
    const result = deferred<string[]>();
    const call: BatchCall = { requests: [...requests], result, echo: () => result.resolve(requests.map(echo)) };
    this.calls.push(call);
    if (this.#auto) call.echo();
    return result.promise;
  }

  generateStream(): AsyncIterable<string> {
    throw new Error("BatchEngine does not stream");
  }

  /** Sizes of the batches seen so far. */
  get batchSizes(): number[] {
    return this.calls.all.map((call) => call.requests.length);
  }
}

export interface StreamCall {
  readonly request: GenerateRequest;
  readonly signal: AbortSignal | undefined;
  /** Resolves when the engine's generator has finished, by its end or by return(). */
  readonly closed: Deferred<void>;
}

/** Streams whatever `script` yields for each call, recording calls and their cleanup. */
export class StreamEngine implements TextGenerationEngine {
  readonly calls = new Arrivals<StreamCall>();
  readonly #script: (call: StreamCall) => AsyncGenerator<string>;

  constructor(script: (call: StreamCall) => AsyncGenerator<string>) {
    this.#script = script;
  }

  generateBatch(requests: readonly GenerateRequest[]): Promise<string[]> {
    return Promise.resolve(requests.map(echo));
  }

  generateStream(request: GenerateRequest, signal?: AbortSignal): AsyncIterable<string> {
    const call: StreamCall = { request, signal, closed: deferred<void>() };
    this.calls.push(call);
    const script = this.#script;
    return (async function* () {
      try {
        yield* script(call);
      } finally {
        call.closed.resolve();
      }
    })();
  }
}
