/**
 * What the /v1 routes need from an engine: n choices with usage and finish reasons, batched
 * and streamed. TorchEngine provides it (complete, completeStream); any other engine gets it
 * built from the spec's generateBatch/generateStream, with stop sequences applied to the
 * text, no log-probabilities and no usage (its token counts are unknown).
 */
import { ServingError } from "../../errors.js";
import { StopMatcher } from "../../engine/stopMatcher.js";
import type { Completion, CompletionChunk, CompletionRequest, GenerateRequest, TextGenerationEngine } from "../../types.js";

export interface Completer {
  /** False when token counts are unknown: responses then carry no usage. */
  readonly countsTokens: boolean;
  /** Prompts given as token ids must be below it; undefined: such prompts are refused. */
  readonly vocabularySize: number | undefined;
  complete(requests: readonly CompletionRequest[]): Promise<Completion[]>;
  completeStream(request: CompletionRequest, signal: AbortSignal): AsyncIterable<CompletionChunk>;
}

export function completerFor(engine: TextGenerationEngine): Completer {
  if (engine.complete && engine.completeStream) {
    return {
      countsTokens: true,
      vocabularySize: engine.vocabularySize,
      complete: (requests) => engine.complete!(requests),
      completeStream: (request, signal) => engine.completeStream!(request, signal),
    };
  }
  return {
    countsTokens: false,
    vocabularySize: undefined,
    async complete(requests) {
      // n samples become n spec requests (seed + i), all in one generateBatch call.
      const expanded: GenerateRequest[] = requests.flatMap((request) => samples(request));
      const texts = await engine.generateBatch(expanded);
      let next = 0;
      return requests.map((request) => ({
        promptTokens: 0,
        choices: samples(request).map(() => {
          const matcher = new StopMatcher(request.stop ?? []);
          const text = matcher.push(texts[next++] ?? "") + matcher.flush();
          return { text, finishReason: matcher.stopped ? "stop" : "length", completionTokens: 0 };
        }),
      }));
    },
    async *completeStream(request, signal) {
      if ((request.n ?? 1) > 1) {
        throw new ServingError("ERR_INVALID_ARGUMENT", "this engine streams one choice per request (n = 1)");
      }
      const matcher = new StopMatcher(request.stop ?? []);
      for await (const piece of engine.generateStream(request, signal)) {
        const text = matcher.push(piece);
        if (text) yield { index: 0, text };
        if (matcher.stopped) break;
      }
      yield { index: 0, text: matcher.flush(), finishReason: matcher.stopped ? "stop" : "length" };
    },
  };
}

function samples(request: CompletionRequest): GenerateRequest[] {
  return Array.from({ length: request.n ?? 1 }, (_unused, i) => {
    const sample: GenerateRequest = { ...request };
    if (request.seed !== undefined) sample.seed = request.seed + i;
    return sample;
  });
}
