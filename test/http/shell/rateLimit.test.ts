/** Spec §4, identical in both apps: first, keyed, never on /health or /metrics, 429 + Retry-After, fail open. */
import { expect } from "chai";
import type { AddressInfo } from "node:net";
import { createApp, createRecsysApp } from "../../../src/http/index.js";
import type { RateLimiter, Recommender, ServingApp } from "../../../src/types.js";
import { BatchEngine } from "../../helpers/engines.js";
import { postJson, serve, type Running } from "../../helpers/http.js";
import { RecordingLimiter } from "../../helpers/limiters.js";
import { scrape, valueOf } from "../../helpers/metrics.js";

const recommender: Recommender = { recommend: (_userId, k) => ({ items: Array.from({ length: k }, (_, i) => i), fallback: false }) };

interface Target {
  name: string;
  /** `log` receives "handler" each time the engine or recommender is called. */
  make(limiter: RateLimiter, log: string[]): { app: ServingApp; handled: () => number };
  /** A request to a limited route. */
  limited(base: string, init?: RequestInit): Promise<Response>;
  /** The same route with an invalid request. */
  invalid(base: string): Promise<Response>;
}

const TARGETS: Target[] = [
  {
    name: "text-generation app",
    make(limiter, log) {
      const engine = new BatchEngine({ auto: true });
      const generateBatch = engine.generateBatch.bind(engine);
      engine.generateBatch = (requests) => (log.push("handler"), generateBatch(requests));
      return { app: createApp(engine, { maxWaitMs: 1, rateLimiter: limiter }), handled: () => engine.calls.all.length };
    },
    limited: (base, init) => postJson(base, "/generate", { prompt: "hi" }, init),
    invalid: (base) => postJson(base, "/generate", "{not json"),
  },
  {
    name: "recommendation app",
    make(limiter, log) {
      let calls = 0;
      const counting: Recommender = { recommend: (u, k) => (calls++, log.push("handler"), recommender.recommend(u, k)) };
      return { app: createRecsysApp(counting, { rateLimiter: limiter }), handled: () => calls };
    },
    limited: (base, init) => fetch(`${base}/recommend/1`, init),
    invalid: (base) => fetch(`${base}/recommend/1?k=0`),
  },
];

for (const target of TARGETS) {
  describe(`rate limiting: ${target.name}`, function () {
    let running: Running | undefined;
    afterEach(async () => {
      await running?.close();
      running = undefined;
    });

    async function start(limiter: RateLimiter, log: string[] = []): Promise<() => number> {
      const { app, handled } = target.make(limiter, log);
      running = await serve(app);
      return handled;
    }

    it("calls allow() with the X-API-Key header before the handler", async () => {
      const order: string[] = [];
      const limiter = new RecordingLimiter((key) => (order.push(`allow:${key}`), true));
      const handled = await start(limiter, order);
      const response = await target.limited(running!.base, { headers: { "X-API-Key": "key-123" } });
      expect(response.status).to.equal(200);
      expect(limiter.keys).to.deep.equal(["key-123"]);
      expect(order).to.deep.equal(["allow:key-123", "handler"]);
      expect(handled()).to.equal(1);
    });

    it("keys on the client host when there is no X-API-Key (or it is empty)", async () => {
      const limiter = new RecordingLimiter();
      await start(limiter);
      await (await target.limited(running!.base)).text();
      await (await target.limited(running!.base, { headers: { "X-API-Key": "" } })).text();
      expect(limiter.keys).to.deep.equal(["127.0.0.1", "127.0.0.1"]);
    });

    it("keys an IPv4 client as its plain address on a dual-stack socket too", async () => {
      const limiter = new RecordingLimiter();
      const { app } = target.make(limiter, []);
      await app.start();
      const server = app.listen(0); // no host: "::" (dual stack) where IPv6 is available
      try {
        await new Promise<void>((resolve) => server.once("listening", () => resolve()));
        const { port } = server.address() as AddressInfo;
        await (await target.limited(`http://127.0.0.1:${port}`)).text();
        expect(limiter.keys).to.deep.equal(["127.0.0.1"]);
      } finally {
        server.closeAllConnections();
        await new Promise<void>((resolve) => server.close(() => resolve()));
        await app.stop();
      }
    });

    it("never consults the limiter for /health and /metrics", async () => {
      const limiter = new RecordingLimiter(() => false);
      await start(limiter);
      expect((await fetch(`${running!.base}/health`)).status).to.equal(200);
      expect((await fetch(`${running!.base}/metrics`)).status).to.equal(200);
      expect(limiter.keys).to.deep.equal([]);
    });

    it("denies with 429 JSON and Retry-After from retryAfterSeconds (rounded up), before the handler runs", async () => {
      const limiter = new RecordingLimiter(() => false);
      limiter.retryAfterSeconds = () => 2.2;
      const handled = await start(limiter);
      const response = await target.limited(running!.base);
      expect(response.status).to.equal(429);
      expect(response.headers.get("retry-after")).to.equal("3");
      expect(response.headers.get("content-type")).to.match(/^application\/json/);
      expect(await response.json()).to.deep.include({ code: "ERR_RATE_LIMITED" });
      expect(handled()).to.equal(0);
      const metrics = await scrape(running!.base);
      expect(valueOf(metrics, "rate_limited_total")).to.equal(1);
    });

    it("defaults Retry-After to 1 without retryAfterSeconds, and never sends less than 1", async () => {
      const limiter = new RecordingLimiter(() => false);
      await start(limiter);
      expect((await target.limited(running!.base)).headers.get("retry-after")).to.equal("1");
      limiter.retryAfterSeconds = () => 0;
      expect((await target.limited(running!.base)).headers.get("retry-after")).to.equal("1");
    });

    it("answers 429 rather than 422 to a denied client with an invalid request", async () => {
      const limiter = new RecordingLimiter(() => false);
      await start(limiter);
      const response = await target.invalid(running!.base);
      expect(response.status).to.equal(429);
    });

    it("limits unknown routes and /openapi.json too", async () => {
      const limiter = new RecordingLimiter(() => false);
      await start(limiter);
      expect((await fetch(`${running!.base}/nowhere`)).status).to.equal(429);
      expect((await fetch(`${running!.base}/openapi.json`)).status).to.equal(429);
      expect(limiter.keys).to.have.length(2);
    });

    it("awaits an async limiter", async () => {
      let allowNext = true;
      const limiter = new RecordingLimiter(async () => {
        await new Promise((resolve) => setImmediate(resolve));
        const decision = allowNext;
        allowNext = false;
        return decision;
      });
      const handled = await start(limiter);
      expect((await target.limited(running!.base)).status).to.equal(200);
      expect((await target.limited(running!.base)).status).to.equal(429);
      expect(handled()).to.equal(1);
    });

    it("fails open when the limiter throws or rejects, and counts it", async () => {
      let calls = 0;
      const limiter = new RecordingLimiter(() => {
        calls += 1;
        if (calls === 1) throw new Error("limiter bug");
        return Promise.reject(new Error("redis down"));
      });
      const handled = await start(limiter);
      expect((await target.limited(running!.base)).status).to.equal(200);
      expect((await target.limited(running!.base)).status).to.equal(200);
      expect(handled()).to.equal(2);
      const metrics = await scrape(running!.base);
      expect(valueOf(metrics, "rate_limiter_errors_total")).to.equal(2);
    });
  });
}

describe("rate limiting: none supplied", () => {
  it("serves everything when no limiter was given", async () => {
    const running = await serve(createApp(new BatchEngine({ auto: true }), { maxWaitMs: 1 }));
    try {
      for (let i = 0; i < 5; i += 1) expect((await postJson(running.base, "/generate", { prompt: "hi" })).status).to.equal(200);
    } finally {
      await running.close();
    }
  });
});

describe("rate limiting: before admission", () => {
  it("a denied client gets 429 even when the app is not serving", async () => {
    const app = createApp(new BatchEngine({ auto: true }), { rateLimiter: new RecordingLimiter(() => false) });
    const running = await serve(app, { start: false });
    try {
      expect((await postJson(running.base, "/generate", { prompt: "hi" })).status).to.equal(429);
      expect((await postJson(running.base, "/generate/stream", { prompt: "hi" })).status).to.equal(429);
    } finally {
      await running.close();
    }
  });
});
