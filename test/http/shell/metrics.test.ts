/** /metrics of both apps: names, types, labels by route template, per-app registries, promtool. */
import { expect } from "chai";
import { createApp, createRecsysApp } from "../../../src/http/index.js";
import type { EngineUsage } from "../../../src/types.js";
import { BatchEngine } from "../../helpers/engines.js";
import { listen, postJson, serve, type Running } from "../../helpers/http.js";
import { RecordingLimiter } from "../../helpers/limiters.js";
import { promtoolCheck, scrape, valueOf, type Exposition } from "../../helpers/metrics.js";

function expectTypes(metrics: Exposition, expected: Record<string, string>): void {
  for (const [name, type] of Object.entries(expected)) {
    expect(metrics.types.get(name), `# TYPE ${name}`).to.equal(type);
    expect(metrics.help.get(name), `# HELP ${name}`).to.be.a("string").with.length.above(10);
  }
}

const HTTP_METRICS = {
  http_requests_total: "counter",
  request_latency_seconds: "histogram",
  rate_limited_total: "counter",
  rate_limiter_errors_total: "counter",
  process_cpu_seconds_total: "counter",
  process_resident_memory_bytes: "gauge",
  nodejs_eventloop_lag_seconds: "gauge",
};

describe("GET /metrics", function () {
  this.timeout(10_000);
  const toClose: Running[] = [];
  afterEach(async () => {
    for (const running of toClose.splice(0)) await running.close();
  });

  async function generateApp(engine = new BatchEngine({ auto: true })): Promise<string> {
    const running = await serve(createApp(engine, { maxWaitMs: 1, rateLimiter: new RecordingLimiter() }));
    toClose.push(running);
    return running.base;
  }

  it("text app: spec and operator metrics with the right types, as text/plain", async () => {
    const base = await generateApp();
    await (await postJson(base, "/generate", { prompt: "hi" })).text();
    const response = await fetch(`${base}/metrics`);
    expect(response.status).to.equal(200);
    expect(response.headers.get("content-type")).to.match(/^text\/plain; version=0\.0\.4/);
    const metrics = await scrape(base);
    expectTypes(metrics, {
      ...HTTP_METRICS,
      batch_size: "histogram",
      queue_wait_seconds: "histogram",
      queue_depth: "gauge",
      generated_tokens_total: "counter",
      prompt_tokens_total: "counter",
      stream_time_to_first_token_seconds: "histogram",
      stream_inter_token_seconds: "histogram",
      stream_cancelled_total: "counter",
    });
    expect(valueOf(metrics, "batch_size_count")).to.equal(1);
    expect(valueOf(metrics, "batch_size_bucket", { le: "1" })).to.equal(1);
    expect(valueOf(metrics, "http_requests_total", { method: "POST", route: "/generate", status: "200" })).to.equal(1);
    expect(valueOf(metrics, "request_latency_seconds_count", { route: "/generate" })).to.equal(1);
  });

  it("recsys app: its own metrics, the HTTP ones and process ones, and none of the text app's", async () => {
    const running = await listen(createRecsysApp({ recommend: () => ({ items: [1], fallback: true }) }));
    toClose.push(running);
    await (await fetch(`${running.base}/recommend/5?k=1`)).text();
    const metrics = await scrape(running.base);
    expectTypes(metrics, { ...HTTP_METRICS, recommend_latency_seconds: "histogram", recommend_fallback_total: "counter" });
    expect(metrics.types.has("batch_size")).to.equal(false);
    expect(valueOf(metrics, "recommend_fallback_total")).to.equal(1);
  });

  it("labels routes by template, never by raw path; unmatched paths share one label", async () => {
    const running = await listen(createRecsysApp({ recommend: () => ({ items: [], fallback: false }) }));
    toClose.push(running);
    for (const path of ["/recommend/1", "/recommend/2", "/recommend/x", "/no/such/path", "/another-one"]) {
      await (await fetch(running.base + path)).text();
    }
    const metrics = await scrape(running.base);
    const routes = new Set(metrics.samples.filter((s) => s.name === "http_requests_total").map((s) => s.labels["route"]));
    expect([...routes].sort()).to.deep.equal(["/recommend/:user_id", "unmatched"]);
    expect(valueOf(metrics, "http_requests_total", { route: "/recommend/:user_id", status: "200" })).to.equal(2);
    expect(valueOf(metrics, "http_requests_total", { route: "/recommend/:user_id", status: "422" })).to.equal(1);
    expect(valueOf(metrics, "http_requests_total", { route: "unmatched", status: "404" })).to.equal(2);
    expect(metrics.text).to.not.include("/recommend/1");
    expect(metrics.text).to.not.include("/no/such/path");
  });

  it("reads token totals from the engine's usage() at scrape time; 0 without usage()", async () => {
    const usage: EngineUsage = { promptTokens: 5, generatedTokens: 7 };
    const engine = Object.assign(new BatchEngine({ auto: true }), { usage: () => usage });
    const base = await generateApp(engine);
    let metrics = await scrape(base);
    expect(valueOf(metrics, "prompt_tokens_total")).to.equal(5);
    expect(valueOf(metrics, "generated_tokens_total")).to.equal(7);
    usage.promptTokens = 12;
    usage.generatedTokens = 40;
    metrics = await scrape(base);
    expect(valueOf(metrics, "prompt_tokens_total")).to.equal(12);
    expect(valueOf(metrics, "generated_tokens_total")).to.equal(40);

    const plainBase = await generateApp(new BatchEngine({ auto: true }));
    const plain = await scrape(plainBase);
    expect(plain.types.get("generated_tokens_total")).to.equal("counter");
    expect(valueOf(plain, "generated_tokens_total")).to.equal(0);
  });

  it("a usage() that throws does not break the scrape", async () => {
    const engine = Object.assign(new BatchEngine({ auto: true }), {
      usage: (): EngineUsage => {
        throw new Error("engine disposed");
      },
    });
    const base = await generateApp(engine);
    const metrics = await scrape(base);
    expect(valueOf(metrics, "generated_tokens_total")).to.equal(0);
  });

  it("each app has its own registry: two apps in one process do not collide", async () => {
    const a = await generateApp();
    const b = await generateApp();
    await (await postJson(a, "/generate", { prompt: "hi" })).text();
    expect(valueOf(await scrape(a), "batch_size_count")).to.equal(1);
    expect(valueOf(await scrape(b), "batch_size_count")).to.equal(0);
  });

  it("passes `promtool check metrics` for both apps after varied traffic", async () => {
    const base = await generateApp();
    await (await postJson(base, "/generate", { prompt: "hi" })).text();
    await (await postJson(base, "/generate", { prompt: "" })).text();
    await (await fetch(`${base}/nowhere`)).text();
    const recsys = await listen(createRecsysApp({ recommend: () => ({ items: [1], fallback: false }) }));
    toClose.push(recsys);
    await (await fetch(`${recsys.base}/recommend/1`)).text();
    for (const url of [base, recsys.base]) {
      const text = (await scrape(url)).text;
      const { status, output } = promtoolCheck(text);
      expect(status, output).to.equal(0);
    }
  });
});
