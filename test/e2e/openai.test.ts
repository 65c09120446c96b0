/**
 * The OpenAI-compatible API through the official `openai` client against the real server
 * entry (`node dist/src/server.js`, what `npm start` runs) with the demo model: models,
 * completions and chat, whole and streamed, usage, n, stop, logprobs, seed, and the
 * client's own error classes for 400, 401, 404 and 429.
 */
import { expect } from "chai";
import OpenAI, { APIError } from "openai";

import { ServerProcess, serveWithOpenAi } from "./serverProcess.js";

const MODEL = "brown-gpt";

describe("OpenAI-compatible API with the official client (npm start)", function () {
  this.timeout(120000);
  const served = serveWithOpenAi();

  it("lists the served model", async () => {
    const models = await served.client.models.list();
    expect(models.data.map((m) => m.id)).to.deep.equal([MODEL]);
    expect(models.data[0]).to.include({ object: "model" });
  });

  it("completions: greedy text equals /generate's, with usage and finish_reason", async () => {
    const done = await served.client.completions.create({ model: MODEL, prompt: "The jury said", max_tokens: 12, temperature: 0 });
    expect(done.object).to.equal("text_completion");
    expect(done.choices).to.have.length(1);
    expect(done.choices[0]!.finish_reason).to.be.oneOf(["length", "stop"]);
    const spec = await fetch(`${served.base}/generate`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ prompt: "The jury said", max_new_tokens: 12, temperature: 1e-9 }),
    }).then((r) => r.json() as Promise<{ text: string }>);
    expect(done.choices[0]!.text).to.equal(spec.text);
    expect(done.usage).to.deep.include({ prompt_tokens: "The jury said".length });
    if (done.choices[0]!.finish_reason === "length") expect(done.usage!.completion_tokens).to.equal(12);
    expect(done.usage!.total_tokens).to.equal(done.usage!.prompt_tokens + done.usage!.completion_tokens);
  });

  it("completions: prompts as token ids and several prompts in one request; echo", async () => {
    const byText = await served.client.completions.create({ model: MODEL, prompt: "The", max_tokens: 8, temperature: 0 });
    const byIds = await served.client.completions.create({ model: MODEL, prompt: [...Buffer.from("The")], max_tokens: 8, temperature: 0 });
    expect(byIds.choices[0]!.text).to.equal(byText.choices[0]!.text);
    const several = await served.client.completions.create({ model: MODEL, prompt: ["The", "In the"], max_tokens: 8, temperature: 0 });
    expect(several.choices.map((c) => c.index)).to.deep.equal([0, 1]);
    expect(several.choices[0]!.text).to.equal(byText.choices[0]!.text);
    expect(several.usage!.prompt_tokens).to.equal("The".length + "In the".length);
    const echoed = await served.client.completions.create({ model: MODEL, prompt: "The", max_tokens: 8, temperature: 0, echo: true });
    expect(echoed.choices[0]!.text).to.equal("The" + byText.choices[0]!.text);
  });

  it("completions stream: the pieces add up to the whole text; usage at the end when asked", async () => {
    const whole = await served.client.completions.create({ model: MODEL, prompt: "In the", max_tokens: 16, temperature: 0 });
    const stream = await served.client.completions.create({
      model: MODEL, prompt: "In the", max_tokens: 16, temperature: 0, stream: true, stream_options: { include_usage: true },
    });
    let text = "";
    let usage: OpenAI.CompletionUsage | undefined | null;
    let finish: string | null = null;
    for await (const chunk of stream) {
      for (const choice of chunk.choices) {
        text += choice.text;
        finish = choice.finish_reason ?? finish;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).to.equal(whole.choices[0]!.text);
    expect(finish).to.equal(whole.choices[0]!.finish_reason);
    expect(usage).to.deep.equal(whole.usage);
  });

  it("chat: the default template's prompt, an assistant message and usage; streamed the same", async () => {
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "Hi" }];
    const done = await served.client.chat.completions.create({ model: MODEL, messages, max_tokens: 10, temperature: 0 });
    expect(done.object).to.equal("chat.completion");
    expect(done.choices[0]!.message.role).to.equal("assistant");
    expect(done.choices[0]!.message.content).to.be.a("string").and.not.equal("");
    // The byte-level demo's documented default template: "user: Hi\nassistant:".
    expect(done.usage!.prompt_tokens).to.equal("user: Hi\nassistant:".length);

    const stream = await served.client.chat.completions.create({ model: MODEL, messages, max_tokens: 10, temperature: 0, stream: true });
    const deltas: OpenAI.ChatCompletionChunk.Choice.Delta[] = [];
    let finish: string | null = null;
    for await (const chunk of stream) {
      expect(chunk.object).to.equal("chat.completion.chunk");
      for (const choice of chunk.choices) {
        deltas.push(choice.delta);
        finish = choice.finish_reason ?? finish;
      }
    }
    expect(deltas[0]!.role).to.equal("assistant");
    expect(deltas.map((d) => d.content ?? "").join("")).to.equal(done.choices[0]!.message.content);
    expect(finish).to.equal(done.choices[0]!.finish_reason);
  });

  it("n choices with a seed: reproducible, and not all the same", async () => {
    const ask = () => served.client.completions.create({ model: MODEL, prompt: "She", max_tokens: 16, temperature: 1, n: 3, seed: 7 });
    const [first, again] = [await ask(), await ask()];
    expect(first.choices.map((c) => c.index)).to.deep.equal([0, 1, 2]);
    expect(again.choices.map((c) => c.text)).to.deep.equal(first.choices.map((c) => c.text));
    expect(new Set(first.choices.map((c) => c.text)).size).to.be.greaterThan(1);
    expect(first.usage!.prompt_tokens).to.equal(3);
  });

  it("stop: the text ends before the stop sequence, whole and streamed", async () => {
    const whole = await served.client.completions.create({ model: MODEL, prompt: "The", max_tokens: 40, temperature: 0 });
    const text = whole.choices[0]!.text;
    const stop = text.slice(12, 15);
    const expected = text.slice(0, text.indexOf(stop));
    const stopped = await served.client.completions.create({ model: MODEL, prompt: "The", max_tokens: 40, temperature: 0, stop: [stop] });
    expect(stopped.choices[0]).to.include({ text: expected, finish_reason: "stop" });

    const stream = await served.client.chat.completions.create({
      model: MODEL, messages: [{ role: "user", content: "Tell me" }], max_tokens: 40, temperature: 0, stream: true,
    });
    let chat = "";
    for await (const chunk of stream) chat += chunk.choices[0]?.delta.content ?? "";
    const chatStop = chat.slice(9, 11);
    const chatExpected = chat.slice(0, chat.indexOf(chatStop));
    const stoppedStream = await served.client.chat.completions.create({
      model: MODEL, messages: [{ role: "user", content: "Tell me" }], max_tokens: 40, temperature: 0, stream: true, stop: chatStop,
    });
    let streamed = "";
    let finish: string | null = null;
    for await (const chunk of stoppedStream) {
      streamed += chunk.choices[0]?.delta.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(streamed).to.equal(chatExpected);
    expect(finish).to.equal("stop");
  });

  it("logprobs: completions' top alternatives and chat's, the greedy token the most likely", async () => {
    const done = await served.client.completions.create({ model: MODEL, prompt: "The", max_tokens: 6, temperature: 0, logprobs: 2 });
    const lp = done.choices[0]!.logprobs!;
    expect(lp.tokens).to.have.length(done.usage!.completion_tokens);
    lp.token_logprobs!.forEach((value, i) => {
      expect(value).to.be.at.most(0);
      const alternatives = Object.values(lp.top_logprobs![i]!);
      expect(value).to.be.closeTo(Math.max(...alternatives), 1e-6);
    });
    const chat = await served.client.chat.completions.create({
      model: MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 3,
    });
    const content = chat.choices[0]!.logprobs!.content!;
    expect(content).to.have.length(chat.usage!.completion_tokens);
    for (const entry of content) {
      expect(entry.top_logprobs).to.have.length(3);
      expect(entry.bytes).to.be.an("array");
      expect(entry.logprob).to.be.closeTo(entry.top_logprobs[0]!.logprob, 1e-6);
    }
  });

  it("errors in OpenAI's shape: the client's BadRequestError and NotFoundError", async () => {
    const bad = await served.client.completions.create({ model: MODEL, prompt: "x", temperature: 3 }).catch((e: unknown) => e);
    expect(bad).to.be.instanceOf(OpenAI.BadRequestError);
    expect((bad as APIError).param).to.equal("temperature");
    const missing = await served.client.chat.completions.create({ model: "nope", messages: [{ role: "user", content: "x" }] }).catch((e: unknown) => e);
    expect(missing).to.be.instanceOf(OpenAI.NotFoundError);
    expect((missing as APIError).code).to.equal("model_not_found");
    const outside = await served.client.completions.create({ model: MODEL, prompt: [84, 999999] }).catch((e: unknown) => e);
    expect(outside).to.be.instanceOf(OpenAI.BadRequestError);
    expect((outside as APIError).param).to.equal("prompt");
    // Malformed JSON (which the served.client never sends) is a 400 in the same shape.
    const raw = await fetch(`${served.base}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: "{" });
    expect(raw.status).to.equal(400);
    const body = (await raw.json()) as { error: { type: string; message: string } };
    expect(body.error.type).to.equal("invalid_request_error");
    // The spec's routes keep their 422.
    const spec = await fetch(`${served.base}/generate`, { method: "POST", headers: { "content-type": "application/json" }, body: "{" });
    expect(spec.status).to.equal(422);
  });
});

describe("OpenAI-compatible API with API keys and a rate limit (npm start)", function () {
  this.timeout(120000);
  let server: ServerProcess;
  let base: string;

  before(async () => {
    server = new ServerProcess({ API_KEYS: "key-one, key-two", RATE_LIMIT_PER_SECOND: "0.001", RATE_LIMIT_BURST: "3" });
    base = (await server.ready()).text;
  });
  after(async () => {
    await server?.stop();
  });

  it("401 without a key or with a wrong one (AuthenticationError); health and metrics stay open", async () => {
    const wrong = new OpenAI({ baseURL: `${base}/v1`, apiKey: "key-three", maxRetries: 0 });
    const err = await wrong.models.list().catch((e: unknown) => e);
    expect(err).to.be.instanceOf(OpenAI.AuthenticationError);
    expect((await fetch(`${base}/generate`, { method: "POST" })).status).to.equal(401);
    expect((await fetch(`${base}/health`)).status).to.equal(200);
    expect((await fetch(`${base}/metrics`)).status).to.equal(200);
    const log = server.transcript();
    for (const key of ["key-one", "key-two", "key-three"]) expect(log).to.not.include(key);
    expect(log).to.include("API keys required");
    expect(await (await fetch(`${base}/metrics`)).text()).to.not.include("key-");
  });

  it("a key passes, is rate limited on its own, and 429 is the client's RateLimitError", async () => {
    const one = new OpenAI({ baseURL: `${base}/v1`, apiKey: "key-one", maxRetries: 0 });
    const two = new OpenAI({ baseURL: `${base}/v1`, apiKey: "key-two", maxRetries: 0 });
    for (let i = 0; i < 3; i++) expect((await one.models.list()).data).to.have.length(1);
    const limited = await one.models.list().catch((e: unknown) => e);
    expect(limited).to.be.instanceOf(OpenAI.RateLimitError);
    expect((limited as APIError).headers?.get("retry-after")).to.match(/^\d+$/);
    // The other key has its own bucket (X-API-Key works as well as Bearer).
    expect((await two.models.list()).data).to.have.length(1);
    const viaHeader = await fetch(`${base}/v1/models`, { headers: { "x-api-key": "key-two" } });
    expect(viaHeader.status).to.equal(200);
  });
});
