/**
 * The /v1 routes and API keys over a real socket with hand-written engines: one engine call
 * per batch (n choices included), chat templates rendered with @huggingface/jinja, errors in
 * OpenAI's shape, 405 with Allow derived from the route list, the spec's 422 unchanged, and
 * API keys on both apps.
 */
import { expect } from "chai";

import { parseModelConfig } from "../../../src/engine/config.js";
import { findChatTemplate } from "../../../src/engine/TorchEngine.js";
import { createApp, createRecsysApp } from "../../../src/http/index.js";
import { DEFAULT_CHAT_TEMPLATE, renderChat } from "../../../src/http/text/openai/chat.js";
import type { GenerateRequest } from "../../../src/types.js";
import { BatchEngine, plain } from "../../helpers/engines.js";
import { postJson, serve, type Running } from "../../helpers/http.js";

const CHATML =
  "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
const LLAMA2 =
  "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}" +
  "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}" +
  "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% else %}{{ ' ' + message['content'] + eos_token }}{% endif %}{% endfor %}";

describe("OpenAI-compatible routes (hand-written engines)", function () {
  const toClose: Running[] = [];
  afterEach(async () => {
    for (const running of toClose.splice(0)) await running.close();
  });
  const start = async (app: Parameters<typeof serve>[0]) => {
    const running = await serve(app);
    toClose.push(running);
    return running;
  };

  it("chat templates: a checkpoint's ChatML and Llama 2 templates, and the default", () => {
    const messages = [{ role: "system", content: "Be brief." }, { role: "user", content: [{ type: "text", text: "Hi" }] }];
    expect(renderChat(messages, { template: CHATML })).to.equal(
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    );
    expect(renderChat([{ role: "user", content: "Hi" }], { template: LLAMA2, bosToken: "<s>", eosToken: "</s>" })).to.equal("<s>[INST] Hi [/INST]");
    expect(() => renderChat([{ role: "assistant", content: "x" }], { template: LLAMA2 })).to.throw(/alternate/);
    expect(renderChat(messages, undefined)).to.equal("system: Be brief.\nuser: Hi\nassistant:");
    expect(DEFAULT_CHAT_TEMPLATE).to.include("add_generation_prompt");
  });

  it("a checkpoint's template: config.json's (an exporter's choice), else tokenizer_config.json's (string or named list)", () => {
    const withTemplate = parseModelConfig(JSON.stringify({ vocab_size: 300, block_size: 8, tokenizer: { kind: "byte" }, chat_template: "C" }));
    const without = parseModelConfig(JSON.stringify({ vocab_size: 300, block_size: 8, tokenizer: { kind: "byte" } }));
    const named = JSON.stringify({ chat_template: [{ name: "tool_use", template: "T" }, { name: "default", template: "D" }], bos_token: { content: "<s>" }, eos_token: "</s>" });
    expect(findChatTemplate({}, withTemplate)).to.deep.equal({ template: "C" });
    expect(findChatTemplate({ "tokenizer_config.json": named }, without)).to.deep.equal({ template: "D", bosToken: "<s>", eosToken: "</s>" });
    expect(findChatTemplate({ "tokenizer_config.json": named }, withTemplate)).to.deep.include({ template: "C" });
    expect(findChatTemplate({}, without)).to.equal(undefined);
  });

  it("the engine gets the checkpoint template's prompt, n choices in one batch call, stop applied", async () => {
    const engine = new BatchEngine({ auto: true });
    const app = createApp(Object.assign(engine, { chatTemplate: () => ({ template: CHATML }) }), { maxWaitMs: 50, modelName: "m" });
    const running = await start(app);
    const response = await postJson(running.base, "/v1/chat/completions", {
      model: "m", messages: [{ role: "user", content: "Hi" }], n: 2, seed: 5, stop: "|im", max_tokens: 7,
    });
    expect(response.status).to.equal(200);
    const body = (await response.json()) as { choices: { index: number; message: { content: string }; finish_reason: string }[]; usage?: unknown };
    expect(engine.batchSizes).to.deep.equal([2]);
    const [first, second] = engine.calls.all[0]!.requests.map(plain) as GenerateRequest[];
    expect(first).to.deep.include({ prompt: "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", maxNewTokens: 7, seed: 5, stop: ["|im"] });
    expect(second!.seed).to.equal(6);
    // The echo engine's text holds the stop sequence: cut before it.
    expect(body.choices.map((c) => [c.index, c.message.content, c.finish_reason])).to.deep.equal([
      [0, "echo:<", "stop"],
      [1, "echo:<", "stop"],
    ]);
    // A hand-written engine reports no token counts: no usage rather than a made-up one.
    expect(body.usage).to.equal(undefined);
  });

  it("errors: OpenAI's shape on /v1 (400, 404, 405 with Allow), the spec's 422 on /generate", async () => {
    const running = await start(createApp(new BatchEngine({ auto: true }), { modelName: "m" }));
    const bad = await postJson(running.base, "/v1/completions", { model: "m", prompt: "x", top_p: 0 });
    expect(bad.status).to.equal(400);
    expect(((await bad.json()) as { error: { type: string; param: string } }).error).to.include({ type: "invalid_request_error", param: "top_p" });
    const unknown = await postJson(running.base, "/v1/completions", { model: "other", prompt: "x" });
    expect(unknown.status).to.equal(404);
    expect(((await unknown.json()) as { error: { code: string; param: string } }).error).to.include({ code: "model_not_found", param: "model" });
    const method = await fetch(`${running.base}/v1/models`, { method: "POST" });
    expect(method.status).to.equal(405);
    expect(method.headers.get("allow")).to.equal("GET, HEAD");
    expect(((await method.json()) as { error: { type: string } }).error.type).to.equal("invalid_request_error");
    // The extensions on the spec's route: 422 out of range, the spec's shape.
    for (const field of [{ top_p: 0 }, { min_p: 2 }, { presence_penalty: 3 }, { repetition_penalty: 0 }, { stop: ["a", "b", "c", "d", "e"] }]) {
      const response = await postJson(running.base, "/generate", { prompt: "x", ...field });
      expect(response.status, JSON.stringify(field)).to.equal(422);
      expect(await response.json()).to.have.property("detail");
    }
  });

  it("OpenAI fields this server does not implement are a 400 naming them, not silently ignored", async () => {
    const running = await start(createApp(new BatchEngine({ auto: true }), { modelName: "m" }));
    const chat = { model: "m", messages: [{ role: "user", content: "x" }] };
    for (const [field, value] of [["functions", [{ name: "f" }]], ["logit_bias", { "50256": -100 }]] as const) {
      const response = await postJson(running.base, "/v1/chat/completions", { ...chat, [field]: value });
      expect(response.status, field).to.equal(400);
      expect(((await response.json()) as { error: { param: string } }).error.param).to.equal(field);
    }
    // Their "off" values are fine.
    const off = await postJson(running.base, "/v1/chat/completions", { ...chat, tools: [], response_format: { type: "text" }, logit_bias: {} });
    expect(off.status).to.equal(200);
    // A hand-written engine cannot enforce a constraint (it has no prepareConstraint): structured
    // output and required tool calls are refused; tools under "auto" are only parsed, so they pass.
    for (const body of [
      { ...chat, response_format: { type: "json_object" } },
      { ...chat, tools: [{ type: "function", function: { name: "f" } }], tool_choice: "required" },
    ]) {
      const refused = await postJson(running.base, "/v1/chat/completions", body);
      expect(refused.status).to.equal(400);
      expect(((await refused.json()) as { error: { message: string } }).error.message).to.match(/not supported by this engine/);
    }
    const auto = await postJson(running.base, "/v1/chat/completions", { ...chat, tools: [{ type: "function", function: { name: "f" } }] });
    expect(auto.status).to.equal(200);
    const suffix = await postJson(running.base, "/v1/completions", { model: "m", prompt: "x", suffix: "end" });
    expect(suffix.status).to.equal(400);
  });

  it("a 400 names the offending field", async () => {
    const running = await start(createApp(new BatchEngine({ auto: true }), { modelName: "m" }));
    const bad = await postJson(running.base, "/v1/chat/completions", { model: "m", messages: [{ role: "robot", content: "x" }] });
    expect(bad.status).to.equal(400);
    const { error } = (await bad.json()) as { error: { type: string; param: string; message: string } };
    expect(error.type).to.equal("invalid_request_error");
    expect(error.param).to.equal("messages.0.role");
  });

  it("a 400 for a nullable field says what the value should be, once", async () => {
    const running = await start(createApp(new BatchEngine({ auto: true }), { modelName: "m" }));
    const bad = await postJson(running.base, "/v1/completions", { model: "m", prompt: "x", max_tokens: -4 });
    expect(bad.status).to.equal(400);
    const { error } = (await bad.json()) as { error: { param: string; message: string; code: string } };
    expect(error).to.deep.include({
      param: "max_tokens",
      code: "greater_than_equal",
      message: "body.max_tokens: Input should be greater than or equal to 1",
    });
  });

  it("API keys guard both apps but /health and /metrics; the project's 401 shape off /v1", async () => {
    const text = await start(createApp(new BatchEngine({ auto: true }), { apiKeys: ["s3cret"] }));
    const recsys = await start(createRecsysApp({ recommend: () => ({ items: [1], fallback: false }) }, { apiKeys: ["s3cret"] }));
    for (const base of [text.base, recsys.base]) {
      expect((await fetch(`${base}/health`)).status).to.equal(200);
      expect((await fetch(`${base}/metrics`)).status).to.equal(200);
      expect((await fetch(`${base}/openapi.json`)).status).to.equal(401);
      expect((await fetch(`${base}/openapi.json`, { headers: { authorization: "Bearer s3cret" } })).status).to.equal(200);
    }
    const denied = await fetch(`${recsys.base}/recommend/1`, { headers: { "x-api-key": "wrong" } });
    expect(denied.status).to.equal(401);
    expect(await denied.json()).to.deep.equal({ detail: "Incorrect API key provided", code: "ERR_UNAUTHORIZED" });
    expect((await fetch(`${recsys.base}/recommend/1`, { headers: { "x-api-key": "s3cret" } })).status).to.equal(200);
    const doc = (await (await fetch(`${text.base}/openapi.json`, { headers: { "x-api-key": "s3cret" } })).json()) as {
      paths: Record<string, Record<string, { responses: Record<string, unknown> }>>;
    };
    expect(doc.paths["/v1/completions"]!["post"]!.responses).to.have.property("401");
    expect(doc.paths["/health"]!["get"]!.responses).to.not.have.property("401");
  });
});
