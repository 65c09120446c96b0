/** Both apps on loopback over the real engines: the tiny test checkpoint and the demo recommender. */
import type { AddressInfo } from "node:net";
import { createServer, type Server } from "node:http";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { TorchEngine } from "../../src/engine/TorchEngine.js";
import { createApp } from "../../src/http/text/createApp.js";
import { createRecsysApp } from "../../src/http/recsys/createRecsysApp.js";
import { TorchRecommender } from "../../src/recsys/TorchRecommender.js";
import { routesOf } from "../../src/http/shell/appShell.js";
import type { ServingApp } from "../../src/types.js";
import { fuzzRoutes, type FuzzTarget } from "./cases.js";

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

export interface Target extends FuzzTarget {
  readonly app: ServingApp;
  readonly server: Server;
}

export interface Targets {
  readonly text: Target;
  readonly recsys: Target;
  readonly engine: TorchEngine;
  close(): Promise<void>;
}

async function listen(app: ServingApp): Promise<Target> {
  // As the server entry makes it (src/server/start.ts), with shorter timeouts: a request that
  // never completes is answered 408 within seconds.
  const server = createServer({ headersTimeout: 2000, requestTimeout: 2000, connectionsCheckingInterval: 250 }, app);
  server.listen(0, "127.0.0.1");
  await new Promise<void>((done, fail) => {
    server.once("listening", done);
    server.once("error", fail);
  });
  return { app, server, port: (server.address() as AddressInfo).port, routes: fuzzRoutes(routesOf(app)) };
}

export async function startTargets(): Promise<Targets> {
  const engine = await TorchEngine.load(join(repoRoot, "test", "fixtures", "tiny-gpt.pt"), { threads: 1 });
  const recommender = await TorchRecommender.load(join(repoRoot, "models", "recsys-demo.pt"), { latencyBudgetMs: 10_000 });
  const textApp = createApp(engine, { maxWaitMs: 1 });
  const recsysApp = createRecsysApp(recommender);
  await Promise.all([textApp.start(), recsysApp.start()]);
  const text = await listen(textApp);
  const recsys = await listen(recsysApp);
  return {
    text,
    recsys,
    engine,
    async close() {
      for (const target of [text, recsys]) {
        target.server.closeAllConnections();
        await new Promise<void>((done) => target.server.close(() => done()));
      }
      await Promise.all([textApp.stop(), recsysApp.stop()]);
      await Promise.all([engine.dispose(), recommender.dispose()]);
    },
  };
}
