/**
 * The text-generation app over a real socket on the real engine (the tiny fixture): the HTTP
 * layer that was built against hand-written engines runs unchanged on TorchEngine.
 */
import { expect } from "chai";

import { TorchEngine } from "../../src/engine/TorchEngine.js";
import type { GenerateRequest, TextGenerationEngine } from "../../src/types.js";
import { ByteTokenizer } from "../../src/engine/tokenizer.js";
import { createApp } from "../../src/http/text/createApp.js";
import { fixture, goldenFor } from "../helpers/fixtures.js";
import { postJson, readUntil, serve, type Running } from "../helpers/http.js";

const bytes = new ByteTokenizer();
const cases = goldenFor("tiny-gpt.pt").cases.filter((c) => c.prompt !== null);

function events(text: string): string[] {
  return text
    .split("\n\n")
    .filter((block) => block.startsWith("data: "))
    .map((block) => block.slice("data: ".length));
}

/**
 * The real engine, except that a stream whose prompt starts with "hold" pauses after its
 * second piece until its request is aborted: the tiny model is fast enough to finish 512
 * tokens before a disconnect is noticed, and this test is about what the disconnect does.
 */
function holdingStreams(engine: TorchEngine): TextGenerationEngine {
  return {
    generateBatch: (requests) => engine.generateBatch(requests),
    usage: () => engine.usage(),
    async *generateStream(request: GenerateRequest, signal?: AbortSignal) {
      let pieces = 0;
      for await (const piece of engine.generateStream(request, signal)) {
        yield piece;
        if (++pieces === 2 && request.prompt.startsWith("hold") && signal && !signal.aborted) {
          await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
        }
      }
    },
  };
}

describe("text-generation app on TorchEngine", function () {
  let engine: TorchEngine;
  let running: Running;
  const controller = new AbortController();

  before(async () => {
    engine = await TorchEngine.load(fixture("tiny-gpt.pt"));
    running = await serve(createApp(holdingStreams(engine), { maxBatchSize: 4, maxWaitMs: 20 }));
  });
  after(async () => {
    controller.abort(); // a held stream must not keep stop() waiting if its test failed early
    await running.close();
    await engine.dispose();
  });

  it("POST /generate answers the reference continuation for each of many concurrent requests", async () => {
    const responses = await Promise.all(
      cases.map((c) => postJson(running.base, "/generate", { prompt: c.prompt, max_new_tokens: c.max_new_tokens, temperature: 1e-9 })),
    );
    for (const [i, response] of responses.entries()) {
      expect(response.status).to.equal(200);
      const body = (await response.json()) as { text: string; latency_ms: number };
      expect(body.text, cases[i]!.name).to.equal(bytes.decode(cases[i]!.output_ids));
      expect(body.latency_ms).to.be.a("number").and.be.greaterThan(0);
    }
    // 7 concurrent requests with maxBatchSize 4 cannot have gone one engine call each.
    const metrics = await (await fetch(`${running.base}/metrics`)).text();
    const batches = Number(/^batch_size_count (\d+)/m.exec(metrics)?.[1]);
    const sum = Number(/^batch_size_sum (\d+)/m.exec(metrics)?.[1]);
    expect(sum).to.equal(cases.length);
    expect(batches).to.be.below(cases.length);
    expect(Number(/^generated_tokens_total (\d+)/m.exec(metrics)?.[1])).to.be.at.least(
      cases.reduce((n, c) => n + c.output_ids.length, 0),
    );
  });

  it("POST /generate/stream sends the same text piece by piece, then [DONE]", async () => {
    const c = cases.find((x) => x.name === "utf8")!;
    const response = await postJson(running.base, "/generate/stream", { prompt: c.prompt, max_new_tokens: c.max_new_tokens, temperature: 0.000001 });
    expect(response.status).to.equal(200);
    expect(response.headers.get("content-type")).to.match(/^text\/event-stream/);
    const data = events(await response.text());
    expect(data.at(-1)).to.equal("[DONE]");
    const pieces = data.slice(0, -1).map((d) => (JSON.parse(d) as { token: string }).token);
    expect(pieces.join("")).to.equal(bytes.decode(c.output_ids));
  });

  it("a client that disconnects mid-stream stops the generation", async () => {
    const before = engine.usage().generatedTokens;
    const response = await postJson(
      running.base,
      "/generate/stream",
      { prompt: "hold on", max_new_tokens: 512, temperature: 1, seed: 5 },
      { signal: controller.signal },
    );
    const reader = response.body!.getReader();
    await readUntil(reader, (text) => events(text).length >= 2);
    controller.abort();
    // The abort reached the engine: the stream stopped short of its 512 tokens, and the next
    // request is served.
    const next = await postJson(running.base, "/generate", { prompt: "Hello, world!", max_new_tokens: 16, temperature: 1e-9 });
    expect(((await next.json()) as { text: string }).text).to.equal(bytes.decode(cases[0]!.output_ids));
    expect(engine.usage().generatedTokens - before).to.be.below(512 + 16);
    const metrics = await (await fetch(`${running.base}/metrics`)).text();
    expect(Number(/^stream_cancelled_total (\d+)/m.exec(metrics)?.[1])).to.be.at.least(1);
  });

  it("bad input gets 422 and the engine is not called", async () => {
    const before = engine.usage().promptTokens;
    for (const body of [{ prompt: "" }, { prompt: "x", max_new_tokens: 513 }, { prompt: "x", temperature: 0 }, { prompt: "x", top_k: 0 }]) {
      expect((await postJson(running.base, "/generate", body)).status, JSON.stringify(body)).to.equal(422);
    }
    expect(engine.usage().promptTokens).to.equal(before);
  });
});
