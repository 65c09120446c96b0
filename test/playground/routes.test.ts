/** GET / on both apps: the playground page and its assets, served like any rate-limited route. */
import { expect } from "chai";
import { createApp, createRecsysApp } from "../../src/http/index.js";
import type { RateLimiter, Recommender, ServingApp } from "../../src/types.js";
import { BatchEngine } from "../helpers/engines.js";
import { listen, type Running } from "../helpers/http.js";
import { RecordingLimiter } from "../helpers/limiters.js";
import { scrape, valueOf } from "../helpers/metrics.js";

const recommender: Recommender = { recommend: (_userId, k) => ({ items: Array.from({ length: k }, (_, i) => i + 1), fallback: false }) };

const TYPES: Record<string, string> = {
  js: "text/javascript; charset=utf-8",
  css: "text/css; charset=utf-8",
};

interface Target {
  name: string;
  make(limiter?: RateLimiter): ServingApp;
  /** Ids the page's script needs: the page is useless without them. */
  ids: string[];
  script: string;
}

const TARGETS: Target[] = [
  {
    name: "text-generation app",
    // Not started: the page is static and served whatever the lifespan.
    make: (limiter) => createApp(new BatchEngine({ auto: true }), { rateLimiter: limiter ?? null }),
    ids: ["generate-form", "prompt", "max-new-tokens", "temperature", "top-k", "seed", "generate", "stop", "status", "error", "output", "continuation", "stat-pieces", "stat-first", "stat-total"],
    script: "/playground/text.js",
  },
  {
    name: "recommendation app",
    make: (limiter) => createRecsysApp(recommender, { rateLimiter: limiter ?? null }),
    ids: ["recommend-form", "user-id", "k", "recommend", "status", "error", "result", "items", "stat-source", "stat-latency"],
    script: "/playground/recsys.js",
  },
];

/** Same-origin URLs a page or a module refers to: src/href attributes and static imports. */
function references(text: string, from: string): string[] {
  const found = [
    ...[...text.matchAll(/\s(?:src|href)="([^"]+)"/g)].map((m) => m[1]!),
    ...[...text.matchAll(/^import [^;]*? from "([^"]+)";/gm)].map((m) => m[1]!),
  ];
  return found
    .map((ref) => new URL(ref, `http://origin${from}`))
    .filter((url) => url.origin === "http://origin")
    .map((url) => url.pathname);
}

for (const target of TARGETS) {
  describe(`playground routes: ${target.name}`, function () {
    let running: Running | undefined;
    afterEach(async () => {
      await running?.close();
      running = undefined;
    });

    it("GET / is an HTML page with the form its script drives, a CSP and a Cache-Control", async () => {
      running = await listen(target.make());
      const response = await fetch(`${running.base}/`);
      expect(response.status).to.equal(200);
      expect(response.headers.get("content-type")).to.equal("text/html; charset=utf-8");
      expect(response.headers.get("cache-control")).to.equal("no-cache");
      expect(response.headers.get("x-content-type-options")).to.equal("nosniff");
      const csp = response.headers.get("content-security-policy") ?? "";
      expect(csp).to.include("script-src 'self'").and.to.include("connect-src 'self'");
      const html = await response.text();
      expect(html).to.match(/^<!doctype html>/i);
      for (const id of target.ids) expect(html, `element #${id}`).to.include(`id="${id}"`);
      // Every input has a label pointing at it.
      for (const [, id] of html.matchAll(/<(?:input|textarea)[^>]*\sid="([^"]+)"/g)) {
        expect(html, `label for #${id}`).to.include(`<label for="${id}">`);
      }
      // Nothing from elsewhere: the page works offline.
      expect(html).to.not.match(/(?:src|href)="(?:https?:)?\/\//);
    });

    it("serves every asset the page and its modules refer to, with its content type", async () => {
      running = await listen(target.make());
      const seen = new Set<string>();
      const queue = references(await (await fetch(`${running.base}/`)).text(), "/");
      expect(queue).to.include(target.script).and.to.include("/playground/style.css");
      while (queue.length > 0) {
        const path = queue.shift()!;
        if (seen.has(path) || path === "/openapi.json") continue;
        seen.add(path);
        const response = await fetch(running.base + path);
        expect(response.status, path).to.equal(200);
        const extension = path.slice(path.lastIndexOf(".") + 1);
        expect(response.headers.get("content-type"), path).to.equal(TYPES[extension]);
        expect(response.headers.get("cache-control"), path).to.equal("no-cache");
        const text = await response.text();
        expect(text.length, path).to.be.greaterThan(100);
        queue.push(...references(text, path));
      }
      expect([...seen]).to.include("/playground/shared.js");
      // The API description the page links to is there too.
      expect((await fetch(`${running.base}/openapi.json`)).status).to.equal(200);
    });

    it("answers a matching If-None-Match with 304 and no body", async () => {
      running = await listen(target.make());
      const first = await fetch(`${running.base}/`);
      const etag = first.headers.get("etag");
      expect(etag).to.match(/^"[\w-]+"$/);
      await first.arrayBuffer();
      // What a browser sends when it revalidates. (Node's fetch would add `Cache-Control:
      // no-cache` to a conditional request, which by HTTP rules must not be answered from cache.)
      const revalidate = { "cache-control": "max-age=0" };
      const again = await fetch(`${running.base}/`, { headers: { ...revalidate, "if-none-match": etag! } });
      expect(again.status).to.equal(304);
      expect(await again.text()).to.equal("");
      const changed = await fetch(`${running.base}/`, { headers: { ...revalidate, "if-none-match": '"other"' } });
      expect(changed.status).to.equal(200);
    });

    it("is rate limited like any route: a denied GET / is 429 with Retry-After, /health is not limited", async () => {
      const limiter = new RecordingLimiter(() => false);
      limiter.retryAfterSeconds = () => 3;
      running = await listen(target.make(limiter));
      for (const path of ["/", target.script, "/playground/style.css"]) {
        const response = await fetch(running.base + path, { headers: { "x-api-key": "visitor" } });
        expect(response.status, path).to.equal(429);
        expect(response.headers.get("retry-after"), path).to.equal("3");
        expect(await response.json(), path).to.deep.include({ code: "ERR_RATE_LIMITED" });
      }
      expect(limiter.keys).to.deep.equal(["visitor", "visitor", "visitor"]);
      expect((await fetch(`${running.base}/health`)).status).to.equal(200);
      expect(limiter.keys).to.have.length(3);
      // Labelled by its own route in the metrics, not lumped with unmatched requests.
      const metrics = await scrape(running.base);
      expect(valueOf(metrics, "rate_limited_total", { route: "/" })).to.equal(1);
      expect(valueOf(metrics, "http_requests_total", { route: "/", status: "429" })).to.equal(1);
    });

    it("serves only GET: POST / is a JSON 405 naming the allowed methods", async () => {
      running = await listen(target.make());
      const response = await fetch(`${running.base}/`, { method: "POST" });
      expect(response.status).to.equal(405);
      expect(response.headers.get("allow")).to.equal("GET, HEAD");
      expect(await response.json()).to.deep.include({ code: "ERR_METHOD_NOT_ALLOWED" });
    });
  });
}
