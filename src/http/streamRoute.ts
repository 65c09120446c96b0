/**
 * POST /generate/stream: not batched. The 200 is committed only once the first piece (or
 * the end) arrives, so an engine that fails at once answers a proper 500 JSON; an error
 * after that is sent as `event: error` and ends the stream without [DONE]. A client that
 * disconnects aborts the engine's signal and the iterator is closed. Beyond the admission
 * limit a new stream is refused with 503 and Retry-After before any engine work.
 */
import { performance } from "node:perf_hooks";
import type { RequestHandler, Response } from "express";
import { ServingError, asServingError } from "../errors.js";
import type { GenerateRequest, TextGenerationEngine } from "../types.js";
import type { StreamAdmission } from "./admission.js";
import { disconnectSignal } from "./disconnect.js";
import { errorBody } from "./errorResponse.js";
import type { InFlight } from "./inFlight.js";
import type { LoggerLike } from "./logger.js";
import type { GenerateMetrics } from "./metrics.js";
import { arrivalOf, routeOf } from "./requestContext.js";
import { DONE_EVENT, dataEvent, errorEvent, openEventStream, writeEvent } from "./sse.js";
import { parseGenerateRequest } from "./validation.js";

export interface StreamDeps {
  readonly engine: TextGenerationEngine;
  readonly metrics: GenerateMetrics;
  readonly streams: InFlight;
  readonly admission: StreamAdmission;
  readonly logger: LoggerLike;
  isServing(): boolean;
}

export const ABORTED = Symbol("aborted");
type Step<T = string> = IteratorResult<T> | typeof ABORTED;

export function streamHandler(deps: StreamDeps): RequestHandler {
  return async (req, res) => {
    const request = parseGenerateRequest(req.body);
    if (!deps.isServing()) throw new ServingError("ERR_NOT_SERVING", "not serving: the app is not started or is stopping");
    const release = deps.admission.admit(routeOf(res));
    const leave = deps.streams.enter();
    try {
      await stream(deps, request, res);
    } finally {
      leave();
      release();
    }
  };
}

async function stream(deps: StreamDeps, request: GenerateRequest, res: Response): Promise<void> {
  const { engine, metrics, logger } = deps;
  const signal = disconnectSignal(res);
  request.signal = signal;
  const iterator = engine.generateStream(request, signal)[Symbol.asyncIterator]();
  let ended = false;
  try {
    // Errors up to here leave through Express's error handler: a JSON 500.
    let step = await nextStep(iterator, signal);
    if (step === ABORTED) return metrics.streamCancelled.inc();
    openEventStream(res);
    let last = performance.now();
    if (!step.done) metrics.timeToFirstToken.observe((last - arrivalOf(res)) / 1000);
    try {
      while (!step.done) {
        await writeEvent(res, dataEvent({ token: step.value }), signal);
        if (signal.aborted) return metrics.streamCancelled.inc();
        step = await nextStep(iterator, signal);
        if (step === ABORTED) return metrics.streamCancelled.inc();
        if (!step.done) {
          const now = performance.now();
          metrics.interToken.observe((now - last) / 1000);
          last = now;
        }
      }
      ended = true;
      res.end(DONE_EVENT);
    } catch (err) {
      const serving = asServingError(err);
      logger.error({ err, code: serving.code }, "stream failed after its first piece");
      res.end(errorEvent(errorBody(serving)));
    }
  } finally {
    if (!ended) closeIterator(iterator, logger);
  }
}

/** The next piece, or ABORTED as soon as the client leaves (even if the engine ignores the signal). */
export function nextStep<T>(iterator: AsyncIterator<T>, signal: AbortSignal): Promise<Step<T>> {
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
export function closeIterator(iterator: AsyncIterator<unknown>, logger: LoggerLike): void {
  Promise.resolve()
    .then(() => iterator.return?.())
    .catch((err: unknown) => logger.warn({ err }, "closing a stream iterator failed"));
}
