/** The text-generation app: POST /generate (batched), POST /generate/stream, the playground at GET /, and the shell. */
import { Batcher } from "../batching/Batcher.js";
import type { CreateAppOptions, GenerateRequest, ServingApp, TextGenerationEngine } from "../types.js";
import { DEFAULT_MAX_ACTIVE_STREAMS, StreamAdmission } from "./admission.js";
import { createAppShell } from "./appShell.js";
import { jsonBody } from "./jsonBody.js";
import { InFlight } from "./inFlight.js";
import type { LoggerLike } from "./logger.js";
import { createGenerateMetrics } from "./metrics.js";
import { generateOpenApi } from "./openapi.js";
import { mountPlayground } from "./playground/index.js";
import { generateHandler } from "./generateRoute.js";
import { streamHandler } from "./streamRoute.js";

export interface GenerateAppOptions extends CreateAppOptions {
  /** pino-compatible; silent by default. */
  logger?: LoggerLike;
}

export function createApp(engine: TextGenerationEngine, options: GenerateAppOptions = {}): ServingApp {
  const { maxBatchSize = 8, maxWaitMs = 5, maxQueueSize = 1024, rateLimiter = null, logger } = options;
  const shell = createAppShell({ rateLimiter, logger });
  const metrics = createGenerateMetrics(shell.registry, engine, maxBatchSize);

  const batcher = new Batcher<GenerateRequest, string>(
    (requests) => engine.generateBatch(requests),
    { maxBatchSize, maxWaitMs, maxQueueSize },
    {
      onBatch: (size) => metrics.batchSize.observe(size),
      onDequeue: (seconds) => metrics.queueWait.observe(seconds),
      onDepth: (depth) => metrics.queueDepth.set(depth),
    },
  );
  const streams = new InFlight();
  const admission = new StreamAdmission(
    options.maxActiveStreams ?? engine.capacity?.().maxActiveRows ?? DEFAULT_MAX_ACTIVE_STREAMS,
    { refused: metrics.streamsRefused, active: metrics.activeStreams },
  );
  let serving = false;

  shell.route("post", "/generate", jsonBody(), generateHandler(batcher));
  shell.route(
    "post",
    "/generate/stream",
    jsonBody(),
    streamHandler({ engine, metrics, streams, admission, logger: shell.logger, isServing: () => serving }),
  );
  mountPlayground(shell, "text");

  return shell.finish(generateOpenApi({ rateLimited: rateLimiter !== null }), {
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
