/**
 * The apps' OpenAPI 3.1 documents, for tools that want them without a server. They are the
 * documents the apps serve at /openapi.json: derived from the route descriptors each app
 * registers (shell/routes.ts), with the schemas validation compiles.
 */
import type { Express } from "express";
import type { RateLimiter } from "../types.js";
import { createApp } from "./text/createApp.js";
import { createRecsysApp } from "./recsys/createRecsysApp.js";

export interface OpenApiOptions {
  /** List 429 on rate-limited routes (when the app has a limiter). Default true. */
  rateLimited?: boolean;
  /** List 401 on guarded routes (when the app has API keys). Default false. */
  authenticated?: boolean;
}

const neverCalled = (): never => {
  throw new Error("a documentation-only app never serves");
};
const anyLimiter: RateLimiter = { allow: () => true };

function appOptions(options: OpenApiOptions) {
  return {
    rateLimiter: options.rateLimited === false ? null : anyLimiter,
    apiKeys: options.authenticated ? ["documentation-only"] : null,
  };
}

const documentOf = (app: Express): object => app.locals["openapi"] as object;

export function generateOpenApi(options: OpenApiOptions = {}): object {
  return documentOf(createApp({ generateBatch: neverCalled, generateStream: neverCalled }, appOptions(options)));
}

export function recsysOpenApi(options: OpenApiOptions = {}): object {
  return documentOf(createRecsysApp({ recommend: neverCalled }, appOptions(options)));
}
