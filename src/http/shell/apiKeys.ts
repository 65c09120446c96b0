/**
 * API keys (API_KEYS / API_KEYS_FILE): when configured, every route but /health, /metrics
 * and /ready needs `Authorization: Bearer <key>` or `X-API-Key: <key>`, else 401 (OpenAI's
 * error shape on /v1, the project's elsewhere). Keys are compared as SHA-256 digests with
 * timingSafeEqual against every configured key, so neither the match nor its position leaks
 * through timing. A request that passes is rate limited by a digest of its key, never the key
 * itself, so keys reach no log, metric label or Redis key.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import type { Request, RequestHandler, Response } from "express";
import { ServingError } from "../../errors.js";
import { sendError } from "./errorResponse.js";

const CLIENT_ID = "clientId";

const digest = (key: string): Buffer => createHash("sha256").update(key, "utf8").digest();

/** The key a request presents: a Bearer token, else X-API-Key. */
export function presentedKey(req: Request): string | undefined {
  const authorization = req.get("authorization");
  const bearer = authorization?.match(/^Bearer\s+(.+)$/i)?.[1]?.trim();
  if (bearer) return bearer;
  const header = req.get("x-api-key");
  return header ? header : undefined;
}

/** The rate-limit key of an authenticated request ("key:" and a digest prefix), if any. */
export function authenticatedClient(res: Response): string | undefined {
  const id: unknown = res.locals[CLIENT_ID];
  return typeof id === "string" ? id : undefined;
}

export function apiKeyAuth(keys: readonly string[]): RequestHandler {
  const digests = keys.map(digest);
  return (req, res, next) => {
    const key = presentedKey(req);
    if (key !== undefined) {
      const presented = digest(key);
      let match = false;
      for (const known of digests) match = timingSafeEqual(presented, known) || match;
      if (match) {
        res.locals[CLIENT_ID] = `key:${presented.toString("hex").slice(0, 32)}`;
        next();
        return;
      }
    }
    res.setHeader("WWW-Authenticate", 'Bearer realm="torchserve-node"');
    const message =
      key === undefined
        ? "An API key is required: send Authorization: Bearer <key> or X-API-Key: <key>"
        : "Incorrect API key provided";
    sendError(res, new ServingError("ERR_UNAUTHORIZED", message));
  };
}

/** API_KEYS (comma-separated) and API_KEYS_FILE (one key per line, # comments) together. */
export function parseApiKeys(list: string | undefined, fileText: string | undefined): string[] {
  const keys = [
    ...(list ?? "").split(","),
    ...(fileText ?? "").split(/\r?\n/).filter((line) => !line.trim().startsWith("#")),
  ].map((key) => key.trim());
  return [...new Set(keys.filter((key) => key !== ""))];
}
