/** POST /generate/stream: SSE framing, flushing, errors before and after the first byte, cancellation. */
import { expect } from "chai";
import { createApp } from "../../../src/http/index.js";
import { aborted, deferred } from "../../helpers/deferred.js";
import { StreamEngine, type StreamCall } from "../../helpers/engines.js";
import { postJson, readUntil, serve, type Running } from "../../helpers/http.js";
import { scrape, valueOf } from "../../helpers/metrics.js";

const event = (token: string): string => `data: ${JSON.stringify({ token })}\n\n`;
const DONE = "data: [DONE]\n\n";

describe("POST /generate/stream", function () {
  this.timeout(10_000);
  let running: Running | undefined;
  afterEach(async () => {
    await running?.close();
    running = undefined;
  });

  async function start(script: (call: StreamCall) => AsyncGenerator<string>): Promise<StreamEngine> {
    const engine = new StreamEngine(script);
    running = await serve(createApp(engine));
    return engine;
  }

  it("sends one `data: {\"token\"}` event per piece, then `data: [DONE]`, with SSE headers", async () => {
    const pieces = ["Hel", "lo\n", "w\u00f6rld \u{1F600}", "\"quoted\"", ""];
    const engine = await start(async function* () {
      yield* pieces;
    });
    const response = await postJson(running!.base, "/generate/stream", { prompt: "hi", max_new_tokens: 5 });
    expect(response.status).to.equal(200);
    expect(response.headers.get("content-type")).to.equal("text/event-stream");
    expect(response.headers.get("cache-control")).to.equal("no-cache, no-transform");
    expect(response.headers.get("x-accel-buffering")).to.equal("no");
    expect(await response.text()).to.equal(pieces.map(event).join("") + DONE);
    const call = await engine.calls.next();
    expect(call.request.maxNewTokens).to.equal(5);
    expect(call.signal).to.be.instanceOf(AbortSignal);
    expect(call.request.signal).to.equal(call.signal);
  });

  it("flushes each event at once (the client reads a piece while the engine still works)", async () => {
    const gate = deferred();
    await start(async function* () {
      yield "first";
      await gate.promise;
      yield "second";
    });
    const response = await postJson(running!.base, "/generate/stream", { prompt: "hi" });
    const reader = response.body!.getReader();
    const early = await readUntil(reader, (text) => text.includes(event("first")));
    expect(early).to.equal(event("first"));
    gate.resolve();
    const rest = await readUntil(reader, (text) => text.endsWith(DONE));
    expect(early + rest).to.equal(event("first") + event("second") + DONE);
  });

  it("an engine that produces nothing gives just [DONE]", async () => {
    await start(async function* () {});
    const response = await postJson(running!.base, "/generate/stream", { prompt: "hi" });
    expect(response.status).to.equal(200);
    expect(await response.text()).to.equal(DONE);
  });

  it("an engine error before the first piece is a 500 JSON answer, not a stream", async () => {
    await start(async function* () {
      throw Object.assign(new Error("model exploded"), { code: "ERR_INFERENCE" });
    });
    const response = await postJson(running!.base, "/generate/stream", { prompt: "hi" });
    expect(response.status).to.equal(500);
    expect(response.headers.get("content-type")).to.match(/^application\/json/);
    expect(await response.json()).to.deep.equal({ detail: "Internal Server Error", code: "ERR_INFERENCE" });
  });

  it("an engine whose generateStream throws synchronously is a 500 JSON answer", async () => {
    const engine = new StreamEngine(async function* () {});
    engine.generateStream = () => {
      throw new Error("not even an iterator");
    };
    running = await serve(createApp(engine));
    const response = await postJson(running.base, "/generate/stream", { prompt: "hi" });
    expect(response.status).to.equal(500);
    expect(await response.json()).to.deep.equal({ detail: "Internal Server Error", code: "ERR_INTERNAL" });
  });

  it("an engine error after the first piece ends the stream with `event: error` and no [DONE]", async () => {
    await start(async function* () {
      yield "a";
      throw Object.assign(new Error("lost the device"), { code: "ERR_INFERENCE" });
    });
    const response = await postJson(running!.base, "/generate/stream", { prompt: "hi" });
    expect(response.status).to.equal(200);
    const text = await response.text();
    expect(text).to.equal(
      event("a") + `event: error\ndata: ${JSON.stringify({ detail: "Internal Server Error", code: "ERR_INFERENCE" })}\n\n`,
    );
    expect(text).to.not.include("[DONE]");
  });

  it("a client disconnect aborts the engine's signal, closes its iterator and is counted", async () => {
    const engine = await start(async function* (call) {
      yield "a";
      await aborted(call.signal!);
    });
    const controller = new AbortController();
    const response = await postJson(running!.base, "/generate/stream", { prompt: "hi" }, { signal: controller.signal });
    const reader = response.body!.getReader();
    await readUntil(reader, (text) => text.includes(event("a")));
    controller.abort();
    const call = await engine.calls.next();
    await aborted(call.signal!);
    await call.closed.promise;
    const metrics = await scrape(running!.base);
    expect(valueOf(metrics, "stream_cancelled_total")).to.equal(1);
    expect(valueOf(metrics, "http_requests_total", { route: "/generate/stream", status: "200" })).to.equal(1);
  });

  it("stops iterating an engine that ignores the signal: its iterator's return() runs", async () => {
    const gate = deferred();
    let produced = 0;
    const engine = await start(async function* () {
      for (;;) {
        produced += 1;
        yield `piece-${produced}`;
        await gate.promise; // deaf to the signal
      }
    });
    const controller = new AbortController();
    const response = await postJson(running!.base, "/generate/stream", { prompt: "hi" }, { signal: controller.signal });
    await readUntil(response.body!.getReader(), (text) => text.includes(event("piece-1")));
    controller.abort();
    const call = await engine.calls.next();
    await aborted(call.signal!);
    gate.resolve();
    // Without return() the generator would sit at its next yield forever.
    await call.closed.promise;
    expect(produced).to.equal(2);
  });

  it("is not batched, and records time to first token and inter-token times", async () => {
    const engine = await start(async function* () {
      yield* ["a", "b", "c"];
    });
    const response = await postJson(running!.base, "/generate/stream", { prompt: "hi" });
    await response.text();
    expect(engine.calls.all).to.have.length(1);
    const metrics = await scrape(running!.base);
    expect(valueOf(metrics, "batch_size_count")).to.equal(0);
    expect(valueOf(metrics, "stream_time_to_first_token_seconds_count")).to.equal(1);
    expect(valueOf(metrics, "stream_inter_token_seconds_count")).to.equal(2);
    expect(valueOf(metrics, "stream_cancelled_total")).to.equal(0);
  });
});
