/**
 * GET /v1/models, POST /v1/completions and POST /v1/chat/completions. Whole responses go
 * through the app's dynamic batcher for /v1 (one engine call per batch; n choices are n rows
 * sharing one prefill); streams take the stream path (not batched), as /generate/stream.
 */
import { performance } from "node:perf_hooks";
import type { RequestHandler, Response } from "express";
import type { Batcher } from "../../batching/Batcher.js";
import { ServingError, asServingError } from "../../errors.js";
import type { ChatTemplate, Completion, CompletionChunk, CompletionRequest } from "../../types.js";
import { disconnectSignal } from "../disconnect.js";
import type { InFlight } from "../inFlight.js";
import type { LoggerLike } from "../logger.js";
import type { GenerateMetrics } from "../metrics.js";
import { arrivalOf } from "../requestContext.js";
import { DONE_EVENT, dataEvent, openEventStream, writeEvent } from "../sse.js";
import type { Completer } from "./completer.js";
import { openAiError } from "./errors.js";
import { parseChat, parseCompletion } from "./requests.js";
import {
  chatChoice,
  chatChunkChoice,
  completionChoice,
  completionChunkChoice,
  newId,
  now,
  totalUsage,
  usageOf,
} from "./responses.js";

export interface OpenAiDeps {
  readonly completer: Completer;
  readonly batcher: Batcher<CompletionRequest, Completion>;
  readonly modelName: string;
  readonly chatTemplate: ChatTemplate | undefined;
  readonly metrics: GenerateMetrics;
  readonly streams: InFlight;
  readonly logger: LoggerLike;
  /** When the app was created: the model's `created`. */
  readonly createdAt: number;
  isServing(): boolean;
}

export function modelsHandler(deps: OpenAiDeps): RequestHandler {
  return (_req, res) => {
    res.json({
      object: "list",
      data: [{ id: deps.modelName, object: "model", created: deps.createdAt, owned_by: "torchserve-node" }],
    });
  };
}

export function completionsHandler(deps: OpenAiDeps): RequestHandler {
  return async (req, res) => {
    const parsed = parseCompletion(req.body);
    checkModel(deps, parsed.model);
    const id = newId("cmpl");
    const created = now();
    const head = { id, object: "text_completion", created, model: deps.modelName };
    if (parsed.stream) {
      const request = parsed.requests[0]!;
      const echo = parsed.echo ? request.prompt : "";
      await streamChunks(deps, res, request, parsed.includeUsage, {
        opening: () => (echo ? [{ ...head, choices: openingEcho(request.n ?? 1, echo) }] : []),
        chunk: (chunk) => ({ ...head, choices: [completionChunkChoice(chunk)] }),
        usage: (usage) => ({ ...head, choices: [], usage }),
      });
      return;
    }
    const completions = await submitAll(deps, res, parsed.requests);
    if (!completions) return;
    let index = 0;
    const choices = completions.flatMap((completion, p) =>
      completion.choices.map((choice) => completionChoice(choice, index++, parsed.echo ? parsed.requests[p]!.prompt : "")),
    );
    res.json({ ...head, choices, ...(deps.completer.countsTokens ? { usage: totalUsage(completions) } : {}) });
  };
}

export function chatCompletionsHandler(deps: OpenAiDeps): RequestHandler {
  return async (req, res) => {
    const parsed = parseChat(req.body, deps.chatTemplate);
    checkModel(deps, parsed.model);
    const id = newId("chatcmpl");
    const created = now();
    if (parsed.stream) {
      const head = { id, object: "chat.completion.chunk", created, model: deps.modelName, system_fingerprint: null };
      const n = parsed.request.n ?? 1;
      await streamChunks(deps, res, parsed.request, parsed.includeUsage, {
        // The role comes first, then content deltas (OpenAI's order).
        opening: () =>
          Array.from({ length: n }, (_unused, index) => ({
            ...head,
            choices: [{ index, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }],
          })),
        chunk: (chunk) => ({ ...head, choices: [chatChunkChoice(chunk)] }),
        usage: (usage) => ({ ...head, choices: [], usage }),
      });
      return;
    }
    const completions = await submitAll(deps, res, [parsed.request]);
    if (!completions) return;
    const completion = completions[0]!;
    res.json({
      id,
      object: "chat.completion",
      created,
      model: deps.modelName,
      system_fingerprint: null,
      choices: completion.choices.map((choice, index) => chatChoice(choice, index)),
      ...(deps.completer.countsTokens ? { usage: totalUsage(completions) } : {}),
    });
  };
}

function checkModel(deps: OpenAiDeps, model: string): void {
  if (model !== deps.modelName) {
    throw new ServingError("ERR_MODEL_NOT_FOUND", `The model \`${model}\` does not exist; this server serves \`${deps.modelName}\``);
  }
}

function openingEcho(n: number, prompt: string) {
  return Array.from({ length: n }, (_unused, index) => ({ index, text: prompt, logprobs: null, finish_reason: null }));
}

/** Every prompt through the batcher (they usually share one batch); undefined when the client left. */
async function submitAll(deps: OpenAiDeps, res: Response, requests: CompletionRequest[]): Promise<Completion[] | undefined> {
  const signal = disconnectSignal(res);
  try {
    const completions = await Promise.all(requests.map((request) => deps.batcher.submit({ ...request, signal }, signal)));
    return signal.aborted ? undefined : completions;
  } catch (err) {
    if (signal.aborted) return undefined;
    throw err;
  }
}

interface ChunkFormat {
  /** Events sent when the stream opens (chat: each choice's role). */
  opening(): object[];
  chunk(chunk: CompletionChunk): object;
  usage(usage: ReturnType<typeof usageOf>): object;
}

const ABORTED = Symbol("aborted");

/**
 * The SSE loop of the /v1 streams: the 200 is committed at the first chunk (an engine that
 * fails at once answers a proper error); a failure after that is a `data: {"error": ...}`
 * event (what the OpenAI clients raise as an APIError), then the stream ends.
 */
async function streamChunks(
  deps: OpenAiDeps,
  res: Response,
  request: CompletionRequest,
  includeUsage: boolean,
  format: ChunkFormat,
): Promise<void> {
  if (!deps.isServing()) throw new ServingError("ERR_NOT_SERVING", "not serving: the app is not started or is stopping");
  const leave = deps.streams.enter();
  const signal = disconnectSignal(res);
  const iterator = deps.completer.completeStream({ ...request, signal }, signal)[Symbol.asyncIterator]();
  const { metrics } = deps;
  let ended = false;
  const next = (): Promise<IteratorResult<CompletionChunk> | typeof ABORTED> =>
    signal.aborted
      ? Promise.resolve(ABORTED)
      : new Promise((resolve, reject) => {
          const onAbort = (): void => resolve(ABORTED);
          signal.addEventListener("abort", onAbort, { once: true });
          iterator.next().then(
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
  try {
    let step = await next();
    if (step === ABORTED) return void metrics.streamCancelled.inc();
    openEventStream(res);
    let last = performance.now();
    metrics.timeToFirstToken.observe((last - arrivalOf(res)) / 1000);
    let promptTokens = 0;
    let completionTokens = 0;
    try {
      for (const event of format.opening()) await writeEvent(res, dataEvent(event), signal);
      while (!step.done) {
        const chunk = step.value;
        if (chunk.promptTokens !== undefined) promptTokens = chunk.promptTokens;
        completionTokens += chunk.completionTokens ?? 0;
        if (chunk.text || chunk.finishReason || chunk.logprobs?.length) {
          await writeEvent(res, dataEvent(format.chunk(chunk)), signal);
        }
        if (signal.aborted) return void metrics.streamCancelled.inc();
        step = await next();
        if (step === ABORTED) return void metrics.streamCancelled.inc();
        const at = performance.now();
        metrics.interToken.observe((at - last) / 1000);
        last = at;
      }
      if (includeUsage && deps.completer.countsTokens) {
        await writeEvent(res, dataEvent(format.usage(usageOf(promptTokens, completionTokens))), signal);
      }
      ended = true;
      res.end(DONE_EVENT);
    } catch (err) {
      const serving = asServingError(err);
      deps.logger.error({ err, code: serving.code }, "stream failed after its first piece");
      res.end(dataEvent(openAiError(serving).body));
    }
  } finally {
    leave();
    if (!ended) {
      Promise.resolve()
        .then(() => iterator.return?.())
        .catch((err: unknown) => deps.logger.warn({ err }, "closing a stream iterator failed"));
    }
  }
}
