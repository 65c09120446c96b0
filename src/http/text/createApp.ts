/**
 * The text-generation app: the spec's POST /generate (batched) and POST /generate/stream, the
 * OpenAI-compatible /v1 routes, the playground at GET /, and the shell. Every route that
 * generates is a wire adapter over one pipeline (generation.ts): one batcher and one stream
 * loop over the engine's rich form, which a plain engine is given once, here.
 */
import { Batcher } from "../../batching/Batcher.js";
import { completionEngineOf } from "../../engine/completionEngine.js";
import type { Completion, CompletionRequest, CreateAppOptions, ServingApp, TextGenerationEngine } from "../../types.js";
import { DEFAULT_MAX_ACTIVE_STREAMS, StreamAdmission } from "./admission.js";
import { createAppShell } from "../shell/appShell.js";
import { generateRoutes } from "./generateRoutes.js";
import type { Generation } from "./generation.js";
import { InFlight } from "../shell/inFlight.js";
import type { LoggerLike } from "../shell/logger.js";
import { createGenerateMetrics } from "./metrics.js";
import { mountPlayground } from "../playground/index.js";
import { openAiRoutes, type OpenAiDeps } from "./openai/routes.js";
import type { Stored } from "./responses/objects.js";
import { responsesRoutes } from "./responses/routes.js";
import { DEFAULT_RESPONSE_STORE, ResponseStore } from "./responses/store.js";

export interface GenerateAppOptions extends CreateAppOptions {
  /** pino-compatible; silent by default. */
  logger?: LoggerLike;
}

export function createApp(engine: TextGenerationEngine, options: GenerateAppOptions = {}): ServingApp {
  const { maxBatchSize = 8, maxWaitMs = 5, maxQueueSize = 1024, rateLimiter = null, logger, apiKeys = null } = options;
  const shell = createAppShell({ rateLimiter, logger, apiKeys });
  const metrics = createGenerateMetrics(shell.registry, engine, maxBatchSize);
  const served = completionEngineOf(engine);
  const batcher = new Batcher<CompletionRequest, Completion>((requests) => served.complete(requests), { maxBatchSize, maxWaitMs, maxQueueSize }, {
    onBatch: (size) => metrics.batchSize.observe(size),
    onDequeue: (seconds) => metrics.queueWait.observe(seconds),
    onDepth: (depth) => metrics.queueDepth.set(depth),
  });
  const streams = new InFlight();
  let serving = false;
  const generation: Generation = {
    engine: served,
    batcher,
    metrics,
    streams,
    admission: new StreamAdmission(
      options.maxActiveStreams ?? engine.capacity?.().maxActiveRows ?? DEFAULT_MAX_ACTIVE_STREAMS,
      { refused: metrics.streamsRefused, active: metrics.activeStreams },
    ),
    logger: shell.logger,
    isServing: () => serving,
  };

  shell.register(generateRoutes(generation));
  const openAi: OpenAiDeps = {
    generation,
    modelName: options.modelName ?? "model",
    chatTemplate: engine.chatTemplate?.(),
    createdAt: Math.floor(Date.now() / 1000),
  };
  shell.register(openAiRoutes(openAi));
  shell.register(responsesRoutes({ ...openAi, store: new ResponseStore<Stored>(options.responseStore ?? DEFAULT_RESPONSE_STORE) }));
  mountPlayground(shell, "text");

  return shell.finish("Text generation", {
    async start() {
      batcher.start();
      serving = true;
    },
    async stop() {
      serving = false;
      await Promise.all([batcher.stop(), streams.idle()]);
    },
  });
}
