/**
 * Any TextGenerationEngine seen through the rich form (CompletionEngine), the one contract
 * the HTTP layer generates through. An engine that has the rich form (TorchEngine) is used as
 * it is. One with only the spec's generateBatch/generateStream gets it built here, once, at
 * the edge: the n choices of a request are n spec requests (seed + i) in the batch's single
 * generateBatch call, stop sequences are applied to its text, and there are no
 * log-probabilities and no usage (its token counts are unknown, and a made-up count would be
 * worse than none).
 */
import { ServingError } from "../errors.js";
import type { CompletionEngine, CompletionRequest, GenerateRequest, GenerationConstraint, TextGenerationEngine } from "../types.js";
import { StopMatcher } from "./stopMatcher.js";

export interface ServedEngine extends CompletionEngine {
  /** False when token counts are unknown: responses then carry no usage. */
  readonly countsTokens: boolean;
  /** Prompts given as token ids must be below it; undefined: such prompts are refused. */
  readonly vocabularySize: number | undefined;
  /** Compiles a constraint ahead of generation (400 when it cannot be); absent: constraints are refused. */
  readonly prepareConstraint?: (constraint: GenerationConstraint) => Promise<void>;
}

export function completionEngineOf(engine: TextGenerationEngine): ServedEngine {
  if (engine.complete && engine.completeStream) {
    return {
      countsTokens: true,
      vocabularySize: engine.vocabularySize,
      complete: (requests) => engine.complete!(requests),
      completeStream: (request, signal) => engine.completeStream!(request, signal),
      ...(engine.prepareConstraint ? { prepareConstraint: (constraint: GenerationConstraint) => engine.prepareConstraint!(constraint) } : {}),
    };
  }
  return {
    countsTokens: false,
    vocabularySize: undefined,
    async complete(requests) {
      const expanded: GenerateRequest[] = requests.flatMap((request) => samples(request));
      const texts = await engine.generateBatch(expanded);
      if (!Array.isArray(texts) || texts.length !== expanded.length) {
        const got = Array.isArray(texts) ? `${texts.length} texts` : typeof texts;
        throw new ServingError("ERR_INTERNAL", `generateBatch returned ${got} for ${expanded.length} requests`);
      }
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
      const stops = request.stop ?? [];
      const matcher = new StopMatcher(stops);
      for await (const piece of engine.generateStream(request, signal)) {
        const text = matcher.push(piece);
        // With nothing to match, each piece passes as it came (an empty one too).
        if (text || stops.length === 0) yield { index: 0, text };
        if (matcher.stopped) break;
      }
      yield { index: 0, text: matcher.flush(), finishReason: matcher.stopped ? "stop" : "length" };
    },
  };
}

/** A request's n samples as spec requests: sample i draws with seed + i. */
function samples(request: CompletionRequest): GenerateRequest[] {
  return Array.from({ length: request.n ?? 1 }, (_unused, i) => {
    const sample: GenerateRequest = { ...request };
    if (request.seed !== undefined) sample.seed = request.seed + i;
    return sample;
  });
}
