/**
 * The one generation pipeline of the text app, under every route that generates (/generate,
 * /generate/stream and the /v1 routes): whole requests go through the app's dynamic batcher
 * (one engine call per batch), streams through one server-sent-events loop (not batched).
 * Routes are wire adapters: they turn their body into CompletionRequests and format what
 * comes back (a StreamFormat for streams).
 */
import { performance } from "node:perf_hooks";
import type { Response } from "express";
import type { Batcher } from "../../batching/Batcher.js";
import type { ServedEngine } from "../../engine/completionEngine.js";
import { ServingError, asServingError } from "../../errors.js";
import type { Completion, CompletionChunk, CompletionRequest } from "../../types.js";
import type { StreamAdmission } from "./admission.js";
import { disconnectSignal } from "./disconnect.js";
import type { InFlight } from "../shell/inFlight.js";
import type { LoggerLike } from "../shell/logger.js";
import type { GenerateMetrics } from "./metrics.js";
import { arrivalOf, routeOf } from "../shell/requestContext.js";
import { DONE_EVENT, openEventStream, writeEvent } from "./sse.js";

export interface Generation {
  readonly engine: ServedEngine;
  readonly batcher: Batcher<CompletionRequest, Completion>;
  readonly metrics: GenerateMetrics;
  /** Streams in progress: stop() waits for them. */
  readonly streams: InFlight;
  /** The limit of concurrent streams, shared by every streaming route. */
  readonly admission: StreamAdmission;
  readonly logger: LoggerLike;
  isServing(): boolean;
}

/**
 * Every request through the batcher (a request's prompts usually share one batch); undefined
 * when the client left. A client that leaves while queued is dropped from the queue; once its
 * batch runs, the same signal lets the engine stop its rows.
 */
export async function completeAll(
  generation: Generation,
  res: Response,
  requests: readonly CompletionRequest[],
): Promise<Completion[] | undefined> {
  await prepareConstraints(generation, requests);
  const signal = disconnectSignal(res);
  try {
    const completions = await Promise.all(requests.map((request) => generation.batcher.submit({ ...request, signal }, signal)));
    return signal.aborted ? undefined : completions;
  } catch (err) {
    if (signal.aborted) return undefined; // nobody is listening
    throw err;
  }
}

/**
 * Compiles the requests' constraints (structured output, tool calls) before they join a batch
 * or open a stream: one that cannot be compiled is this request's 400, never a failed batch.
 */
export async function prepareConstraints(generation: Generation, requests: readonly CompletionRequest[]): Promise<void> {
  for (const request of requests) {
    if (!request.constraint) continue;
    const prepare = generation.engine.prepareConstraint;
    if (!prepare) throw new ServingError("ERR_INVALID_ARGUMENT", "structured output and tool_choice required are not supported by this engine");
    await prepare(request.constraint);
  }
}

/** How a route writes a stream: its events, from the engine's chunks. */
export interface StreamFormat {
  /** Events sent when the stream opens (chat: each choice's role). */
  opening(): string[];
  /** The event of one chunk; undefined when the chunk shows nothing on this route. */
  chunk(chunk: CompletionChunk): string | undefined;
  /** Events sent before [DONE], given the token counts (a usage chunk). */
  closing(tokens: { promptTokens: number; completionTokens: number; cachedPromptTokens?: number }): string[];
  /** The event that ends a stream failing after its first byte. */
  failure(err: ServingError): string;
  /** The last bytes of a stream that ends well; default the [DONE] event. */
  done?: string;
}

/**
 * Streams one request: not batched. The 200 is committed only when the first chunk (or the
 * end) arrives, so an engine that fails at once answers a proper error; a failure after that
 * ends the stream with the format's failure event and no [DONE]. A client that disconnects
 * aborts the engine's signal and the iterator is closed, even for an engine that ignores the
 * signal. Beyond the admission limit a new stream is refused with 503 and Retry-After before
 * any engine work. Time to first token and inter-token gaps are measured on the events
 * written.
 */
export async function streamCompletion(
  generation: Generation,
  res: Response,
  request: CompletionRequest,
  format: StreamFormat,
): Promise<void> {
  if (!generation.isServing()) throw new ServingError("ERR_NOT_SERVING", "not serving: the app is not started or is stopping");
  await prepareConstraints(generation, [request]);
  const release = generation.admission.admit(routeOf(res));
  const leave = generation.streams.enter();
  try {
    await stream(generation, res, request, format);
  } finally {
    leave();
    release();
  }
}

async function stream(generation: Generation, res: Response, request: CompletionRequest, format: StreamFormat): Promise<void> {
  const { engine, metrics, logger } = generation;
  const signal = disconnectSignal(res);
  const iterator = engine.completeStream({ ...request, signal }, signal)[Symbol.asyncIterator]();
  const cancelled = () => void metrics.streamCancelled.inc();
  let ended = false;
  try {
    // Errors up to here leave through Express's error handler: a JSON answer.
    let step = await nextStep(iterator, signal);
    if (step === ABORTED) return cancelled();
    openEventStream(res);
    try {
      for (const event of format.opening()) await writeEvent(res, event, signal);
      let last: number | undefined;
      let promptTokens = 0;
      let completionTokens = 0;
      let cachedPromptTokens: number | undefined;
      while (!step.done) {
        const chunk = step.value;
        if (chunk.promptTokens !== undefined) promptTokens = chunk.promptTokens;
        if (chunk.cachedPromptTokens !== undefined) cachedPromptTokens = chunk.cachedPromptTokens;
        completionTokens += chunk.completionTokens ?? 0;
        const event = format.chunk(chunk);
        if (event !== undefined) {
          const at = performance.now();
          if (last === undefined) metrics.timeToFirstToken.observe((at - arrivalOf(res)) / 1000);
          else metrics.interToken.observe((at - last) / 1000);
          last = at;
          await writeEvent(res, event, signal);
        }
        if (signal.aborted) return cancelled();
        step = await nextStep(iterator, signal);
        if (step === ABORTED) return cancelled();
      }
      const tokens = cachedPromptTokens === undefined ? { promptTokens, completionTokens } : { promptTokens, completionTokens, cachedPromptTokens };
      for (const event of format.closing(tokens)) await writeEvent(res, event, signal);
      ended = true;
      res.end(format.done ?? DONE_EVENT);
    } catch (err) {
      const serving = asServingError(err);
      logger.error({ err, code: serving.code }, "stream failed after its first piece");
      res.end(format.failure(serving));
    }
  } finally {
    if (!ended) closeIterator(iterator, logger);
  }
}

const ABORTED = Symbol("aborted");
type Step<T> = IteratorResult<T> | typeof ABORTED;

/** The next chunk, or ABORTED as soon as the client leaves (even if the engine ignores the signal). */
function nextStep<T>(iterator: AsyncIterator<T>, signal: AbortSignal): Promise<Step<T>> {
  const next = iterator.next();
  if (signal.aborted) {
    next.catch(() => {});
    return Promise.resolve(ABORTED);
  }
  return new Promise<Step<T>>((resolve, reject) => {
    const onAbort = (): void => resolve(ABORTED);
    signal.addEventListener("abort", onAbort, { once: true });
    next.then(
      (step) => {
        signal.removeEventListener("abort", onAbort);
        resolve(step);
      },
      (err: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(err);
      },
    );
  });
}

/** Lets the engine's generator run its cleanup; never waits for it. */
function closeIterator(iterator: AsyncIterator<unknown>, logger: LoggerLike): void {
  Promise.resolve()
    .then(() => iterator.return?.())
    .catch((err: unknown) => logger.warn({ err }, "closing a stream iterator failed"));
}
