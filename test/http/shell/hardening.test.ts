/** Readiness, stream admission, request ids: what a load balancer and an operator rely on. */
import { expect } from "chai";

import { createApp } from "../../../src/http/text/createApp.js";
import { createRecsysApp } from "../../../src/http/recsys/createRecsysApp.js";
import { deferred } from "../../helpers/deferred.js";
import { BatchEngine, StreamEngine } from "../../helpers/engines.js";
import { listen, postJson, serve } from "../../helpers/http.js";
import { parseExposition, valueOf } from "../../helpers/metrics.js";

const recommender = { recommend: (_user: number, k: number) => ({ items: Array.from({ length: k }, (_, i) => i), fallback: false }) };

describe("GET /ready", () => {
  it("text app: 503 before start(), 200 once started, 503 from the moment stop() begins; /health is 200 throughout", async () => {
    const engine = new BatchEngine({ auto: true });
    const app = createApp(engine, { rateLimiter: { allow: () => false } });
    const running = await listen(app);
    try {
      const before = await fetch(`${running.base}/ready`);
      expect(before.status).to.equal(503);
      expect(before.headers.get("retry-after")).to.equal("1");
      expect(await before.json()).to.deep.include({ code: "ERR_NOT_READY" });
      expect((await fetch(`${running.base}/health`)).status).to.equal(200);

      await app.start();
      // The limiter denies everything: /ready is never rate limited.
      const ready = await fetch(`${running.base}/ready`);
      expect(ready.status).to.equal(200);
      expect(await ready.json()).to.deep.equal({ status: "ready" });

      const stopping = app.stop();
      expect((await fetch(`${running.base}/ready`)).status).to.equal(503);
      expect((await fetch(`${running.base}/health`)).status).to.equal(200);
      await stopping;
    } finally {
      await running.close();
    }
  });

  it("text app: readiness waits for the owner's gate (the server entry: both apps listening)", async () => {
    const app = createApp(new BatchEngine({ auto: true }));
    let open = false;
    app.readiness.setGate(() => open);
    const running = await serve(app);
    try {
      expect((await fetch(`${running.base}/ready`)).status).to.equal(503);
      open = true;
      expect((await fetch(`${running.base}/ready`)).status).to.equal(200);
      app.readiness.markDraining();
      expect((await fetch(`${running.base}/ready`)).status).to.equal(503);
    } finally {
      await running.close();
    }
  });

  it("recsys app: ready from creation (its model is loaded first), 503 once stop() begins, ready again after start()", async () => {
    const app = createRecsysApp(recommender);
    const running = await listen(app);
    try {
      expect((await fetch(`${running.base}/ready`)).status).to.equal(200);
      await app.stop();
      expect((await fetch(`${running.base}/ready`)).status).to.equal(503);
      await app.start();
      expect((await fetch(`${running.base}/ready`)).status).to.equal(200);
    } finally {
      await running.close();
    }
  });
});

describe("stream admission (maxActiveStreams)", () => {
  it("refuses the stream beyond the limit with 503, Retry-After and ERR_TOO_MANY_STREAMS, counts it, and admits again once one ends", async () => {
    const gate = deferred<void>();
    const engine = new StreamEngine(async function* () {
      yield "a";
      await gate.promise;
      yield "b";
    });
    const app = createApp(engine, { maxActiveStreams: 2 });
    const running = await serve(app);
    try {
      const body = { prompt: "x", max_new_tokens: 2 };
      const first = await postJson(running.base, "/generate/stream", body);
      const second = await postJson(running.base, "/generate/stream", body);
      expect([first.status, second.status]).to.deep.equal([200, 200]);

      const refused = await postJson(running.base, "/generate/stream", body);
      expect(refused.status).to.equal(503);
      expect(refused.headers.get("retry-after")).to.equal("1");
      expect(refused.headers.get("content-type")).to.match(/application\/json/);
      expect(await refused.json()).to.deep.include({ code: "ERR_TOO_MANY_STREAMS" });
      expect(engine.calls.all).to.have.length(2);
      // Batched /generate is not a stream: still served.
      expect((await postJson(running.base, "/generate", body)).status).to.equal(200);

      const metrics = parseExposition(await (await fetch(`${running.base}/metrics`)).text());
      expect(valueOf(metrics, "streams_refused_total", { route: "/generate/stream" })).to.equal(1);
      expect(valueOf(metrics, "active_streams")).to.equal(2);

      gate.resolve();
      await Promise.all([first.text(), second.text()]);
      const again = await postJson(running.base, "/generate/stream", body);
      expect(again.status).to.equal(200);
      expect(await again.text()).to.contain("[DONE]");
    } finally {
      await running.close();
    }
  });

  it("takes its default from the engine's capacity(), else 64", async () => {
    const bounded = Object.assign(new StreamEngine(async function* () {
      yield "a";
      await new Promise(() => {});
    }), { capacity: () => ({ maxActiveRows: 1 }) });
    const running = await serve(createApp(bounded));
    const controller = new AbortController();
    try {
      const first = await postJson(running.base, "/generate/stream", { prompt: "x" }, { signal: controller.signal });
      expect(first.status).to.equal(200);
      expect((await postJson(running.base, "/generate/stream", { prompt: "x" })).status).to.equal(503);
    } finally {
      controller.abort();
      await running.close();
    }
    expect(() => createApp(new BatchEngine(), { maxActiveStreams: 0 })).to.throw(RangeError);
  });
});

describe("X-Request-Id", () => {
  it("echoes a sane client id, replaces a hostile one, generates one otherwise, on every response (errors included)", async () => {
    const lines: object[] = [];
    const logger = { info: (o: object) => lines.push(o), warn: () => {}, error: () => {} };
    const running = await serve(createApp(new BatchEngine({ auto: true }), { logger }));
    try {
      const kept = await fetch(`${running.base}/health`, { headers: { "x-request-id": "abc-123.xyz" } });
      expect(kept.headers.get("x-request-id")).to.equal("abc-123.xyz");

      const hostile = await fetch(`${running.base}/nowhere`, { headers: { "x-request-id": "a b<script>".padEnd(300, "x") } });
      expect(hostile.status).to.equal(404);
      const replaced = hostile.headers.get("x-request-id");
      expect(replaced).to.match(/^[0-9a-f-]{36}$/);

      const bad = await postJson(running.base, "/generate", "{not json");
      expect(bad.status).to.equal(422);
      const generated = bad.headers.get("x-request-id");
      expect(generated).to.match(/^[0-9a-f-]{36}$/).and.not.equal(replaced);

      // Each request's log line carries its id.
      const ids = lines.map((line) => (line as { requestId?: string }).requestId);
      expect(ids).to.include.members(["abc-123.xyz", replaced, generated]);
    } finally {
      await running.close();
    }
  });
});

describe("TorchEngine.capacity(): the default stream limit from the KV budget", () => {
  it("rows of 2 x n_layer x n_embd x block_size floats that fit SERVICE_KV_BUDGET_MB, clamped to 8..256", async () => {
    const { TorchEngine } = await import("../../../src/engine/TorchEngine.js");
    const { fixture } = await import("../../helpers/fixtures.js");
    const probe = await TorchEngine.load(fixture("tiny-gpt.pt"), { threads: 1 });
    const { n_layer: layers, n_embd: width } = probe.config.raw as { n_layer: number; n_embd: number };
    const rowBytes = 2 * layers * width * probe.config.contextLength * 4;
    await probe.dispose();
    const mib = (rows: number): number => (rows * rowBytes) / 2 ** 20;
    // Exactly 10 rows; less than one row (the floor of 8); the default 256 MiB (capped at 256).
    for (const [kvBudgetMb, rows] of [[mib(10.5), 10], [mib(0.5), 8], [undefined, Math.min(256, Math.floor(2 ** 28 / rowBytes))]] as const) {
      const engine = await TorchEngine.load(fixture("tiny-gpt.pt"), { threads: 1, kvBudgetMb });
      try {
        expect(engine.capacity(), `kvBudgetMb ${kvBudgetMb}`).to.deep.equal({ maxActiveRows: rows });
      } finally {
        await engine.dispose();
      }
    }
  });
});
