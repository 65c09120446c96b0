/**
 * OpenAI's Responses API against the real server entry (`node dist/src/server.js`) with real
 * clients: the official `openai` package (responses.create, responses.stream, retrieve), the
 * AI SDK's default `openai("model")` (generateText, streamText) and the OpenAI Agents SDK
 * (`@openai/agents`: an agent's run), on the demo model and on an exported Llama-family
 * checkpoint with its own chat template.
 */
import { createOpenAI } from "@ai-sdk/openai";
import { Agent, OpenAIProvider, Runner, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled, tool as agentTool } from "@openai/agents";
import { generateText, Output, stepCountIs, streamText, tool } from "ai";
import { expect } from "chai";
import OpenAI, { APIError } from "openai";
import { z } from "zod";

import { exportHfFixtures, type HfCheckpoints } from "../helpers/hfModels.js";
import { ServerProcess, serveWithOpenAi } from "./serverProcess.js";

const MODEL = "brown-gpt";

/**
 * An Agents SDK runner against this server: its provider with a custom OpenAI client (the SDK
 * depends on its own copy of the openai package: the same client at run time), the
 * Responses API, no tracing. A runner per server: the SDK's default provider caches its
 * models with the client they were first made with.
 */
function agentRunner(base: string): Runner {
  const openAIClient = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 }) as unknown as Parameters<typeof setDefaultOpenAIClient>[0];
  setTracingDisabled(true);
  setOpenAIAPI("responses");
  return new Runner({ modelProvider: new OpenAIProvider({ openAIClient, useResponses: true }), tracingDisabled: true });
}

describe("OpenAI Responses API with real clients (npm start)", function () {
  this.timeout(180000);

  describe("the demo model", () => {
    const served = serveWithOpenAi();

    it("responses.create: the chat route's text for the same conversation, usage, incomplete at the limit", async () => {
      const response = await served.client.responses.create({
        model: MODEL, instructions: "You are a newspaper.", input: "What did the jury say?", max_output_tokens: 12, temperature: 0,
      });
      expect(response.object).to.equal("response");
      const chat = await served.client.chat.completions.create({
        model: MODEL,
        messages: [{ role: "system", content: "You are a newspaper." }, { role: "user", content: "What did the jury say?" }],
        max_tokens: 12,
        temperature: 0,
      });
      expect(response.output_text).to.equal(chat.choices[0]!.message.content);
      expect(response.usage).to.deep.include({
        input_tokens: chat.usage!.prompt_tokens,
        output_tokens: chat.usage!.completion_tokens,
        total_tokens: chat.usage!.total_tokens,
      });
      expect(response.usage!.input_tokens_details.cached_tokens).to.be.a("number").and.at.least(0);
      if (chat.choices[0]!.finish_reason === "length") {
        expect(response.status).to.equal("incomplete");
        expect(response.incomplete_details).to.deep.equal({ reason: "max_output_tokens" });
      } else {
        expect(response.status).to.equal("completed");
      }
    });

    it("responses.stream: deltas add up to the whole response; the final response is the stored one", async () => {
      const request = { model: MODEL, input: [{ role: "user" as const, content: "Tell me about Atlanta." }], max_output_tokens: 24, temperature: 0 };
      const whole = await served.client.responses.create(request);
      const stream = served.client.responses.stream(request);
      let deltas = "";
      stream.on("response.output_text.delta", (event) => {
        deltas += event.delta;
      });
      const final = await stream.finalResponse();
      expect(deltas).to.equal(whole.output_text);
      expect(final.output_text).to.equal(whole.output_text);
      // The same counts, except that the second run of the prompt finds it in the prefix cache.
      const { input_tokens_details: wholeDetails, ...wholeCounts } = whole.usage!;
      const { input_tokens_details: finalDetails, ...finalCounts } = final.usage!;
      expect(finalCounts).to.deep.equal(wholeCounts);
      expect(finalDetails.cached_tokens).to.be.within(wholeDetails.cached_tokens, final.usage!.input_tokens - 1);
      const stored = await served.client.responses.retrieve(final.id);
      expect(stored.output_text).to.equal(final.output_text);
    });

    it("previous_response_id continues the conversation: the same text as the whole conversation sent at once", async () => {
      // `stop` is this server's extension (not in the client's types).
      const first = await served.client.responses.create({ model: MODEL, input: "Hi", max_output_tokens: 8, temperature: 0, stop: ["\n"] } as OpenAI.Responses.ResponseCreateParamsNonStreaming);
      const next = await served.client.responses.create({ model: MODEL, input: "And then?", previous_response_id: first.id, max_output_tokens: 8, temperature: 0 });
      const whole = await served.client.responses.create({
        model: MODEL,
        input: [
          { role: "user", content: "Hi" },
          { role: "assistant", content: first.output_text },
          { role: "user", content: "And then?" },
        ],
        max_output_tokens: 8,
        temperature: 0,
        store: false,
      });
      expect(next.output_text).to.equal(whole.output_text);
      expect(next.usage!.input_tokens).to.equal(whole.usage!.input_tokens);
      const missing = await served.client.responses.retrieve(whole.id).catch((err: unknown) => err);
      expect(missing).to.be.instanceOf(APIError).with.property("status", 404);
      const unknown = await served.client.responses.create({ model: MODEL, input: "x", previous_response_id: "resp_unknown" }).catch((err: unknown) => err);
      expect(unknown).to.be.instanceOf(APIError).with.property("status", 404);
      expect((unknown as APIError).param).to.equal("previous_response_id");
    });

    it("the AI SDK's default openai(model): generateText and streamText", async () => {
      const provider = createOpenAI({ baseURL: `${served.base}/v1`, apiKey: "unused" });
      const chat = await served.client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Hello" }], max_tokens: 10, temperature: 0 });
      const generated = await generateText({ model: provider(MODEL), prompt: "Hello", maxOutputTokens: 10, temperature: 0, maxRetries: 0 });
      expect(generated.text).to.equal(chat.choices[0]!.message.content);
      expect(generated.usage.inputTokens).to.equal(chat.usage!.prompt_tokens);
      expect(generated.usage.outputTokens).to.equal(chat.usage!.completion_tokens);
      expect(generated.finishReason).to.equal(chat.choices[0]!.finish_reason === "length" ? "length" : "stop");
      const streamed = streamText({ model: provider(MODEL), prompt: "Hello", maxOutputTokens: 10, temperature: 0, maxRetries: 0 });
      let text = "";
      for await (const piece of streamed.textStream) text += piece;
      expect(text).to.equal(generated.text);
      expect((await streamed.usage).outputTokens).to.equal(generated.usage.outputTokens);
      // A second turn: the SDK refers to the stored assistant turn by its item id (item_reference).
      const again = await generateText({
        model: provider(MODEL),
        messages: [{ role: "user", content: "Hello" }, ...generated.response.messages, { role: "user", content: "And?" }],
        maxOutputTokens: 6, temperature: 0, maxRetries: 0,
      });
      const whole = await served.client.chat.completions.create({
        model: MODEL,
        messages: [{ role: "user", content: "Hello" }, { role: "assistant", content: generated.text }, { role: "user", content: "And?" }],
        max_tokens: 6, temperature: 0,
      });
      expect(again.text).to.equal(whole.choices[0]!.message.content);
    });

    it("the OpenAI Agents SDK: an agent's run returns the model's answer", async () => {
      const runner = agentRunner(served.base);
      // An agent's run fails on an incomplete response (cut by the limit), as against OpenAI: a
      // stop sequence taken from the greedy text ends it first.
      const ask = { model: MODEL, instructions: "You are a newspaper.", input: [{ role: "user" as const, content: "What did the jury say?" }], max_output_tokens: 40, temperature: 0 };
      const long = await served.client.responses.create(ask);
      const stop = long.output_text.slice(8, 11);
      const direct = await served.client.responses.create({ ...ask, stop: [stop] } as OpenAI.Responses.ResponseCreateParamsNonStreaming);
      expect(direct.status).to.equal("completed");
      const agent = new Agent({
        name: "Reporter", instructions: "You are a newspaper.", model: MODEL,
        modelSettings: { temperature: 0, maxTokens: 40, providerData: { stop: [stop] } },
      });
      const result = await runner.run(agent, "What did the jury say?");
      expect(result.finalOutput).to.equal(direct.output_text);
      const streamed = await runner.run(agent, "What did the jury say?", { stream: true });
      let text = "";
      for await (const piece of streamed.toTextStream()) text += piece;
      await streamed.completed;
      expect(text).to.equal(direct.output_text);
    });
  });

  describe("the demo model with tools and structured output (constrained decoding)", () => {
    const served = serveWithOpenAi();
    const weather = z.object({ city: z.string().max(16) });
    const weatherTool = {
      type: "function" as const, name: "weather", description: "The weather in a city", strict: true,
      parameters: { type: "object", properties: { city: { type: "string", maxLength: 16 } }, required: ["city"], additionalProperties: false },
    };

    it("openai: tool_choice required gives a function_call whose arguments validate, whole and streamed; text.format json_schema", async () => {
      // One call (parallel_tool_calls false): the grammar ends after it, so greedy decoding stops there.
      const request = {
        model: MODEL, input: "Weather in Paris?", tools: [weatherTool], tool_choice: "required" as const, parallel_tool_calls: false, max_output_tokens: 200, temperature: 0,
      };
      const whole = await served.client.responses.create(request);
      expect(whole.status).to.equal("completed");
      const calls = whole.output.filter((item): item is OpenAI.Responses.ResponseFunctionToolCall => item.type === "function_call");
      expect(calls).to.have.length(1);
      expect(whole.output).to.have.length(1);
      expect(calls[0]!.name).to.equal("weather");
      expect(weather.safeParse(JSON.parse(calls[0]!.arguments)).success, calls[0]!.arguments).to.equal(true);

      const stream = served.client.responses.stream(request);
      let deltas = "";
      stream.on("response.function_call_arguments.delta", (event) => {
        deltas += event.delta;
      });
      const final = await stream.finalResponse();
      const streamedCalls = final.output.filter((item) => item.type === "function_call") as OpenAI.Responses.ResponseFunctionToolCall[];
      expect(streamedCalls.map((call) => JSON.parse(call.arguments))).to.deep.equal(calls.map((call) => JSON.parse(call.arguments)));
      expect(deltas).to.equal(streamedCalls.map((call) => call.arguments).join(""));

      const person = { type: "object", properties: { name: { type: "string", maxLength: 12 }, age: { type: "integer", minimum: 0, maximum: 120 } }, required: ["name", "age"], additionalProperties: false };
      const structured = await served.client.responses.create({
        model: MODEL, input: "A person.", max_output_tokens: 200, temperature: 0,
        text: { format: { type: "json_schema", name: "person", schema: person, strict: true } },
      });
      expect(structured.status).to.equal("completed");
      expect(z.object({ name: z.string().max(12), age: z.number().int().min(0).max(120) }).strict().safeParse(JSON.parse(structured.output_text)).success, structured.output_text).to.equal(true);
      expect(structured.text?.format).to.deep.include({ type: "json_schema", name: "person" });
    });

    it("the AI SDK's openai(model): a tool call, its result, then the answer (generateText); streamText with a tool", async () => {
      const provider = createOpenAI({ baseURL: `${served.base}/v1`, apiKey: "unused" });
      const executed: unknown[] = [];
      const tools = { weather: tool({ description: "The weather in a city", inputSchema: weather, execute: async (input) => (executed.push(input), "sunny") }) };
      const result = await generateText({
        model: provider(MODEL), prompt: "Weather in Paris?", tools, maxOutputTokens: 120, temperature: 0, maxRetries: 0,
        providerOptions: { openai: { parallelToolCalls: false } },
        stopWhen: stepCountIs(2),
        // A model that knows nothing of tools: the call is required first, then the answer is text.
        prepareStep: ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? "required" : "none" }),
      });
      expect(result.steps).to.have.length(2);
      expect(result.steps[0]!.toolCalls.map((call) => call.toolName)).to.include("weather");
      expect(executed.length).to.be.greaterThan(0);
      expect(weather.safeParse(executed[0]).success).to.equal(true);
      expect(result.steps[0]!.toolResults[0]!.output).to.equal("sunny");
      expect(result.text).to.be.a("string");
      expect(result.steps[1]!.toolCalls).to.have.length(0);

      const streamed = streamText({
        model: provider(MODEL), prompt: "Weather in Paris?", tools: { weather: tool({ description: "The weather in a city", inputSchema: weather }) },
        toolChoice: { type: "tool", toolName: "weather" }, maxOutputTokens: 120, temperature: 0, maxRetries: 0,
        providerOptions: { openai: { parallelToolCalls: false } },
      });
      const calls = await streamed.toolCalls;
      expect(calls.length).to.be.greaterThan(0);
      expect(weather.safeParse(calls[0]!.input).success).to.equal(true);

      const person = z.object({ name: z.string().max(12), age: z.number().int().min(0).max(120) });
      const structured = await generateText({ model: provider(MODEL), prompt: "A person.", output: Output.object({ schema: person }), maxOutputTokens: 200, temperature: 0, maxRetries: 0 });
      expect(person.safeParse(structured.output).success).to.equal(true);
    });

    it("the OpenAI Agents SDK: an agent with one function tool calls it, then answers (structured output)", async () => {
      const runner = agentRunner(served.base);
      const executed: { city: string }[] = [];
      const lookup = agentTool({
        name: "weather", description: "The weather in a city", parameters: weather,
        execute: async (input) => {
          executed.push(input);
          return "sunny";
        },
      });
      // toolChoice "required" makes the first turn a call (the SDK resets it after a call); the
      // output type, JSON enforced token by token, makes the second a complete answer.
      const agent = new Agent({
        name: "Forecaster", instructions: "Answer with the weather.", model: MODEL, tools: [lookup],
        outputType: z.object({ answer: z.string().max(24) }),
        modelSettings: { toolChoice: "required", parallelToolCalls: false, temperature: 0, maxTokens: 200 },
      });
      const result = await runner.run(agent, "Weather in Paris?");
      expect(executed).to.have.length.greaterThan(0);
      expect(weather.safeParse(executed[0]).success).to.equal(true);
      const kinds = result.newItems.map((item) => item.type);
      expect(kinds.indexOf("tool_call_item")).to.be.lessThan(kinds.indexOf("tool_call_output_item"));
      expect(kinds.at(-1)).to.equal("message_output_item");
      expect(result.finalOutput).to.have.property("answer").that.is.a("string");
    });
  });

  describe("an exported Llama-family checkpoint with its chat template", () => {
    let fixtures: HfCheckpoints;
    let server: ServerProcess | undefined;

    before(() => {
      fixtures = exportHfFixtures(["llama3-bf16"]);
    });
    after(async () => {
      await server?.stop();
      fixtures?.cleanup();
    });

    it("responses.create and responses.stream render the checkpoint's template as chat does", async () => {
      server = new ServerProcess({ SERVICE_CKPT: fixtures.path("llama3-bf16"), SERVICE_MODEL_NAME: "llama" });
      const base = (await server.ready()).text;
      const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
      const chat = await client.chat.completions.create({
        model: "llama", messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hi" }], max_tokens: 8, temperature: 0,
      });
      const response = await client.responses.create({ model: "llama", instructions: "Be brief.", input: "Hi", max_output_tokens: 8, temperature: 0 });
      expect(response.output_text).to.equal(chat.choices[0]!.message.content);
      expect(response.usage!.input_tokens).to.equal(chat.usage!.prompt_tokens);
      const stream = client.responses.stream({ model: "llama", instructions: "Be brief.", input: "Hi", max_output_tokens: 8, temperature: 0 });
      const final = await stream.finalResponse();
      expect(final.output_text).to.equal(response.output_text);
      const next = await client.responses.create({ model: "llama", input: "More", previous_response_id: response.id, max_output_tokens: 4, temperature: 0 });
      expect(next.previous_response_id).to.equal(response.id);
      expect(next.usage!.input_tokens).to.be.greaterThan(response.usage!.input_tokens);

      const provider = createOpenAI({ baseURL: `${base}/v1`, apiKey: "unused" });
      const generated = await generateText({ model: provider("llama"), system: "Be brief.", prompt: "Hi", maxOutputTokens: 8, temperature: 0, maxRetries: 0 });
      expect(generated.text).to.equal(response.output_text);
      let streamed = "";
      for await (const piece of streamText({ model: provider("llama"), system: "Be brief.", prompt: "Hi", maxOutputTokens: 8, temperature: 0, maxRetries: 0 }).textStream) streamed += piece;
      expect(streamed).to.equal(response.output_text);

      // An agent whose answer is structured: the JSON is enforced with this checkpoint's tokenizer, and ends.
      const agent = new Agent({
        name: "Greeter", instructions: "Be brief.", model: "llama",
        outputType: z.object({ greeting: z.string().max(12) }), modelSettings: { temperature: 0, maxTokens: 120 },
      });
      const result = await agentRunner(base).run(agent, "Hi");
      expect(result.finalOutput).to.have.property("greeting").that.is.a("string");
    });
  });
});
