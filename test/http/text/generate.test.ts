/** POST /generate through the batcher: batch shapes, timing, answers, failure isolation. */
import { performance } from "node:perf_hooks";
import { expect } from "chai";
import { createApp } from "../../../src/http/index.js";
import { BatchEngine, plain } from "../../helpers/engines.js";
import { postJson, serve, type Running } from "../../helpers/http.js";
import { scrape, valueOf } from "../../helpers/metrics.js";

describe("POST /generate", function () {
  let running: Running | undefined;
  afterEach(async () => {
    await running?.close();
    running = undefined;
  });

  it("answers 200 JSON {text, latency_ms} with the engine's text for this prompt", async () => {
    const engine = new BatchEngine({ auto: true });
    running = await serve(createApp(engine, { maxWaitMs: 1 }));
    const startedAt = performance.now();
    const response = await postJson(running.base, "/generate", { prompt: "hello" });
    const elapsedMs = performance.now() - startedAt;
    expect(response.status).to.equal(200);
    expect(response.headers.get("content-type")).to.equal("application/json; charset=utf-8");
    const body = (await response.json()) as { text: string; latency_ms: number };
    expect(Object.keys(body).sort()).to.deep.equal(["latency_ms", "text"]);
    expect(body.text).to.equal("echo:hello");
    expect(body.latency_ms).to.be.a("number").above(0);
    // Server-side latency cannot exceed what the client measured around the whole call.
    expect(body.latency_ms).to.be.at.most(elapsedMs);
  });

  it("groups 10 concurrent requests into batches of 4, 4, 2 and answers each with its own text", async () => {
    const engine = new BatchEngine();
    running = await serve(createApp(engine, { maxBatchSize: 4, maxWaitMs: 1000 }));
    const prompts = Array.from({ length: 10 }, (_, i) => `prompt-${i}`);
    const responses = prompts.map((prompt) => postJson(running!.base, "/generate", { prompt }));
    // Each batch is held until the test has seen it: the engine is busy meanwhile.
    for (let i = 0; i < 3; i += 1) (await engine.calls.next()).echo();
    const bodies = await Promise.all(responses.map(async (r) => ((await r).json() as Promise<{ text: string }>)));
    expect(engine.batchSizes).to.deep.equal([4, 4, 2]);
    expect(bodies.map((b) => b.text)).to.deep.equal(prompts.map((prompt) => `echo:${prompt}`));
    const seen = engine.calls.all.flatMap((call) => call.requests.map((r) => r.prompt));
    expect(seen).to.have.members(prompts);
    const metrics = await scrape(running.base);
    expect(valueOf(metrics, "batch_size_count")).to.equal(engine.calls.all.length);
    expect(valueOf(metrics, "batch_size_sum")).to.equal(10);
    expect(valueOf(metrics, "queue_wait_seconds_count")).to.equal(10);
  });

  it("maps each row of the engine answer back to the request of that row, whatever the arrival order", async () => {
    const engine = new BatchEngine();
    running = await serve(createApp(engine, { maxBatchSize: 3, maxWaitMs: 1000 }));
    const responses = ["a", "b", "c"].map((prompt) => postJson(running!.base, "/generate", { prompt }));
    const call = await engine.calls.next();
    call.result.resolve(call.requests.map((r) => `${r.prompt}!`.repeat(2)));
    const texts = await Promise.all(responses.map(async (r) => ((await (await r).json()) as { text: string }).text));
    expect(texts).to.deep.equal(["a!a!", "b!b!", "c!c!"]);
  });

  it("dispatches a lone request after about maxWaitMs, not much longer", async () => {
    const engine = new BatchEngine();
    running = await serve(createApp(engine, { maxBatchSize: 8, maxWaitMs: 20 }));
    // Warm the path (first-request costs) so the measured one shows the batcher's wait.
    const warm = postJson(running.base, "/generate", { prompt: "warm" });
    (await engine.calls.next()).echo();
    await (await warm).text();

    const sentAt = performance.now();
    const response = postJson(running.base, "/generate", { prompt: "alone" });
    const call = await engine.calls.next();
    const dispatchedAfterMs = performance.now() - sentAt;
    call.echo();
    expect(((await (await response).json()) as { text: string }).text).to.equal("echo:alone");
    expect(call.requests.map(plain)).to.deep.equal([{ prompt: "alone", maxNewTokens: 64, temperature: 1, topK: null }]);
    expect(engine.batchSizes).to.deep.equal([1, 1]);
    // It waited for company (the batch was not sent at once)...
    expect(dispatchedAfterMs).to.be.at.least(19);
    // ...and was sent at its deadline, not much later (generous: a loaded 2-core machine).
    expect(dispatchedAfterMs).to.be.below(250);
  });

  it("fails only the batch whose engine call fails (500 JSON), and the next batch succeeds", async () => {
    const engine = new BatchEngine();
    running = await serve(createApp(engine, { maxBatchSize: 2, maxWaitMs: 1000 }));
    const doomed = ["x", "y"].map((prompt) => postJson(running!.base, "/generate", { prompt }));
    const first = await engine.calls.next();
    const healthy = ["p", "q"].map((prompt) => postJson(running!.base, "/generate", { prompt }));
    first.result.reject(Object.assign(new Error("CUDA out of memory at /secret/path"), { code: "ERR_INFERENCE" }));
    (await engine.calls.next()).echo();
    for (const response of await Promise.all(doomed)) {
      expect(response.status).to.equal(500);
      expect(response.headers.get("content-type")).to.match(/^application\/json/);
      const body = (await response.json()) as { detail: string; code: string };
      expect(body.code).to.equal("ERR_INFERENCE");
      expect(body.detail).to.not.include("/secret/path"); // internals stay in the log
    }
    const texts = await Promise.all(healthy.map(async (r) => ((await (await r).json()) as { text: string }).text));
    expect(texts).to.deep.equal(["echo:p", "echo:q"]);
  });

  it("fails the batch when the engine returns the wrong number of texts", async () => {
    const engine = new BatchEngine();
    running = await serve(createApp(engine, { maxBatchSize: 2, maxWaitMs: 1000 }));
    const responses = ["x", "y"].map((prompt) => postJson(running!.base, "/generate", { prompt }));
    (await engine.calls.next()).result.resolve(["only one"]);
    for (const response of await Promise.all(responses)) {
      expect(response.status).to.equal(500);
      expect(await response.json()).to.deep.include({ code: "ERR_INTERNAL" });
    }
  });
});
