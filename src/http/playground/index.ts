/**
 * The playground pages: `GET /` on each app serves one static HTML page, and its scripts and
 * stylesheet live under `/playground/`. Plain files (no framework, no build step, nothing
 * from a CDN) read once from `assets/` and served from memory. They are ordinary routes of
 * the shell, so rate limiting applies to them like to any route but /health and /metrics.
 */
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { RequestHandler } from "express";
import type { AppShell } from "../shell/appShell.js";

export type PlaygroundPage = "text" | "recsys";

interface Asset {
  readonly path: string;
  readonly file: string;
}

/** What each page loads; the page's own script is always /playground/<page>.js. */
const PAGES: Record<PlaygroundPage, readonly Asset[]> = {
  text: [
    { path: "/", file: "text.html" },
    { path: "/playground/text.js", file: "text.js" },
    { path: "/playground/chat.js", file: "chat.js" },
    { path: "/playground/shared.js", file: "shared.js" },
    { path: "/playground/style.css", file: "style.css" },
  ],
  recsys: [
    { path: "/", file: "recsys.html" },
    { path: "/playground/recsys.js", file: "recsys.js" },
    { path: "/playground/shared.js", file: "shared.js" },
    { path: "/playground/style.css", file: "style.css" },
  ],
};

const CONTENT_TYPES: Record<string, string> = {
  html: "text/html; charset=utf-8",
  js: "text/javascript; charset=utf-8",
  css: "text/css; charset=utf-8",
};

/** Everything comes from this origin; `data:` only for the empty favicon that spares a 404. */
const PAGE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "connect-src 'self'",
  "img-src 'self' data:",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join("; ");

/**
 * The assets sit beside this module when it runs from source; tsc does not copy them, so the
 * compiled module (dist/src/http/playground/) reads them from the source tree it was built from.
 */
function assetsDir(): string {
  const candidates = [new URL("./assets/", import.meta.url), new URL("../../../../src/http/playground/assets/", import.meta.url)];
  const found = candidates.map((url) => fileURLToPath(url)).find((dir) => existsSync(dir));
  if (!found) throw new Error(`playground assets not found; looked in ${candidates.map((url) => fileURLToPath(url)).join(", ")}`);
  return found;
}

interface Loaded {
  readonly body: Buffer;
  readonly contentType: string;
  readonly etag: string;
}

let cache: Map<string, Loaded> | undefined;

function load(file: string): Loaded {
  cache ??= new Map();
  let loaded = cache.get(file);
  if (!loaded) {
    const body = readFileSync(`${assetsDir()}/${file}`);
    const extension = file.slice(file.lastIndexOf(".") + 1);
    const digest = createHash("sha256").update(body).digest("base64url").slice(0, 27);
    loaded = { body, contentType: CONTENT_TYPES[extension] ?? "application/octet-stream", etag: `"${digest}"` };
    cache.set(file, loaded);
  }
  return loaded;
}

function serveAsset(asset: Loaded, isPage: boolean): RequestHandler {
  return (_req, res) => {
    res.setHeader("Content-Type", asset.contentType);
    // Revalidate every time (a deploy changes the files); the ETag makes that a cheap 304.
    res.setHeader("Cache-Control", "no-cache");
    res.setHeader("ETag", asset.etag);
    res.setHeader("X-Content-Type-Options", "nosniff");
    if (isPage) res.setHeader("Content-Security-Policy", PAGE_CSP);
    res.send(asset.body); // answers 304 itself when If-None-Match matches the ETag
  };
}

/** Registers `GET /` and the page's assets on the shell (guarded like any route, not documented). */
export function mountPlayground(shell: AppShell, page: PlaygroundPage): void {
  shell.register(
    PAGES[page].map(({ path, file }) => ({ method: "get" as const, path, handlers: [serveAsset(load(file), path === "/")] })),
  );
}
