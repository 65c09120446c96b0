/** The text-generation app: POST /generate (batched), POST /generate/stream, the playground at GET /, and the shell. */
import { Batcher } from "../batching/Batcher.js";
import type {
  Completion,
  CompletionRequest,
  CreateAppOptions,
  GenerateRequest,
  ServingApp,
  TextGenerationEngine,
} from "../types.js";
import { DEFAULT_MAX_ACTIVE_STREAMS, StreamAdmission } from "./admission.js";
import { createAppShell } from "./appShell.js";
import { jsonBody } from "./jsonBody.js";
import { InFlight } from "./inFlight.js";
import type { LoggerLike } from "./logger.js";
import { createGenerateMetrics } from "./metrics.js";
import { COMMON_ERRORS, TOO_LARGE, json, ref } from "./routes.js";
import { generateRequestSchema, generateResponseSchema, streamChunkSchema } from "./schemas.js";
import { mountPlayground } from "./playground/index.js";
import { generateHandler } from "./generateRoute.js";
import { streamHandler } from "./streamRoute.js";
import { completerFor } from "./openai/completer.js";
import { OPENAI_SCHEMAS, openAiRoutes, type OpenAiDeps } from "./openai/routes.js";

export interface GenerateAppOptions extends CreateAppOptions {
  /** pino-compatible; silent by default. */
  logger?: LoggerLike;
}

export function createApp(engine: TextGenerationEngine, options: GenerateAppOptions = {}): ServingApp {
  const { maxBatchSize = 8, maxWaitMs = 5, maxQueueSize = 1024, rateLimiter = null, logger, apiKeys = null } = options;
  const shell = createAppShell({ rateLimiter, logger, apiKeys });
  const metrics = createGenerateMetrics(shell.registry, engine, maxBatchSize);

  // Both batchers (/generate's and the /v1 routes') share the rule, the limits and the
  // metrics; the queue depth gauge counts both queues.
  const batching = { maxBatchSize, maxWaitMs, maxQueueSize };
  const hooks = (other: () => { readonly queueDepth: number }) => ({
    onBatch: (size: number) => metrics.batchSize.observe(size),
    onDequeue: (seconds: number) => metrics.queueWait.observe(seconds),
    onDepth: (depth: number) => metrics.queueDepth.set(depth + other().queueDepth),
  });
  const batcher: Batcher<GenerateRequest, string> = new Batcher<GenerateRequest, string>(
    (requests) => engine.generateBatch(requests),
    batching,
    hooks(() => completions),
  );
  const completer = completerFor(engine);
  const completions: Batcher<CompletionRequest, Completion> = new Batcher<CompletionRequest, Completion>(
    (requests) => completer.complete(requests),
    batching,
    hooks(() => batcher),
  );
  const streams = new InFlight();
  const admission = new StreamAdmission(
    options.maxActiveStreams ?? engine.capacity?.().maxActiveRows ?? DEFAULT_MAX_ACTIVE_STREAMS,
    { refused: metrics.streamsRefused, active: metrics.activeStreams },
  );
  let serving = false;

  const body = { required: true, content: json(ref("GenerateRequest")) };
  shell.register([
    {
      method: "post",
      path: "/generate",
      doc: {
        summary: "Continue a prompt. Requests are grouped into batches for the engine.",
        operationId: "generate",
        requestBody: body,
        responses: {
          "200": { description: "The continuation.", content: json(ref("GenerateResponse")) },
          ...TOO_LARGE,
          ...COMMON_ERRORS,
        },
      },
      handlers: [jsonBody(), generateHandler(batcher)],
    },
    {
      method: "post",
      path: "/generate/stream",
      doc: {
        summary: "Continue a prompt, piece by piece, as server-sent events. Not batched.",
        operationId: "generateStream",
        requestBody: body,
        responses: {
          "200": { description: `${streamChunkSchema.description}`, content: { "text/event-stream": { schema: { type: "string" } } } },
          ...TOO_LARGE,
          ...COMMON_ERRORS,
        },
      },
      handlers: [jsonBody(), streamHandler({ engine, metrics, streams, admission, logger: shell.logger, isServing: () => serving })],
    },
  ]);
  const openAi: OpenAiDeps = {
    completer,
    batcher: completions,
    modelName: options.modelName ?? "model",
    chatTemplate: engine.chatTemplate?.(),
    metrics,
    streams,
    admission,
    logger: shell.logger,
    createdAt: Math.floor(Date.now() / 1000),
    isServing: () => serving,
  };
  shell.register(openAiRoutes(openAi));
  mountPlayground(shell, "text");

  return shell.finish(
    {
      title: "Text generation",
      schemas: {
        GenerateRequest: generateRequestSchema,
        GenerateResponse: generateResponseSchema,
        StreamChunk: streamChunkSchema,
        ...OPENAI_SCHEMAS,
      },
    },
    {
    async start() {
      batcher.start();
      completions.start();
      serving = true;
    },
    async stop() {
      serving = false;
      await Promise.all([batcher.stop(), completions.stop(), streams.idle()]);
    },
    },
  );
}
