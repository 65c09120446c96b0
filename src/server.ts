#!/usr/bin/env node
/**
 * `npm start`: both applications with the models named by the environment (the demo models
 * when unset), structured JSON logs, graceful shutdown on SIGTERM/SIGINT.
 */
// First: libtorch loads on a worker thread while the modules below are evaluated.
import "./native/preloadAtStart.js";

import { pino } from "pino";

import { ServingError } from "./errors.js";
import { readServerConfig } from "./server/config.js";
import { startServer } from "./server/start.js";

async function main(): Promise<void> {
  let config;
  try {
    config = readServerConfig();
  } catch (err) {
    console.error(`torchserve-node: ${(err as Error).message}`);
    process.exit(2);
  }
  const logger = pino({ level: config.logLevel, base: { service: "torchserve-node" } });

  let running;
  try {
    running = await startServer(config, logger);
  } catch (err) {
    const code = err instanceof ServingError || (err as { code?: string }).code ? (err as { code: string }).code : undefined;
    logger.fatal({ code, err: code ? undefined : err }, `could not start: ${(err as Error).message}`);
    process.exit(1);
  }
  for (const [name, app] of Object.entries({ text: running.text, recsys: running.recsys })) {
    const port = Number(new URL(app.url).port);
    logger.info({ app: name, url: app.url, port }, `${name === "text" ? "text generation" : "recommendations"} serving on ${app.url} (playground: ${app.url}/, API: ${app.url}/openapi.json)`);
  }

  let stopping = false;
  const shutdown = (signal: string) => {
    if (stopping) {
      logger.warn({ signal }, "second signal: exiting without draining");
      process.exit(1);
    }
    stopping = true;
    logger.info({ signal }, "shutting down: draining queued and in-flight requests");
    const timer = setTimeout(() => {
      logger.error({ timeoutMs: config.shutdownTimeoutMs }, "drain timed out: exiting");
      process.exit(1);
    }, config.shutdownTimeoutMs);
    timer.unref();
    running.close().then(
      () => {
        logger.info("stopped");
        process.exit(0);
      },
      (err: unknown) => {
        logger.error({ err }, "error while stopping");
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", () => shutdown("SIGTERM"));
  process.on("SIGINT", () => shutdown("SIGINT"));
}

void main();
