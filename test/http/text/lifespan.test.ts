/** start()/stop(): 503 outside the lifespan, draining on stop, admission limits, queued disconnects. */
import { expect } from "chai";
import { createApp } from "../../../src/http/index.js";
import { deferred } from "../../helpers/deferred.js";
import { BatchEngine, StreamEngine } from "../../helpers/engines.js";
import { listen, postJson, readUntil, serve, type Running } from "../../helpers/http.js";
import { eventually, scrape, valueOf } from "../../helpers/metrics.js";

async function expect503(response: Response, code: string): Promise<void> {
  expect(response.status).to.equal(503);
  expect(response.headers.get("retry-after")).to.equal("1");
  expect(response.headers.get("content-type")).to.match(/^application\/json/);
  expect(await response.json()).to.deep.include({ code });
}

const queueDepth = async (base: string): Promise<number> => valueOf(await scrape(base), "queue_depth");

describe("lifespan", function () {
  this.timeout(10_000);
  let running: Running | undefined;
  afterEach(async () => {
    await running?.close();
    running = undefined;
  });

  it("before start(): /generate and /generate/stream answer 503 (after validation); /health and /metrics work", async () => {
    const engine = new BatchEngine({ auto: true });
    const app = createApp(engine);
    running = await listen(app);
    await expect503(await postJson(running.base, "/generate", { prompt: "hi" }), "ERR_NOT_SERVING");
    await expect503(await postJson(running.base, "/generate/stream", { prompt: "hi" }), "ERR_NOT_SERVING");
    expect((await postJson(running.base, "/generate", { prompt: "" })).status).to.equal(422);
    expect((await postJson(running.base, "/generate/stream", { prompt: "" })).status).to.equal(422);
    expect(await (await fetch(`${running.base}/health`)).json()).to.deep.equal({ status: "ok" });
    expect((await fetch(`${running.base}/metrics`)).status).to.equal(200);
    expect(engine.calls.all).to.have.length(0);
    await app.start();
    expect((await postJson(running.base, "/generate", { prompt: "hi" })).status).to.equal(200);
  });

  it("after stop(): 503 again, while /health still answers ok", async () => {
    const app = createApp(new BatchEngine({ auto: true }), { maxWaitMs: 1 });
    running = await serve(app);
    expect((await postJson(running.base, "/generate", { prompt: "hi" })).status).to.equal(200);
    await app.stop();
    await expect503(await postJson(running.base, "/generate", { prompt: "hi" }), "ERR_NOT_SERVING");
    await expect503(await postJson(running.base, "/generate/stream", { prompt: "hi" }), "ERR_NOT_SERVING");
    expect((await fetch(`${running.base}/health`)).status).to.equal(200);
  });

  it("stop() serves everything already queued (at once, not after maxWaitMs) before it resolves", async () => {
    const engine = new BatchEngine();
    const app = createApp(engine, { maxBatchSize: 2, maxWaitMs: 60_000 });
    running = await serve(app);
    const responses = [1, 2, 3, 4, 5].map((i) => postJson(running!.base, "/generate", { prompt: `p${i}` }));
    const first = await engine.calls.next();
    await eventually(async () => (await queueDepth(running!.base)) === 3, "three requests queued");
    let stopped = false;
    const stopping = app.stop().then(() => (stopped = true));
    await expect503(await postJson(running.base, "/generate", { prompt: "late" }), "ERR_NOT_SERVING");
    first.echo();
    (await engine.calls.next()).echo();
    const last = await engine.calls.next();
    expect(stopped).to.equal(false);
    last.echo();
    await stopping;
    expect(engine.batchSizes).to.deep.equal([2, 2, 1]);
    for (const response of await Promise.all(responses)) expect(response.status).to.equal(200);
  });

  it("stop() waits for streams in flight, and refuses new ones meanwhile", async () => {
    const gate = deferred();
    const engine = new StreamEngine(async function* () {
      yield "a";
      await gate.promise;
      yield "b";
    });
    const app = createApp(engine);
    running = await serve(app);
    const response = await postJson(running.base, "/generate/stream", { prompt: "hi" });
    const reader = response.body!.getReader();
    await readUntil(reader, (text) => text.includes("\"a\""));
    let stopped = false;
    const stopping = app.stop().then(() => (stopped = true));
    await expect503(await postJson(running.base, "/generate/stream", { prompt: "hi" }), "ERR_NOT_SERVING");
    expect(stopped).to.equal(false);
    gate.resolve();
    const rest = await readUntil(reader, (text) => text.endsWith("data: [DONE]\n\n"));
    expect(rest).to.include("\"b\"");
    await stopping;
  });

  it("a full queue answers 503 with Retry-After; the queued and running requests still succeed", async () => {
    const engine = new BatchEngine();
    running = await serve(createApp(engine, { maxBatchSize: 1, maxWaitMs: 0, maxQueueSize: 1 }));
    const running1 = postJson(running.base, "/generate", { prompt: "a" });
    const call = await engine.calls.next();
    const queued = postJson(running.base, "/generate", { prompt: "b" });
    await eventually(async () => (await queueDepth(running!.base)) === 1, "one request queued");
    await expect503(await postJson(running.base, "/generate", { prompt: "c" }), "ERR_QUEUE_FULL");
    call.echo();
    (await engine.calls.next()).echo();
    expect((await running1).status).to.equal(200);
    expect((await queued).status).to.equal(200);
    expect(engine.calls.all.flatMap((c) => c.requests.map((r) => r.prompt))).to.deep.equal(["a", "b"]);
  });

  it("a client that disconnects while queued is dropped: the engine never sees its request", async () => {
    const engine = new BatchEngine();
    running = await serve(createApp(engine, { maxBatchSize: 1, maxWaitMs: 0 }));
    const busy = postJson(running.base, "/generate", { prompt: "busy" });
    const first = await engine.calls.next();
    const controller = new AbortController();
    const gone = postJson(running.base, "/generate", { prompt: "gone" }, { signal: controller.signal });
    gone.catch(() => {});
    await eventually(async () => (await queueDepth(running!.base)) === 1, "the second request queued");
    controller.abort();
    await eventually(async () => (await queueDepth(running!.base)) === 0, "the disconnected request dropped");
    first.echo();
    expect((await busy).status).to.equal(200);
    const after = postJson(running.base, "/generate", { prompt: "after" });
    (await engine.calls.next()).echo();
    expect((await after).status).to.equal(200);
    expect(engine.calls.all.flatMap((c) => c.requests.map((r) => r.prompt))).to.deep.equal(["busy", "after"]);
    const metrics = await scrape(running.base);
    expect(valueOf(metrics, "http_requests_total", { route: "/generate", status: "499" })).to.equal(1);
  });
});
