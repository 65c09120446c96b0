/**
 * POST /v1/responses and GET /v1/responses/{id} over a real socket with hand-written engines:
 * input items rendered as the chat route renders messages, conversation state through the
 * bounded store, the stream's event sequence as the official client parses it, and the
 * limits every /v1 route has (API keys, rate limit, stream admission, disconnects), with
 * errors in OpenAI's shape naming the field.
 */
import { expect } from "chai";
import OpenAI, { APIError } from "openai";

import { createApp } from "../../../src/http/index.js";
import { ResponseStore } from "../../../src/http/text/responses/store.js";
import type { GenerateRequest } from "../../../src/types.js";
import { aborted, deferred } from "../../helpers/deferred.js";
import { BatchEngine, StreamEngine, plain } from "../../helpers/engines.js";
import { postJson, readUntil, serve, type Running } from "../../helpers/http.js";
import { RecordingLimiter } from "../../helpers/limiters.js";

const CHATML =
  "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
const LLAMA2 =
  "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}" +
  "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{{ message['content'] }}{% endfor %}";

interface ResponseBody {
  id: string;
  object: string;
  status: string;
  incomplete_details: { reason: string } | null;
  instructions: string | null;
  previous_response_id: string | null;
  metadata: Record<string, string>;
  output: { type: string; role: string; status: string; content: { type: string; text: string }[] }[];
  usage: unknown;
}

interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

describe("OpenAI Responses API (hand-written engines)", function () {
  const toClose: Running[] = [];
  afterEach(async () => {
    for (const running of toClose.splice(0)) await running.close();
  });
  const start = async (app: Parameters<typeof serve>[0]) => {
    const running = await serve(app);
    toClose.push(running);
    return running;
  };
  const textOf = (body: ResponseBody) => body.output[0]!.content[0]!.text;

  it("input items become the chat route's messages: instructions first, calls and their outputs as tool turns", async () => {
    const engine = new BatchEngine({ auto: true });
    const running = await start(createApp(Object.assign(engine, { chatTemplate: () => ({ template: CHATML }) }), { modelName: "m", maxWaitMs: 1 }));
    const response = await postJson(running.base, "/v1/responses", {
      model: "m",
      instructions: "Be brief.",
      input: [
        { role: "user", content: [{ type: "input_text", text: "Weather" }, { type: "input_text", text: " in Paris?" }] },
        { type: "function_call", call_id: "call_1", name: "weather", arguments: "{\"city\":\"Paris\"}" },
        { type: "function_call_output", call_id: "call_1", output: "sunny" },
      ],
      max_output_tokens: 9,
      seed: 4,
      metadata: { trace: "t1" },
    });
    expect(response.status).to.equal(200);
    const body = (await response.json()) as ResponseBody;
    const [request] = engine.calls.all[0]!.requests.map(plain) as GenerateRequest[];
    const prompt =
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n" +
      "<|im_start|>assistant\n<|im_end|>\n<|im_start|>tool\nsunny<|im_end|>\n<|im_start|>assistant\n";
    expect(request).to.deep.include({ prompt, maxNewTokens: 9, seed: 4 });
    expect(body).to.deep.include({ object: "response", instructions: "Be brief.", metadata: { trace: "t1" }, previous_response_id: null });
    expect(body.id).to.match(/^resp_/);
    expect(body.output).to.have.length(1);
    expect(body.output[0]).to.deep.include({ type: "message", role: "assistant" });
    expect(textOf(body)).to.equal(`echo:${prompt}`);
    // A hand-written engine counts no tokens: no usage rather than a made-up one.
    expect(body.usage).to.equal(null);
  });

  it("previous_response_id continues the stored conversation (instructions not carried); GET returns the response", async () => {
    const engine = new BatchEngine({ auto: true });
    const running = await start(createApp(engine, { modelName: "m", maxWaitMs: 1 }));
    const first = (await (await postJson(running.base, "/v1/responses", { model: "m", input: "Hi", instructions: "Sys" })).json()) as ResponseBody;
    const second = await postJson(running.base, "/v1/responses", { model: "m", input: "More", previous_response_id: first.id });
    expect(second.status).to.equal(200);
    const body = (await second.json()) as ResponseBody;
    expect(body.previous_response_id).to.equal(first.id);
    const prompts = engine.calls.all.map((call) => call.requests[0]!.prompt);
    expect(prompts[0]).to.equal("system: Sys\nuser: Hi\nassistant:");
    expect(prompts[1]).to.equal(`user: Hi\nassistant: ${textOf(first)}\nuser: More\nassistant:`);
    const third = (await (await postJson(running.base, "/v1/responses", { model: "m", input: [{ role: "user", content: "Again" }], previous_response_id: body.id })).json()) as ResponseBody;
    expect(engine.calls.all[2]!.requests[0]!.prompt).to.equal(`user: Hi\nassistant: ${textOf(first)}\nuser: More\nassistant: ${textOf(body)}\nuser: Again\nassistant:`);
    // The same turn by reference to the stored output item (what the AI SDK sends), not by previous_response_id.
    const referenced = await postJson(running.base, "/v1/responses", {
      model: "m", input: [{ role: "user", content: "Hi" }, { type: "item_reference", id: (first.output[0] as unknown as { id: string }).id }, { role: "user", content: "More" }],
    });
    expect(referenced.status).to.equal(200);
    expect(engine.calls.all[3]!.requests[0]!.prompt).to.equal(prompts[1]);
    const dangling = await postJson(running.base, "/v1/responses", { model: "m", input: [{ type: "item_reference", id: "msg_gone" }] });
    expect(dangling.status).to.equal(404);
    expect(((await dangling.json()) as ErrorBody).error.param).to.equal("input.0.id");
    // An item id is not a response id.
    expect((await fetch(`${running.base}/v1/responses/${(first.output[0] as unknown as { id: string }).id}`)).status).to.equal(404);
    const got = await fetch(`${running.base}/v1/responses/${first.id}`);
    expect(got.status).to.equal(200);
    expect(await got.json()).to.deep.equal(first);
    expect(third.previous_response_id).to.equal(body.id);
  });

  it("unknown, expired and unstored ids are OpenAI's 404; store: false keeps nothing", async () => {
    let now = 1_000_000;
    const running = await start(createApp(new BatchEngine({ auto: true }), { modelName: "m", maxWaitMs: 1, responseStore: { maxBytes: 1 << 20, ttlMs: 60_000 } }));
    const missing = await postJson(running.base, "/v1/responses", { model: "m", input: "x", previous_response_id: "resp_nope" });
    expect(missing.status).to.equal(404);
    expect(((await missing.json()) as ErrorBody).error).to.deep.include({ type: "invalid_request_error", param: "previous_response_id" });
    const get = await fetch(`${running.base}/v1/responses/resp_nope`);
    expect(get.status).to.equal(404);
    expect(((await get.json()) as ErrorBody).error.message).to.equal("Response with id 'resp_nope' not found.");
    const unstored = (await (await postJson(running.base, "/v1/responses", { model: "m", input: "x", store: false })).json()) as ResponseBody & { store: boolean };
    expect(unstored.store).to.equal(false);
    expect((await fetch(`${running.base}/v1/responses/${unstored.id}`)).status).to.equal(404);
    expect((await postJson(running.base, "/v1/responses", { model: "m", input: "x", previous_response_id: unstored.id })).status).to.equal(404);

    // The store itself: expiry, least recently used out first by bytes, an oversized value refused.
    const store = new ResponseStore<{ v: string }>({ maxBytes: 30, ttlMs: 1000, now: () => now });
    expect(store.set("a", { v: "aaaa" })).to.equal(true);
    expect(store.set("b", { v: "bbbb" })).to.equal(true);
    expect(store.get("a")).to.deep.equal({ v: "aaaa" }); // "a" is now the most recently used
    expect(store.set("c", { v: "cccc" })).to.equal(true); // 3 x 12 bytes > 30: "b" goes
    expect([store.get("a"), store.get("b"), store.get("c")]).to.deep.equal([{ v: "aaaa" }, undefined, { v: "cccc" }]);
    expect(store.set("big", { v: "x".repeat(64) })).to.equal(false);
    expect(store.size.entries).to.equal(2);
    now += 1000;
    expect(store.get("a")).to.equal(undefined);
    expect(store.set("d", { v: "dddd" })).to.equal(true);
    expect(store.size).to.deep.equal({ entries: 1, bytes: 12 });
    const none = await start(createApp(new BatchEngine({ auto: true }), { modelName: "m", maxWaitMs: 1, responseStore: { maxBytes: 0, ttlMs: 1000 } }));
    const kept = (await (await postJson(none.base, "/v1/responses", { model: "m", input: "x" })).json()) as ResponseBody;
    expect((await fetch(`${none.base}/v1/responses/${kept.id}`)).status).to.equal(404);
  });

  it("a 400 names the field: unknown ones, those not implemented, and bad input items", async () => {
    const engine = new BatchEngine({ auto: true });
    const running = await start(createApp(Object.assign(engine, { chatTemplate: () => ({ template: LLAMA2 }) }), { modelName: "m", maxWaitMs: 1 }));
    const cases: [object, string][] = [
      [{ frobnicate: 1 }, "frobnicate"],
      [{ n: 2 }, "n"],
      [{ tools: [{ type: "web_search" }] }, "tools.0.type"],
      [{ tools: [{ type: "function", name: "no spaces" }] }, "tools.0.name"],
      [{ tools: [{ type: "function", name: "f" }], tool_choice: { type: "function", name: "g" } }, "tool_choice"],
      [{ tool_choice: { type: "file_search" } }, "tool_choice"],
      [{ tool_choice: "required" }, "tool_choice"], // no tools to call
      [{ text: { format: { type: "json_schema", name: "x" } } }, "text.format.schema"],
      [{ text: { verbosity: "high" } }, "text.verbosity"],
      [{ include: ["message.output_text.logprobs"] }, "include"],
      [{ reasoning: { effort: "high" } }, "reasoning"],
      [{ background: true }, "background"],
      [{ truncation: "auto" }, "truncation"],
      [{ max_output_tokens: 0 }, "max_output_tokens"],
      [{ temperature: 3 }, "temperature"],
      [{ input: [] }, "input"],
      [{ input: [{ type: "reasoning", summary: [] }] }, "input.0.type"],
      [{ input: [{ role: "user", content: [{ type: "input_image", image_url: "x" }] }] }, "input.0.content.0.type"],
      [{ input: [{ role: "robot", content: "x" }] }, "input.0.role"],
      [{ input: [{ type: "function_call_output", call_id: "nobody", output: "1" }] }, "input.0.call_id"],
      [{ input: [{ role: "assistant", content: "x" }] }, "input"], // the checkpoint's template refuses it
    ];
    for (const [fields, param] of cases) {
      const response = await postJson(running.base, "/v1/responses", { model: "m", input: "x", ...fields });
      expect(response.status, JSON.stringify(fields)).to.equal(400);
      const { error } = (await response.json()) as ErrorBody;
      expect(error, JSON.stringify(fields)).to.include({ type: "invalid_request_error", param });
    }
    // Their "off" values pass.
    const off = await postJson(running.base, "/v1/responses", {
      model: "m", input: "x", tools: [], tool_choice: "auto", text: { format: { type: "text" } }, include: [], reasoning: null,
      truncation: "disabled", background: false, store: true, parallel_tool_calls: true, stream_options: null,
    });
    expect(off.status).to.equal(200);
    const model = await postJson(running.base, "/v1/responses", { model: "other", input: "x" });
    expect(model.status).to.equal(404);
    expect(((await model.json()) as ErrorBody).error).to.include({ code: "model_not_found", param: "model" });
    expect(engine.calls.all).to.have.length(1);
  });

  it("tools: calls in the model's text become function_call items, whole and streamed; their outputs continue the conversation", async () => {
    const call = '<tool_call>\n{"name": "weather", "arguments": {"city": "Paris"}}\n</tool_call>';
    const pieces = ["Let me look. ", "<tool_", "call>\n{\"name\": \"weather\", ", "\"arguments\": {\"city\": ", "\"Paris\"}}\n</tool_call>"];
    expect(pieces.join("")).to.equal(`Let me look. ${call}`);
    const engine = new StreamEngine(async function* () {
      yield* pieces;
    });
    const prompts: string[] = [];
    engine.generateBatch = (requests) => {
      prompts.push(...requests.map((request) => request.prompt));
      return Promise.resolve(requests.map(() => call));
    };
    const running = await start(createApp(engine, { modelName: "m", maxWaitMs: 1 }));
    const tools = [{ type: "function" as const, name: "weather", description: "The weather in a city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }, strict: true }];
    const client = new OpenAI({ baseURL: `${running.base}/v1`, apiKey: "unused", maxRetries: 0 });
    const whole = await client.responses.create({ model: "m", input: "Weather in Paris?", tools });
    expect(whole.output).to.have.length(1);
    expect(whole.output[0]).to.deep.include({ type: "function_call", name: "weather", arguments: '{"city":"Paris"}' });
    const callId = (whole.output[0] as OpenAI.Responses.ResponseFunctionToolCall).call_id;
    expect(callId).to.match(/^call_/);
    expect(whole.tools).to.deep.equal(tools);
    expect(whole.tool_choice).to.equal("auto");
    // The demo's template knows no tools: they are described in a system message (the chat route's default format).
    expect(prompts[0]).to.match(/^system: You may call one or more functions[\s\S]*"name":"weather"[\s\S]*\nuser: Weather in Paris\?\nassistant:$/);

    const stream = client.responses.stream({ model: "m", input: "Weather in Paris?", tools });
    const types: string[] = [];
    let argumentDeltas = "";
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === "response.function_call_arguments.delta") argumentDeltas += event.delta;
    }
    const final = await stream.finalResponse();
    expect(types).to.deep.equal([
      "response.created", "response.in_progress",
      "response.output_item.added", "response.content_part.added", "response.output_text.delta",
      "response.output_text.done", "response.content_part.done", "response.output_item.done",
      "response.output_item.added", ...types.filter((type) => type === "response.function_call_arguments.delta"),
      "response.function_call_arguments.done", "response.output_item.done", "response.incomplete",
    ]);
    expect(types.filter((type) => type === "response.function_call_arguments.delta").length).to.be.greaterThan(0);
    // Streamed arguments are the model's text as written.
    expect(JSON.parse(argumentDeltas)).to.deep.equal({ city: "Paris" });
    expect(final.output.map((item) => item.type)).to.deep.equal(["message", "function_call"]);
    expect(final.output_text).to.equal("Let me look. ");
    expect(final.output[1]).to.deep.include({ name: "weather", arguments: argumentDeltas });

    // The result goes back as a function_call_output, after the stored call (previous_response_id).
    await client.responses.create({ model: "m", previous_response_id: whole.id, input: [{ type: "function_call_output", call_id: callId, output: "sunny" }], tools });
    expect(prompts[1]).to.match(/user: Weather in Paris\?\nassistant: <tool_call>\n\{"name":"weather","arguments":\{"city":"Paris"\}\}\n<\/tool_call>\ntool: <tool_response>\nsunny\n<\/tool_response>\nassistant:$/);
  });

  it("streams the Responses events in order, as the official client accumulates them; no [DONE]", async () => {
    const engine = new StreamEngine(async function* () {
      yield "Hel";
      yield "";
      yield "lo";
    });
    const running = await start(createApp(engine, { modelName: "m" }));
    const client = new OpenAI({ baseURL: `${running.base}/v1`, apiKey: "unused", maxRetries: 0 });
    const stream = client.responses.stream({ model: "m", input: "Hi", max_output_tokens: 8 });
    const types: string[] = [];
    const sequence: number[] = [];
    for await (const event of stream) {
      types.push(event.type);
      sequence.push(event.sequence_number);
    }
    const final = await stream.finalResponse();
    expect(types).to.deep.equal([
      "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
      "response.output_text.delta", "response.output_text.delta", "response.output_text.done", "response.content_part.done",
      "response.output_item.done", "response.incomplete",
    ]);
    expect(sequence).to.deep.equal(types.map((_type, index) => index));
    expect(final.output_text).to.equal("Hello");
    // A plain engine cannot tell a stop from the limit: OpenAI's incomplete, with its reason.
    expect(final.status).to.equal("incomplete");
    expect(final.incomplete_details).to.deep.equal({ reason: "max_output_tokens" });
    expect(engine.calls.all[0]!.request).to.deep.include({ prompt: "user: Hi\nassistant:", maxNewTokens: 8 });
    const stored = await client.responses.retrieve(final.id);
    expect(stored.output_text).to.equal("Hello");

    const raw = await postJson(running.base, "/v1/responses", { model: "m", input: "Hi", stream: true });
    expect(raw.headers.get("content-type")).to.match(/^text\/event-stream/);
    const text = await raw.text();
    expect(text).to.match(/^event: response\.created\ndata: \{"type":"response\.created"/);
    expect(text).to.not.include("[DONE]");
  });

  it("a failure after the stream opened is an `error` event in OpenAI's shape, and nothing is stored", async () => {
    const engine = new StreamEngine(async function* () {
      yield "a";
      throw Object.assign(new Error("the model failed"), { code: "ERR_INFERENCE" });
    });
    const running = await start(createApp(engine, { modelName: "m" }));
    const response = await postJson(running.base, "/v1/responses", { model: "m", input: "Hi", stream: true });
    const text = await response.text();
    const events = text.trim().split("\n\n").map((block) => JSON.parse(block.split("\n")[1]!.slice("data: ".length)) as { type: string; sequence_number: number });
    expect(events.map((event) => event.type).slice(-2)).to.deep.equal(["response.output_text.delta", "error"]);
    const error = events.at(-1)!;
    expect(error).to.deep.equal({ type: "error", code: "inference", message: "Internal Server Error", param: null, sequence_number: events.length - 1 });
    const id = (events[0] as unknown as { response: { id: string } }).response.id;
    expect((await fetch(`${running.base}/v1/responses/${id}`)).status).to.equal(404);
  });

  it("a client that leaves mid-stream cancels the engine's generation", async () => {
    const engine = new StreamEngine(async function* (call) {
      yield "a";
      await aborted(call.signal!);
    });
    const running = await start(createApp(engine, { modelName: "m" }));
    const controller = new AbortController();
    const response = await postJson(running.base, "/v1/responses", { model: "m", input: "Hi", stream: true }, { signal: controller.signal });
    await readUntil(response.body!.getReader(), (text) => text.includes("response.output_text.delta"));
    controller.abort();
    const call = await engine.calls.next();
    await aborted(call.signal!);
    await call.closed.promise;
  });

  it("stream admission, rate limit, API keys and request ids as on the other /v1 routes", async () => {
    const gate = deferred();
    const engine = new StreamEngine(async function* () {
      yield "a";
      await gate.promise;
    });
    const limiter = new RecordingLimiter();
    const running = await start(createApp(engine, { modelName: "m", maxActiveStreams: 1, rateLimiter: limiter, apiKeys: ["k1"] }));
    const headers = { authorization: "Bearer k1" };
    const held = await postJson(running.base, "/v1/responses", { model: "m", input: "Hi", stream: true }, { headers });
    await readUntil(held.body!.getReader(), (text) => text.includes("response.output_text.delta"));
    const refused = await postJson(running.base, "/v1/responses", { model: "m", input: "Hi", stream: true }, { headers });
    expect(refused.status).to.equal(503);
    expect(refused.headers.get("retry-after")).to.equal("1");
    expect(((await refused.json()) as ErrorBody).error.type).to.equal("server_error");
    gate.resolve();

    const client = new OpenAI({ baseURL: `${running.base}/v1`, apiKey: "wrong", maxRetries: 0 });
    const unauthorized = await client.responses.create({ model: "m", input: "Hi" }).catch((err: unknown) => err);
    expect(unauthorized).to.be.instanceOf(APIError).with.property("status", 401);
    limiter.decide = () => false;
    const limited = await postJson(running.base, "/v1/responses", { model: "m", input: "Hi" }, { headers: { ...headers, "x-request-id": "req-42" } });
    expect(limited.status).to.equal(429);
    expect(limited.headers.get("retry-after")).to.match(/^\d+$/);
    expect(limited.headers.get("x-request-id")).to.equal("req-42");
    expect(((await limited.json()) as ErrorBody).error).to.include({ type: "rate_limit_error", code: "rate_limit_exceeded" });
  });
});
