/**
 * Starts both applications from a ServerConfig: the text-generation app on `port` and the
 * recommendation app on `recsysPort`, sharing one rate limiter. Used by src/server.ts
 * (`npm start`) and by the end-to-end tests.
 */
import type { AddressInfo } from "node:net";
import { createServer, type Server } from "node:http";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { TorchEngine } from "../engine/TorchEngine.js";
import { createApp } from "../http/text/createApp.js";
import { createRecsysApp } from "../http/recsys/createRecsysApp.js";
import type { LoggerLike } from "../http/shell/logger.js";
import { RedisRateLimiter } from "../ratelimit/RedisRateLimiter.js";
import { TokenBucketRateLimiter } from "../ratelimit/TokenBucketRateLimiter.js";
import { TorchRecommender } from "../recsys/TorchRecommender.js";
import type { RateLimiter, ServingApp } from "../types.js";
import type { ServerConfig } from "./config.js";
import { engineOptions } from "./fromEnv.js";

const packageRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
export const DEMO_MODELS = {
  text: join(packageRoot, "models", "brown-gpt.pt"),
  recsys: join(packageRoot, "models", "recsys-demo.pt"),
};

export interface RunningApp {
  app: ServingApp;
  server: Server;
  /** http://host:port with the port actually bound. */
  url: string;
}

export interface RunningServer {
  text: RunningApp;
  recsys: RunningApp;
  /** Stops admitting, drains queued and in-flight work, releases the models. */
  close(): Promise<void>;
}

function limiterFrom(config: ServerConfig): (RateLimiter & { close?(): Promise<void> }) | null {
  if (config.rateLimitPerSecond === undefined) return null;
  const refillPerSecond = config.rateLimitPerSecond;
  const capacity = config.rateLimitBurst ?? Math.max(1, Math.ceil(refillPerSecond));
  return config.redisUrl
    ? new RedisRateLimiter(config.redisUrl, { capacity, refillPerSecond })
    : new TokenBucketRateLimiter({ capacity, refillPerSecond });
}

async function listen(app: ServingApp, config: ServerConfig, port: number): Promise<RunningApp> {
  const host = config.host;
  // Slow clients: a connection may not take longer than these to send its headers or its
  // whole request (a stream's response may last longer), nor stay idle between requests.
  // Node checks the first two every connectionsCheckingInterval (default 30 s, which would
  // let a trickling body live up to twice its timeout): check every second.
  const server = createServer(
    {
      headersTimeout: config.headersTimeoutMs,
      requestTimeout: config.requestTimeoutMs,
      keepAliveTimeout: config.keepAliveTimeoutMs,
      connectionsCheckingInterval: Math.min(1000, config.headersTimeoutMs),
    },
    app,
  );
  server.listen(port, host);
  await new Promise<void>((resolveListen, reject) => {
    server.once("listening", resolveListen);
    server.once("error", reject);
  });
  const { port: bound } = server.address() as AddressInfo;
  const shown = host === "0.0.0.0" || host === "::" ? "localhost" : host;
  return { app, server, url: `http://${shown}:${bound}` };
}

function closeServer(server: Server): Promise<void> {
  return new Promise((resolveClose) => {
    server.close(() => resolveClose());
    server.closeIdleConnections();
  });
}

export async function startServer(config: ServerConfig, logger: LoggerLike): Promise<RunningServer> {
  const textCkpt = config.engine.checkpoint ?? DEMO_MODELS.text;
  const recsysCkpt = config.recommender.checkpoint ?? DEMO_MODELS.recsys;
  if (!config.engine.checkpoint) logger.info({ checkpoint: textCkpt }, "SERVICE_CKPT not set: serving the demo language model");
  if (!config.recommender.checkpoint) logger.info({ checkpoint: recsysCkpt }, "RECSYS_CKPT not set: serving the demo recommender");

  const loads = await Promise.allSettled([
    TorchEngine.load(textCkpt, engineOptions(config.engine)),
    TorchRecommender.load(recsysCkpt, {
      device: config.recommender.device,
      latencyBudgetMs: config.recommender.latencyBudgetMs,
      logger,
    }),
  ] as const);
  if (loads[0].status === "rejected" || loads[1].status === "rejected") {
    await Promise.all(loads.map((load) => (load.status === "fulfilled" ? load.value.dispose() : undefined)));
    throw loads[0].status === "rejected" ? loads[0].reason : (loads[1] as PromiseRejectedResult).reason;
  }
  const engine = loads[0].value;
  const recommender = loads[1].value;
  logger.info(
    {
      checkpoint: textCkpt,
      device: engine.device,
      runtime: engine.runtime,
      kernels: engine.kernels,
      runtimeNote: engine.runtimeNote,
      contextLength: engine.config.contextLength,
      loadSeconds: engine.loadPhases,
    },
    `language model loaded (runtime ${engine.runtime}${engine.kernels ? `, ${engine.kernels} kernels` : ""})`,
  );

  const limiter = limiterFrom(config);
  // How many, never which: keys stay out of the log.
  if (config.apiKeys.length > 0) logger.info({ apiKeys: config.apiKeys.length }, "API keys required on every route but /health and /metrics");
  const textApp = createApp(engine, {
    maxBatchSize: config.maxBatchSize,
    maxWaitMs: config.maxWaitMs,
    maxQueueSize: config.maxQueueSize,
    maxActiveStreams: config.maxActiveStreams,
    responseStore: config.responseStore,
    rateLimiter: limiter,
    logger,
    apiKeys: config.apiKeys,
    modelName: config.modelName ?? engine.config.modelName ?? basename(textCkpt).replace(/\.pt$/, ""),
  });
  const recsysApp = createRecsysApp(recommender, { rateLimiter: limiter, logger, apiKeys: config.apiKeys });
  // Behind a load balancer the socket address is the balancer's: trust its X-Forwarded-For
  // when told to, so rate-limit keys are the real clients.
  textApp.set("trust proxy", config.trustProxy);
  recsysApp.set("trust proxy", config.trustProxy);
  // Ready only once both apps listen: a probe that reaches one app early must not send
  // traffic to a server whose other half is not up yet.
  let listening = false;
  textApp.readiness.setGate(() => listening);
  recsysApp.readiness.setGate(() => listening);
  await Promise.all([textApp.start(), recsysApp.start()]);
  const text = await listen(textApp, config, config.port);
  const recsys = await listen(recsysApp, config, config.recsysPort);
  listening = true;

  let closing: Promise<void> | undefined;
  const close = () =>
    (closing ??= (async () => {
      textApp.readiness.markDraining();
      recsysApp.readiness.markDraining();
      // Refuse new connections, let the apps finish what they admitted, then free the models.
      const servers = Promise.all([closeServer(text.server), closeServer(recsys.server)]);
      await Promise.all([textApp.stop(), recsysApp.stop()]);
      text.server.closeAllConnections();
      recsys.server.closeAllConnections();
      await servers;
      await Promise.all([engine.dispose(), recommender.dispose(), limiter?.close?.()]);
    })());
  return { text, recsys, close };
}
